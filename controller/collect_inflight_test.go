package controller

import (
	"io"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/domain"
)

// TestNoRetryBesideItsPreviousAttemptsCollection: a collection that
// outlasts its tick goes on in the background; the retry of the task being
// collected is not launched into the directory its files are read from
// until the collection is over. (Found by review once collection ran beside
// the launches.)
func TestNoRetryBesideItsPreviousAttemptsCollection(t *testing.T) {
	mark := filepath.Join(t.TempDir(), "mark")
	script := `if [ -e ` + mark + ` ]; then echo second > out.txt; else touch ` + mark + `; echo first > out.txt; yes filler-line | head -1500; exit 3; fi
`
	h := newHarness(t, unsandboxed(fastYAML, "the task leaves a mark outside its workspace for its retry"), shellProject(map[string]string{"S01-a.md": script}))
	var slowed atomic.Bool
	h.shape(&shapedTransport{get: func(p string, w io.Writer) (io.Writer, error) {
		if strings.HasSuffix(p, "/p/tasks/S01/task.log") && slowed.CompareAndSwap(false, true) {
			// A slow link: attempt 1's log trickles in for about 20 s.
			return &trickle{w: w, piece: 64, pause: 100 * time.Millisecond}, nil
		}
		return nil, nil
	}})
	h.tickUntil("attempt 1 to fail and be retried", func() bool { return h.task("S01").RetriesUsed == 1 })
	n := h.ctl.nodes["local"]
	if !n.collecting.Load() {
		t.Fatal("the collection of attempt 1 is already over: the slow link did not hold it")
	}
	h.clock.Advance(time.Minute) // the retry is due
	for deadline := time.Now().Add(time.Minute); n.collecting.Load(); {
		if time.Now().After(deadline) {
			t.Fatal("the slow collection never ended")
		}
		h.tick()
		if a := h.task("S01").Attempt; a == 2 && n.collecting.Load() {
			t.Fatalf("S01 attempt 2 was launched while attempt 1's collection still runs (task %s)", h.task("S01").Status)
		}
		time.Sleep(100 * time.Millisecond)
	}
	h.tickUntil("S01 to complete", func() bool { return h.task("S01").Status == domain.Completed })
}
