package wrapper

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/proc"
	"github.com/dispatch-tool/dispatch/wrapper/taskfiles"
)

// A file made on a node's disk is most of what an attempt costs there (a
// new inode each, on ext4 a scan past every inode freed lately): an
// attempt that goes straight to its tool writes its process record once,
// with the tool, not once at prepare and again when the tool starts.
// status.json stays written before the tool starts (a tool may read it),
// then final; a tool that ends within toolPIDAfter gets no status written
// between the two only to add its pid (the final one has it). Counted by
// inotify: each atomic write makes one temporary file. Whether the tool
// ended within toolPIDAfter is bounded by the status's own times: a
// rewrite with the pid comes toolPIDAfter after the tool started, which is
// after started_at and before completed_at; an attempt slower than that
// (a loaded machine) is tried again.
func TestQuickAttemptWritesItsRecordOnce(t *testing.T) {
	t.Parallel()
	for try := 1; ; try++ {
		made, st := quickAttemptFiles(t)
		if st.Status != wire.StatusCompleted || st.ToolPID <= 0 {
			t.Fatalf("final status %+v", st)
		}
		took := parseTime(t, st.CompletedAt).Sub(parseTime(t, st.StartedAt))
		if took >= toolPIDAfter-time.Millisecond {
			if try == 5 {
				t.Skipf("no attempt of 5 ended within %s of its start (the last took %s): the machine is too busy to tell", toolPIDAfter, took)
			}
			continue
		}
		want := map[string]int{
			"record":                1,
			taskfiles.FileHeartbeat: 1,
			taskfiles.FileStatus:    2, // running, final
			taskfiles.FilePID:       1,
		}
		for name, n := range want {
			if made[name] != n {
				t.Errorf("%s made %d times, want %d (all made: %v; the attempt took %s)", name, made[name], n, made, took)
			}
		}
		return
	}
}

// TestToolPIDWrittenWhileItRuns: a tool that runs on has its pid in a
// running status.json toolPIDAfter after it started.
func TestToolPIDWrittenWhileItRuns(t *testing.T) {
	t.Parallel()
	tk := newTask(t, "", wire.Launch{Command: shell("sleep 60"), HeartbeatSeconds: 60})
	tk.run(t, "")
	st := tk.waitStatus(t, "tool_pid", func(st *wire.Status) bool { return st.ToolPID > 1 })
	if st.Status != wire.StatusRunning || st.ToolPID == st.PID || !proc.GroupAlive(st.ToolPID) {
		t.Fatalf("status %+v: want running, with the live tool's pid", st)
	}
	if err := syscall.Kill(-st.ToolPID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	tk.waitFinal(t)
}

// quickAttemptFiles runs `true` in a new task and counts the files its
// attempt made, by name ("record" for the process record), and returns its
// final status.
func quickAttemptFiles(t *testing.T) (map[string]int, *wire.Status) {
	t.Helper()
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
	st := tk.waitFinal(t)
	made := map[string]int{}
	for _, name := range inotifyNames(t, fd) {
		// The temporary file of an atomic write of X is .X.tmp<random>.
		if base, _, ok := strings.Cut(strings.TrimPrefix(name, "."), ".tmp"); ok && strings.HasPrefix(name, ".") {
			name = base
		}
		if name == filepath.Base(rec) {
			name = "record"
		}
		made[name]++
	}
	return made, st
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
