package service

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestDailyPrune: the daemon prunes after First, then every Every, logs
// what went and a failure, and stops with its context.
func TestDailyPrune(t *testing.T) {
	var mu sync.Mutex
	var log bytes.Buffer
	calls := 0
	ctx, cancel := context.WithCancel(context.Background())
	d := &DailyPrune{
		Log:   slog.New(slog.NewTextHandler(&log, nil)), // read once Run has returned
		First: time.Millisecond, Every: 5 * time.Millisecond,
		Prune: func(context.Context) ([]Pruned, error) {
			mu.Lock()
			defer mu.Unlock()
			calls++
			if calls == 1 {
				return nil, errors.New("disk on fire")
			}
			if calls == 3 {
				cancel()
			}
			return []Pruned{{Project: "app", Runs: 1, Files: 2, Rows: 3}}, nil
		},
	}
	done := make(chan struct{})
	go func() { d.Run(ctx); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("DailyPrune did not stop with its context")
	}
	mu.Lock()
	defer mu.Unlock()
	if calls != 3 {
		t.Errorf("pruned %d times, want 3", calls)
	}
	for _, want := range []string{"prune failed; the next one finishes it", "disk on fire", "pruned runs retention lets go", "project=app", "rows=3"} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, log.String())
		}
	}
}
