package wrapper

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/taskfiles"
)

// TestSuperviseLeavesANewerAttemptsStatus: a supervisor handed attempt 2
// of a directory whose launch.json names attempt 3 (replaced meanwhile: a
// late batch job, a late `run --dir`) starts nothing and writes no status:
// attempt 3's final status.json, maybe not yet collected, stays as it was.
// Before, it was replaced by a failed status of attempt 2.
func TestSuperviseLeavesANewerAttemptsStatus(t *testing.T) {
	tk := newTask(t, "", wire.Launch{Attempt: 3, Command: shell("echo ran")})
	final := wire.Status{Task: tk.name, Attempt: 3, Status: wire.StatusCompleted, ExitCode: 0, WrapperVersion: Version}
	if err := taskfiles.WriteStatusDurable(tk.dir, &final); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(tk.path(taskfiles.FileStatus))
	if err != nil {
		t.Fatal(err)
	}
	// A batch job's document: lock_fd 0, the supervisor takes the lock.
	doc, _ := json.Marshal([]superviseItem{{Dir: tk.dir, Task: tk.name, Attempt: 2}})
	var stderr bytes.Buffer
	if code := supervise(nil, bytes.NewReader(doc), &stderr); code == 0 {
		t.Fatalf("supervise of a replaced attempt: exit 0; want it to start nothing\n%s", stderr.String())
	}
	after, err := os.ReadFile(tk.path(taskfiles.FileStatus))
	if err != nil || !bytes.Equal(before, after) {
		t.Fatalf("status.json of attempt 3 changed (%v):\nbefore %s\nafter  %s", err, before, after)
	}
	if log, _ := os.ReadFile(tk.path(taskfiles.FileWrapper)); !strings.Contains(string(log), "replaced meanwhile") {
		t.Errorf("wrapper.log does not say why attempt 2 did not start: %q", log)
	}
	// The lock is free again: the next launch is not refused.
	lock, ok, err := taskfiles.LockTask(tk.dir, 0)
	if err != nil || !ok {
		t.Fatalf("the task's lock is still held after the supervisor gave up: %v", err)
	}
	lock.Close()
}
