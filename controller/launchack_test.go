package controller

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/wire"
)

// TestStartFailureAfterTheReplyEndsTheAttempt: `run` acknowledges the
// attempt, then its supervisor cannot prepare it (output/ is a file on the
// node). The failed status it writes ends the attempt as a start failure,
// as when `run` reported one, with no requeue; the retry runs, the file
// moved aside with the failed attempt's status, and completes.
func TestStartFailureAfterTheReplyEndsTheAttempt(t *testing.T) {
	h := newHarness(t, unsandboxed("", "the test is of the launch"), shellProject(map[string]string{"S01-a.md": "echo hi\n"}))
	dir := filepath.Join(h.work, "p", "tasks", "S01")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "output"), []byte("not a directory\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	h.tickUntil("S01 to complete", func() bool {
		h.clock.Advance(time.Second)
		return h.task("S01").Status == domain.Completed
	})
	ctx := context.Background()
	runs, err := h.st.Attempts(ctx, "p", "S01")
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 2 || runs[0].Status != domain.Failed || runs[0].ErrorClass != wire.ClassStart ||
		!strings.Contains(runs[0].Error, "did not start on the node") || runs[1].Status != domain.Completed {
		t.Fatalf("attempts %+v; want attempt 1 failed (start, saying it did not start) and attempt 2 completed", runs)
	}
	evs, err := h.st.Events(ctx, "p", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		if e.Kind == "requeue" || e.Kind == "stale" {
			t.Errorf("event %s: %s; an acknowledged attempt is neither requeued nor stale", e.Kind, e.Message)
		}
	}
}
