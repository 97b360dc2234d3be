package wrapper

import (
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/nodestatus"
	"github.com/dispatch-tool/dispatch/wrapper/taskfiles"
)

// TestWatchSeesADirectoryMadeWhileWatchesAreAdded: a new project's first
// task directory made in the moment between the watcher's watch on the
// project's tasks/ and its listing of it. The watcher used to list first
// and watch after: a directory made in that moment was seen by neither,
// nothing in it was told, and the status of every task of the project
// reached the controller only at the next full look, 30 seconds later —
// the 200-task batch of make bench that took 30.4 s instead of 2.
func TestWatchSeesADirectoryMadeWhileWatchesAreAdded(t *testing.T) {
	root := t.TempDir()
	project := filepath.Join(root, "demo")
	tasks := filepath.Join(project, "tasks")
	task := filepath.Join(tasks, "T1")
	var once sync.Once
	nodestatus.TestHookWatched = func(dir string) {
		if dir != tasks {
			return // the work directory, at the start
		}
		once.Do(func() {
			if err := os.Mkdir(task, 0o755); err != nil {
				t.Error(err)
			}
		})
	}
	t.Cleanup(func() { nodestatus.TestHookWatched = nil })
	fs := frames(t, root, true)
	if f := <-fs; f.Type != wire.FrameHello {
		t.Fatalf("first frame %+v, want hello", f)
	}
	// The project comes with its tasks/ (made under a hidden name, which
	// the watcher skips, and renamed): one event, whose handling watches
	// tasks/ and lists it.
	hidden := filepath.Join(root, ".demo")
	if err := os.MkdirAll(filepath.Join(hidden, "tasks"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(hidden, project); err != nil {
		t.Fatal(err)
	}
	// The task starts once its directory is there (the hook has run).
	for i := 0; ; i++ {
		if _, err := os.Stat(task); err == nil {
			break
		}
		<-fs // a beat every 50 ms: no sleep needed to wait
		if i > 200 {
			t.Fatal("the hook never made the task directory")
		}
	}
	if err := taskfiles.WriteFileAtomic(filepath.Join(task, taskfiles.FileStatus), []byte(`{"status":"completed","attempt":1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if ts := nextChange(t, fs, "demo/T1"); ts.Status == nil || ts.Status.Status != wire.StatusCompleted {
		t.Fatalf("the frame's status: %+v, want completed", ts)
	}
}
