package main

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/home"
)

// TestLockHomeWaitsForAnEndingController: a command that found no
// controller on the socket takes the lock once an ending controller lets
// it go, instead of failing with "another controller is running"; a
// holder that never lets go still fails it, naming the holder.
func TestLockHomeWaitsForAnEndingController(t *testing.T) {
	dir := t.TempDir()
	held, err := home.AcquireLock(dir)
	if err != nil {
		t.Fatal(err)
	}
	released := make(chan struct{})
	go func() {
		time.Sleep(200 * time.Millisecond) // the ending controller's last writes
		close(released)
		held.Release()
	}()
	lock, err := lockHome(context.Background(), dir)
	if err != nil {
		t.Fatalf("lockHome while a controller ends: %v", err)
	}
	select {
	case <-released:
	default:
		t.Fatal("lockHome took a lock that was still held")
	}
	// Now this test holds it and never lets go.
	_, err = lockHome(context.Background(), dir)
	if !errors.Is(err, home.ErrLocked) {
		t.Fatalf("lockHome under a holder that stays = %v, want ErrLocked", err)
	}
	lock.Release()
}
