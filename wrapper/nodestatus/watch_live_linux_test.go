package nodestatus

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/taskfiles"
)

// TestPrimeProbesEveryLockOfAnUnreadableIndex: a task that makes its
// project's live index unreadable (chmod 000 tasks/.live) must not hide
// the live supervisors from a watch that starts: the index is then not
// trusted and every lock is probed, as when it is not a directory (its
// death would otherwise be told only by the full look, 30 s later).
func TestPrimeProbesEveryLockOfAnUnreadableIndex(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	dir := filepath.Join(root, "demo", "tasks", "T1")
	idx := filepath.Join(root, "demo", "tasks", DirLive)
	for _, d := range []string{dir, idx} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := taskfiles.WriteJSONAtomic(filepath.Join(dir, taskfiles.FileStatus), wire.Status{Attempt: 1, Status: "running"}); err != nil {
		t.Fatal(err)
	}
	lock, ok, err := taskfiles.LockTask(dir, 0)
	if err != nil || !ok {
		t.Fatalf("lock: %v %v", ok, err)
	}
	defer lock.Close()
	if err := os.Chmod(idx, 0); err != nil {
		t.Fatal(err)
	}
	defer os.Chmod(idx, 0o700)

	sc := NewScanner(root)
	if err := unreadableTo(idx, sc.Prime); err != nil {
		t.Fatalf("make the index unreadable to this thread: %v", err)
	}
	if !sc.Known["demo/T1"].alive {
		t.Fatal("a watch starting beside an unreadable live index found no live supervisor; want every lock probed")
	}
}

// TestLiveStatusListsAProjectWithAnUnreadableIndex: a task that makes its
// project's live index unreadable (chmod 000 tasks/.live, as an
// unsandboxed one can) must not fail `status --live` for every project of
// the node (the controller's steady pull of it): that project is listed
// whole, as the full listing lists it and the watch probes it, and the
// others by their index and the named tasks, as always (a named task of
// the unreadable project is listed once).
func TestLiveStatusListsAProjectWithAnUnreadableIndex(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	task := func(project, id, status string, live bool) {
		t.Helper()
		dir := filepath.Join(root, project, "tasks", id)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := taskfiles.WriteJSONAtomic(filepath.Join(dir, taskfiles.FileStatus), wire.Status{Task: id, Attempt: 1, Status: status}); err != nil {
			t.Fatal(err)
		}
		if !live {
			return
		}
		lock, ok, err := taskfiles.LockTask(dir, 0)
		if err != nil || !ok {
			t.Fatalf("lock %s: %v %v", dir, ok, err)
		}
		t.Cleanup(func() { lock.Close() })
		if err := MarkLive(dir, 1); err != nil {
			t.Fatal(err)
		}
	}
	task("a", "RUN", wire.StatusRunning, true)
	task("a", "DONE", wire.StatusCompleted, false)
	task("b", "RUN", wire.StatusRunning, true)
	task("b", "DONE", wire.StatusCompleted, false)
	task("b", "NAMED", wire.StatusCompleted, false)
	idx := filepath.Join(root, "a", "tasks", DirLive)
	if err := os.Chmod(idx, 0); err != nil {
		t.Fatal(err)
	}
	defer os.Chmod(idx, 0o700)

	var ns *wire.NodeStatus
	var err error
	if err := unreadableTo(idx, func() {
		ns, err = LiveStatus(t.Context(), "v", root, "", nil, map[string][]string{"a": {"DONE"}, "b": {"NAMED"}}, nil)
	}); err != nil {
		t.Fatalf("make the index unreadable to this thread: %v", err)
	}
	if err != nil {
		t.Fatalf("status --live beside an unreadable live index: %v; want the other projects answered", err)
	}
	var got []string
	for _, ts := range ns.Tasks {
		got = append(got, ts.Project+"/"+ts.Task)
		if ts.Task == "RUN" && !ts.Alive {
			t.Errorf("%s/RUN not alive; want its supervisor found", ts.Project)
		}
	}
	if want := "a/DONE a/RUN b/NAMED b/RUN"; strings.Join(got, " ") != want {
		t.Errorf("listed %q, want %q (project a whole, b's index and named task)", strings.Join(got, " "), want)
	}
	if ns.Listing != wire.ListingLive {
		t.Errorf("listing %q, want %q", ns.Listing, wire.ListingLive)
	}
}

// unreadableTo calls f on a thread to which path cannot be listed: as
// root, chmod stops no read, so f runs on a thread without the
// capabilities that override it. The thread is never unlocked, so it ends
// with the goroutine.
func unreadableTo(path string, f func()) error {
	done := make(chan error)
	go func() {
		runtime.LockOSThread()
		if err := dropFileCapabilities(); err != nil {
			done <- err
			return
		}
		if _, err := os.ReadDir(path); err == nil {
			done <- fmt.Errorf("%s can still be listed", path)
			return
		}
		f()
		done <- nil
	}()
	return <-done
}

// dropFileCapabilities drops, from the calling thread's effective set,
// the capabilities that let root read what its mode refuses.
func dropFileCapabilities() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return err
	}
	data[0].Effective &^= 1<<unix.CAP_DAC_OVERRIDE | 1<<unix.CAP_DAC_READ_SEARCH
	return unix.Capset(&hdr, &data[0])
}

// TestLiveStatusWithAnUnreadableTasksDir: a task that makes its whole
// project's tasks/ unreadable (chmod 000, one level above its own
// directory) fails neither `status --live` nor the other projects: they
// are listed as usual, and that project's named tasks as far as they can
// be read.
func TestLiveStatusWithAnUnreadableTasksDir(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	runningInTwoProjects(t, root)
	tasks := filepath.Join(root, "a", "tasks")
	if err := os.Chmod(tasks, 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(tasks, 0o700) })
	var ns *wire.NodeStatus
	var err error
	if e := unreadableTo(tasks, func() {
		ns, err = LiveStatus(t.Context(), "v", root, "", nil, map[string][]string{"a": {"T1"}}, nil)
	}); e != nil {
		t.Fatal(e)
	}
	if err != nil {
		t.Fatalf("LiveStatus with a/tasks unreadable: %v", err)
	}
	var got []string
	for _, ts := range ns.Tasks {
		got = append(got, ts.Project+"/"+ts.Task)
	}
	if strings.Join(got, " ") != "b/T1" {
		t.Errorf("listed %v, want b/T1 (a's tasks cannot be read, b's are live)", got)
	}
}

// runningInTwoProjects makes a running attempt T1, marked live, in each of
// projects a and b under root.
func runningInTwoProjects(t *testing.T, root string) {
	t.Helper()
	for _, p := range []string{"a", "b"} {
		dir := filepath.Join(root, p, "tasks", "T1")
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := taskfiles.WriteJSONAtomic(filepath.Join(dir, taskfiles.FileStatus), wire.Status{Task: "T1", Attempt: 1, Status: wire.StatusRunning}); err != nil {
			t.Fatal(err)
		}
		if err := MarkLive(dir, 1); err != nil {
			t.Fatal(err)
		}
	}
}
