package domain

import (
	"testing"
	"time"
)

func TestHeartbeatQuiet(t *testing.T) {
	tests := []struct {
		hb    string
		quiet time.Duration
		ok    bool
	}{
		{"7 1764370000000000000 1500000000\n", 1500 * time.Millisecond, true},
		{"7 1764370000000000000 0", 0, true},
		{"7 1764370000000000000\n", 0, false},     // no stall watch, or an older wrapper
		{"beat 1\n", 0, false},                    // a test's or a stranger's
		{"7 1 -5", 0, false},                      // negative
		{"7 1 x", 0, false},                       // not a number
		{"7 1 99999999999999999", maxQuiet, true}, // clamped
		{"7 1 1 extra", 0, false},
	}
	for _, tc := range tests {
		if q, ok := HeartbeatQuiet(tc.hb); q != tc.quiet || ok != tc.ok {
			t.Errorf("HeartbeatQuiet(%q) = %s, %v; want %s, %v", tc.hb, q, ok, tc.quiet, tc.ok)
		}
	}
}
