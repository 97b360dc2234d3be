package taskfiles

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestRawCallsRetryEINTR: the atomic write's rename and task.log's open
// are the kernel's calls, not os's, which retried them when a signal
// interrupted them (a network or FUSE file system): they are retried here
// too, not failed. Not parallel: it replaces the calls of the package.
func TestRawCallsRetryEINTR(t *testing.T) {
	rename, open := sysRename, sysOpen
	t.Cleanup(func() { sysRename, sysOpen = rename, open })
	renames, opens := 0, 0
	sysRename = func(from, to string) error {
		if renames++; renames == 1 {
			return syscall.EINTR
		}
		return rename(from, to)
	}
	sysOpen = func(path string, mode int, perm uint32) (int, error) {
		if opens++; opens == 1 {
			return -1, syscall.EINTR
		}
		return open(path, mode, perm)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	if err := WriteFileAtomic(path, []byte("x"), 0o600); err != nil {
		t.Fatalf("write with its rename interrupted once: %v", err)
	}
	if data, err := os.ReadFile(path); err != nil || string(data) != "x" || renames != 2 {
		t.Fatalf("read %q, %v after %d renames; want x after 2", data, err, renames)
	}
	l, err := CreateTaskLog(filepath.Join(dir, FileLog), 1<<10)
	if err != nil || opens != 2 {
		t.Fatalf("task.log with its open interrupted once: %v after %d opens; want it made after 2", err, opens)
	}
	l.Close()
}
