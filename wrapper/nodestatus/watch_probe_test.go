package nodestatus

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/taskfiles"
)

// TestChangeFrameProbesANewerStatusAgain: a look finds attempt 1 over and
// its supervisor gone; before the frame is written, attempt 2's supervisor
// takes the lock and writes "running". The frame must not pair the old
// probe with the new status (the controller would fail the live attempt as
// "supervisor gone"): it says alive.
func TestChangeFrameProbesANewerStatusAgain(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	dir := filepath.Join(root, "demo", "tasks", "T1")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	write := func(st wire.Status) {
		t.Helper()
		if err := taskfiles.WriteJSONAtomic(filepath.Join(dir, taskfiles.FileStatus), st); err != nil {
			t.Fatal(err)
		}
	}
	write(wire.Status{Attempt: 1, Status: "failed"})
	sc := NewScanner(root)
	sc.Prime()
	write(wire.Status{Attempt: 1, Status: "failed", Error: "again"})
	if got := sc.Scan(true); len(got) != 1 || sc.Known["demo/T1"].alive {
		t.Fatalf("scan = %v, alive %v; want the change, no supervisor", got, sc.Known["demo/T1"].alive)
	}
	if ts := sc.status("demo/T1"); ts.Alive || ts.Status == nil || ts.Status.Attempt != 1 {
		t.Fatalf("frame of the version scanned = %+v; want attempt 1, not alive", ts)
	}

	lock, ok, err := taskfiles.LockTask(dir, 0)
	if err != nil || !ok {
		t.Fatalf("lock: %v %v", ok, err)
	}
	defer lock.Close()
	write(wire.Status{Attempt: 2, Status: "running"})
	ts := sc.status("demo/T1")
	if ts.Status == nil || ts.Status.Attempt != 2 || !ts.Alive {
		t.Fatalf("frame after attempt 2 started = alive %v, status %+v; want attempt 2 running, alive", ts.Alive, ts.Status)
	}
}
