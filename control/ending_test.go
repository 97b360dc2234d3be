//go:build linux

package control

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"
)

// TestSendToAnEndingController: a controller whose loop has ended takes no
// request; Send waits until its socket is gone and says no controller runs
// (the caller then does the work itself), instead of failing the request
// with "the controller is ending" (seen as a flaky MCP start after stop).
func TestSendToAnEndingController(t *testing.T) {
	homeDir := t.TempDir()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ended := make(chan struct{})
	stop, err := Serve(context.Background(), homeDir, log, make(chan Call), ended)
	if err != nil {
		t.Fatal(err)
	}
	close(ended) // the loop is over; the socket is still there
	done := make(chan error, 1)
	go func() {
		rep, err := Send(context.Background(), homeDir, Request{Op: "retry", Project: "p", Tasks: []string{"S01"}})
		if err == nil {
			err = errors.New("answer: " + rep.Error + rep.Message)
		}
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("Send returned while the ending controller's socket was open: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	stop()
	select {
	case err := <-done:
		if !errors.Is(err, ErrNoController) {
			t.Fatalf("Send to an ending controller = %v, want ErrNoController once its socket is gone", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Send did not return after the socket went")
	}
}
