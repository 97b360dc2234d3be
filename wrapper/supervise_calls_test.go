package wrapper

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestSelfKeepsOnlyASuccess: the supervisor reads its own start time once
// a process; a read that failed (EMFILE, a `ps` that could not fork) must
// not fail every later attempt of the batch: the next call reads again,
// and once one succeeded nothing is read any more.
func TestSelfKeepsOnlyASuccess(t *testing.T) {
	t.Parallel()
	calls := 0
	results := []error{syscall.EMFILE, nil, errors.New("not called")}
	o := keepSuccess(func() (selfID, error) {
		err := results[calls]
		calls++
		return selfID{pid: 7, start: "s"}, err
	})
	if _, err := o.get(); !errors.Is(err, syscall.EMFILE) {
		t.Fatalf("first read: err %v, want EMFILE", err)
	}
	for i := range 2 {
		id, err := o.get()
		if err != nil || id.pid != 7 || id.start != "s" {
			t.Fatalf("call %d after a failed read = %+v, %v; want the value read again", i+2, id, err)
		}
	}
	if calls != 2 {
		t.Fatalf("%d reads, want 2 (the failed one, then one success kept)", calls)
	}
}

// TestRemoveFileRetriesEINTR: removeFile's unlink is the kernel's call, not
// os.Remove's, which retried it when a signal interrupted it (a network or
// FUSE file system): it is retried here too, and the file is gone. Not
// parallel: it replaces the package's call.
func TestRemoveFileRetriesEINTR(t *testing.T) {
	unlink := sysUnlink
	t.Cleanup(func() { sysUnlink = unlink })
	calls := 0
	sysUnlink = func(path string) error {
		if calls++; calls == 1 {
			return syscall.EINTR
		}
		return unlink(path)
	}
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := removeFile(path); err != nil || calls != 2 {
		t.Fatalf("remove with its unlink interrupted once: %v after %d calls; want it gone after 2", err, calls)
	}
	if _, err := os.Lstat(path); !os.IsNotExist(err) {
		t.Fatalf("file still there: %v", err)
	}
}
