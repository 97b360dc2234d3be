package wrapper

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/nodestatus"
	"github.com/dispatch-tool/dispatch/wrapper/taskfiles"
)

// TestPollToldOfAShortAttempt: without file events, an attempt whose whole
// life (lock, marker, status running, final status) falls between two
// 100 ms polls — a no-op task, a tool missing, FailStart — is told by the
// next poll, not by the full look 30 s later: its mark, made and removed
// meanwhile, changed the live index, and its project is walked.
func TestPollToldOfAShortAttempt(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "demo", "tasks", "T1")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := taskfiles.WriteFileAtomic(filepath.Join(dir, taskfiles.FileStatus), []byte(`{"status":"completed","attempt":1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	fs := frames(t, root, false)
	if f := <-fs; f.Type != wire.FrameHello {
		t.Fatalf("first frame %+v, want hello", f)
	}
	// A relaunch (attempt 2) that lives a few milliseconds, as a launch does it.
	lock, ok, err := taskfiles.LockTask(dir, 0)
	if err != nil || !ok {
		t.Fatalf("lock: %v %v", ok, err)
	}
	if err := nodestatus.MarkLive(dir, 2); err != nil {
		t.Fatal(err)
	}
	if err := taskfiles.WriteFileAtomic(filepath.Join(dir, taskfiles.FileStatus), []byte(`{"status":"running","attempt":2}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := taskfiles.WriteFileAtomic(filepath.Join(dir, taskfiles.FileStatus), []byte(`{"status":"failed","attempt":2}`), 0o644); err != nil {
		t.Fatal(err)
	}
	nodestatus.UnmarkLive(dir, 2)
	lock.Close()
	began := time.Now()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case f := <-fs:
			if f.Type == wire.FrameChange && len(f.Statuses) > 0 && f.Statuses[0].Status != nil && f.Statuses[0].Status.Attempt == 2 {
				t.Logf("told after %v", time.Since(began))
				return
			}
		case <-deadline:
			t.Fatalf("attempt 2's final status not told within 5 s (the poll is every 100 ms)")
		}
	}
}

// TestPollToldOfRealShortAttempts: real launches of `true` and of a
// missing tool, watched without file events, are each told ended within a
// few polls (a poll that followed only the live index's marks told them
// 30 s later, by the full look: their marks came and went between two).
func TestPollToldOfRealShortAttempts(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "demo", "tasks"), 0o755); err != nil {
		t.Fatal(err)
	}
	fs := frames(t, root, false)
	if f := <-fs; f.Type != wire.FrameHello {
		t.Fatalf("first frame %+v, want hello", f)
	}
	const n = 8
	var batch wire.LaunchBatch
	for i := range n {
		id := "T" + string(rune('0'+i))
		cmd := shell("true")
		if i%2 == 1 {
			cmd = []string{"/nonexistent/tool"}
		}
		batch.Launches = append(batch.Launches, wire.LaunchItem{Dir: filepath.Join(root, "demo", "tasks", id), Spec: "# s\n",
			Launch: wire.Launch{Project: "demo", Task: id, Attempt: 1, Node: "local", Command: cmd, HeartbeatSeconds: 0.1, TimeoutSeconds: 20}})
	}
	doc, _ := json.Marshal(batch)
	began := time.Now()
	if out, code := runWrapper(t, string(doc), "launch"); code != 0 {
		t.Fatalf("launch: %d %s", code, out)
	}
	t.Logf("launch answered after %v", time.Since(began))
	final := map[string]time.Duration{}
	deadline := time.After(5 * time.Second)
	for len(final) < n {
		select {
		case f := <-fs:
			for _, ts := range f.Statuses {
				if ts.Status != nil && ts.Status.Final() && !ts.Alive {
					if _, ok := final[ts.Task]; !ok {
						final[ts.Task] = time.Since(began)
					}
				}
			}
		case <-deadline:
			t.Fatalf("told: %v", final)
		}
	}
	t.Logf("final told after: %v", final)
	for id, d := range final {
		if d > 3*time.Second {
			t.Errorf("%s: final told after %v", id, d)
		}
	}
}
