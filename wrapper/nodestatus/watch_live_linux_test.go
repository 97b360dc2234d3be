package nodestatus

import (
	"os"
	"path/filepath"
	"runtime"
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
	done := make(chan error)
	go func() {
		// As root, chmod stops no read: the calls of Prime run on a
		// thread without the capabilities that override it. The thread
		// is never unlocked, so it ends with this goroutine.
		runtime.LockOSThread()
		if err := dropFileCapabilities(); err != nil {
			done <- err
			return
		}
		if _, err := os.ReadDir(idx); err == nil {
			done <- os.ErrInvalid
			return
		}
		sc.Prime()
		done <- nil
	}()
	if err := <-done; err != nil {
		t.Fatalf("make the index unreadable to this thread: %v", err)
	}
	if !sc.Known["demo/T1"].alive {
		t.Fatal("a watch starting beside an unreadable live index found no live supervisor; want every lock probed")
	}
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
