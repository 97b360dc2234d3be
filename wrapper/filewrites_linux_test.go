package wrapper

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/taskfiles"
)

// A file made on a node's disk is most of what an attempt costs there (a
// new inode each, on ext4 a scan past every inode freed lately): an
// attempt that goes straight to its tool writes its process record once,
// with the tool, not once at prepare and again when the tool starts.
// status.json stays written before the tool starts (a tool may read it),
// then with the tool's pid, then final. Counted by inotify: each atomic
// write makes one temporary file.
func TestQuickAttemptWritesItsRecordOnce(t *testing.T) {
	t.Parallel()
	tk := newTask(t, "", wire.Launch{Command: shell("true"), HeartbeatSeconds: 60})
	rec := tk.recordFile()
	// Made as the wrapper makes it, when no test has yet.
	if err := os.Mkdir(filepath.Dir(rec), 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		t.Fatal(err)
	}
	fd, err := syscall.InotifyInit1(syscall.IN_CLOEXEC | syscall.IN_NONBLOCK)
	if err != nil {
		t.Skip("no inotify:", err)
	}
	defer syscall.Close(fd)
	for _, dir := range []string{tk.dir, filepath.Dir(rec)} {
		if _, err := syscall.InotifyAddWatch(fd, dir, syscall.IN_CREATE); err != nil {
			t.Fatal(err)
		}
	}
	tk.run(t, "")
	if st := tk.waitFinal(t); st.Status != wire.StatusCompleted || st.ToolPID <= 0 {
		t.Fatalf("final status %+v", st)
	}
	made := map[string]int{}
	for _, name := range inotifyNames(t, fd) {
		// The temporary file of an atomic write of X is .X.tmp<random>.
		if base, _, ok := strings.Cut(strings.TrimPrefix(name, "."), ".tmp"); ok && strings.HasPrefix(name, ".") {
			name = base
		}
		made[name]++
	}
	want := map[string]int{
		filepath.Base(rec):      1,
		taskfiles.FileHeartbeat: 1,
		taskfiles.FileStatus:    3, // running, with tool_pid, final
		taskfiles.FilePID:       1,
	}
	for name, n := range want {
		if made[name] != n {
			t.Errorf("%s made %d times, want %d (all made: %v)", name, made[name], n, made)
		}
	}
}

// inotifyNames reads the names of every event queued on fd.
func inotifyNames(t *testing.T, fd int) []string {
	t.Helper()
	var names []string
	buf := make([]byte, 64<<10)
	for {
		n, err := syscall.Read(fd, buf)
		if errors.Is(err, syscall.EAGAIN) {
			return names
		}
		if err != nil {
			t.Fatal(err)
		}
		for off := 0; off+syscall.SizeofInotifyEvent <= n; {
			ev := (*syscall.InotifyEvent)(unsafe.Pointer(&buf[off]))
			raw := buf[off+syscall.SizeofInotifyEvent : off+syscall.SizeofInotifyEvent+int(ev.Len)]
			names = append(names, strings.TrimRight(string(raw), "\x00"))
			off += syscall.SizeofInotifyEvent + int(ev.Len)
		}
	}
}
