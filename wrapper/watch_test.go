package wrapper

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/nodestatus"
	"github.com/dispatch-tool/dispatch/wrapper/taskfiles"
)

// frames runs watch over root and returns its frames as they come.
func frames(t *testing.T, root string, notify bool) <-chan wire.Frame {
	t.Helper()
	return nodeFrames(t, root, "", notify)
}

// nodeFrames is frames of `watch --node node`.
func nodeFrames(t *testing.T, root, node string, notify bool) <-chan wire.Frame {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r, w := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- nodestatus.Watch(ctx, Version, root, node, 50*time.Millisecond, w, notify) }()
	out := make(chan wire.Frame, 100)
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			var f wire.Frame
			if err := json.Unmarshal(sc.Bytes(), &f); err != nil {
				t.Errorf("frame %q: %v", sc.Text(), err)
				continue
			}
			out <- f
		}
		close(out)
	}()
	t.Cleanup(func() {
		cancel()
		r.Close()
		if err := <-done; err != nil && ctx.Err() == nil {
			t.Errorf("watch: %v", err)
		}
	})
	return out
}

// nextChange waits for a change frame naming task, skipping beats, and
// returns the task's status the frame carries.
func nextChange(t *testing.T, fs <-chan wire.Frame, task string) wire.TaskStatus {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case f, ok := <-fs:
			if !ok {
				t.Fatalf("watch ended before a change of %s", task)
			}
			if i := slices.Index(f.Tasks, task); f.Type == wire.FrameChange && i >= 0 {
				if len(f.Statuses) != len(f.Tasks) || len(f.Tasks) > nodestatus.FrameTasks {
					t.Fatalf("change frame with %d tasks and %d statuses (at most %d): %+v", len(f.Tasks), len(f.Statuses), nodestatus.FrameTasks, f)
				}
				if ts := f.Statuses[i]; ts.Project+"/"+ts.Task != task {
					t.Fatalf("the status for %s names %s/%s", task, ts.Project, ts.Task)
				}
				return f.Statuses[i]
			}
		case <-deadline:
			t.Fatalf("no change frame for %s", task)
		}
	}
}

func TestWatch(t *testing.T) {
	for _, notify := range []bool{true, false} {
		name := "inotify"
		if !notify {
			name = "polling"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			root := t.TempDir()
			fs := frames(t, root, notify)
			if f := <-fs; f.Type != wire.FrameHello || f.Version != Version {
				t.Fatalf("first frame %+v, want hello", f)
			}
			// A new project, task directory and status: one change.
			dir := filepath.Join(root, "demo", "tasks", "T1")
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			// Marked live, as a launch does before its supervisor starts:
			// without file events, the poll looks where the index says.
			if err := nodestatus.MarkLive(dir, 3); err != nil {
				t.Fatal(err)
			}
			// Give the new directories a moment to be watched: a status
			// written before that is seen by the next look at them.
			if err := taskfiles.WriteFileAtomic(filepath.Join(dir, taskfiles.FileStatus), []byte(`{"status":"running"}`), 0o644); err != nil {
				t.Fatal(err)
			}
			nextChange(t, fs, "demo/T1")
			// A replaced status.json, whose content the frame carries.
			if err := taskfiles.WriteFileAtomic(filepath.Join(dir, taskfiles.FileStatus), []byte(`{"status":"completed","attempt":3}`), 0o644); err != nil {
				t.Fatal(err)
			}
			if ts := nextChange(t, fs, "demo/T1"); ts.Status == nil || ts.Status.Status != wire.StatusCompleted || ts.Status.Attempt != 3 || ts.Dir != dir {
				t.Fatalf("the frame's status: %+v, want attempt 3 completed in %s", ts, dir)
			}
			// A supervisor that starts (its lock taken, its attempt marked,
			// its first status) and dies (its lock released) without a
			// final status: seen by the lock probe.
			lock, ok, err := taskfiles.LockTask(dir, 0)
			if err != nil || !ok {
				t.Fatalf("lock: %v %v", ok, err)
			}
			if err := nodestatus.MarkLive(dir, 4); err != nil {
				t.Fatal(err)
			}
			if err := taskfiles.WriteFileAtomic(filepath.Join(dir, taskfiles.FileStatus), []byte(`{"status":"running","attempt":4}`), 0o644); err != nil {
				t.Fatal(err)
			}
			if ts := nextChange(t, fs, "demo/T1"); !ts.Alive {
				t.Fatalf("the frame's status after the lock was taken: %+v, want alive", ts)
			}
			lock.Close()
			if ts := nextChange(t, fs, "demo/T1"); ts.Alive {
				t.Fatalf("the frame's status after the lock was released: %+v, want not alive", ts)
			}
			// Beats keep coming.
			deadline := time.After(5 * time.Second)
			for beat := false; !beat; {
				select {
				case f := <-fs:
					beat = f.Type == wire.FrameBeat
				case <-deadline:
					t.Fatal("no beat frame")
				}
			}
		})
	}
}

// TestWatchToldOfASupervisorLiveAtItsStart: watch probes at its start only
// the locks of the tasks the live index names (a launch marks its attempt
// there before its supervisor starts); a supervisor alive then is one, and
// its death is told.
func TestWatchToldOfASupervisorLiveAtItsStart(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	dir := filepath.Join(root, "demo", "tasks", "T1")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := nodestatus.MarkLive(dir, 1); err != nil {
		t.Fatal(err)
	}
	if err := taskfiles.WriteFileAtomic(filepath.Join(dir, taskfiles.FileStatus), []byte(`{"status":"running","attempt":1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	lock, ok, err := taskfiles.LockTask(dir, 0)
	if err != nil || !ok {
		t.Fatalf("lock: %v %v", ok, err)
	}
	fs := frames(t, root, true)
	if f := <-fs; f.Type != wire.FrameHello {
		t.Fatalf("first frame %+v, want hello", f)
	}
	lock.Close()
	if ts := nextChange(t, fs, "demo/T1"); ts.Alive || ts.Status == nil || ts.Status.Status != wire.StatusRunning {
		t.Fatalf("the frame's status after the supervisor died: %+v, want running and not alive", ts)
	}
}

// TestWatchEndsWithItsSession: the controller closing the session (stdin)
// ends watch, so no watcher outlives its controller on a node.
func TestWatchEndsWithItsSession(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	stdin, w := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- cmdWatch(context.Background(), []string{"--root", root, "--beat", "20ms"}, stdin, io.Discard)
	}()
	time.Sleep(50 * time.Millisecond)
	w.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("watch: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("watch did not end when its stdin closed")
	}
	if err := cmdWatch(context.Background(), []string{"--beat", "1s"}, stdin, io.Discard); err == nil {
		t.Error("watch without --root: no error")
	}
}

// TestWatchIsNotFlooded: a task rewriting its own status.json in a loop
// gets at most one change frame per nodestatus.MinChangeGap (plus the lock probes'),
// not one per write.
func TestWatchIsNotFlooded(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	dir := filepath.Join(root, "demo", "tasks", "T1")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	fs := frames(t, root, true)
	<-fs // hello
	stop := time.After(time.Second)
	writes := 0
	changes := 0
loop:
	for {
		select {
		case <-stop:
			break loop
		case f := <-fs:
			if f.Type == wire.FrameChange {
				changes++
			}
		default:
			taskfiles.WriteFileAtomic(filepath.Join(dir, taskfiles.FileStatus), []byte(strconv.Itoa(writes)), 0o644)
			writes++
		}
	}
	if limit := int(time.Second/nodestatus.MinChangeGap) + 3; changes > limit || writes < 50 {
		t.Errorf("%d change frames for %d writes in a second; want at most %d", changes, writes, limit)
	}
}

// TestWatchSplitsLargeChanges: many tasks changing at once come in several
// change frames of at most nodestatus.FrameTasks tasks, each with every status.
func TestWatchSplitsLargeChanges(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	const n = 3*nodestatus.FrameTasks + 1
	for i := range n {
		dir := filepath.Join(root, "demo", "tasks", "T"+strconv.Itoa(i))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := nodestatus.MarkLive(dir, i+1); err != nil { // as each launch does
			t.Fatal(err)
		}
	}
	fs := frames(t, root, false)
	if f := <-fs; f.Type != wire.FrameHello {
		t.Fatalf("first frame %+v, want hello", f)
	}
	for i := range n {
		data := []byte(`{"status":"running","attempt":` + strconv.Itoa(i+1) + `}`)
		if err := taskfiles.WriteFileAtomic(filepath.Join(root, "demo", "tasks", "T"+strconv.Itoa(i), taskfiles.FileStatus), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]bool{}
	deadline := time.After(10 * time.Second)
	for len(seen) < n {
		select {
		case f := <-fs:
			if f.Type != wire.FrameChange {
				continue
			}
			if len(f.Tasks) > nodestatus.FrameTasks || len(f.Statuses) != len(f.Tasks) {
				t.Fatalf("change frame with %d tasks and %d statuses, want at most %d, one status each", len(f.Tasks), len(f.Statuses), nodestatus.FrameTasks)
			}
			for i, ts := range f.Statuses {
				if ts.Status == nil || "demo/"+ts.Task != f.Tasks[i] || "T"+strconv.Itoa(ts.Status.Attempt-1) != ts.Task {
					t.Fatalf("status %+v for %s", ts, f.Tasks[i])
				}
				seen[f.Tasks[i]] = true
			}
		case <-deadline:
			t.Fatalf("saw %d of %d tasks change", len(seen), n)
		}
	}
}

// TestScanKeysLooksOnlyWhereTold: a file event makes a look at the task
// directories it names, not at every directory of the work dir (a node
// holding 10,000 finished tasks looked at all of them at every event); a
// change elsewhere waits for the once-a-second full look, and a directory
// gone is forgotten.
func TestScanKeysLooksOnlyWhereTold(t *testing.T) {
	root := t.TempDir()
	write := func(id, status string) {
		t.Helper()
		dir := filepath.Join(root, "p", "tasks", id)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := taskfiles.WriteFileAtomic(filepath.Join(dir, taskfiles.FileStatus), []byte(status), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 50 {
		write("T"+strconv.Itoa(i), `{"status":"completed"}`)
	}
	sc := nodestatus.NewScanner(root)
	sc.Scan(true)
	write("T1", `{"status":"failed"}`)
	write("T2", `{"status":"failed","attempt":2}`)
	if got := sc.ScanKeys(map[string]bool{"p/T1": true}, nil); !slices.Equal(got, []string{"p/T1"}) {
		t.Fatalf("scanKeys(T1) = %v, want [p/T1]", got)
	}
	if got := sc.Scan(true); !slices.Equal(got, []string{"p/T2"}) {
		t.Fatalf("the full look after it = %v, want [p/T2] (what the event did not name)", got)
	}
	if err := os.RemoveAll(filepath.Join(root, "p", "tasks", "T3")); err != nil {
		t.Fatal(err)
	}
	if got := sc.ScanKeys(map[string]bool{"p/T3": true, "p/../../x": true}, nil); len(got) != 0 {
		t.Fatalf("scanKeys of a removed directory = %v, want nothing", got)
	}
	if _, held := sc.Known["p/T3"]; held {
		t.Error("a removed task directory is still known")
	}
}
