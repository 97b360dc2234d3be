package main

import (
	"testing"
	"time"
)

func TestPauseEnd(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.Local)
	tests := []struct {
		name  string
		until time.Time
		want  string
	}{
		{"later today", now.Add(2 * time.Hour), "14:00:00"},
		{"tomorrow", now.Add(24 * time.Hour), "2026-03-02 12:00:00"},
		{"just past midnight", time.Date(2026, 3, 2, 0, 0, 1, 0, time.Local), "2026-03-02 00:00:01"},
		{"given in another zone", now.Add(time.Hour).UTC(), "13:00:00"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := pauseEnd(tt.until, now); got != tt.want {
				t.Errorf("pauseEnd = %q, want %q", got, tt.want)
			}
		})
	}
}
