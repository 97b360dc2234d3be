package wrapper

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/internal/wtest"
	"github.com/dispatch-tool/dispatch/wrapper/proc"
	"github.com/dispatch-tool/dispatch/wrapper/taskfiles"
)

// startVictim starts a process that no task owns, in its own process group,
// as another program of the node user would be.
func startVictim(t *testing.T) *victim {
	t.Helper()
	cmd := exec.Command("sleep", "300")
	// Its own session: in a container whose session leader lies outside the
	// pid namespace getsid answers 0, and a victim must look like a tool.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	v := &victim{Process: cmd.Process, exited: make(chan struct{})}
	go func() { cmd.Wait(); close(v.exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-v.exited
	})
	return v
}

type victim struct {
	*os.Process
	exited chan struct{}
}

// victimAlive reports whether the victim still runs; the test reaps it, so
// a killed victim does not linger as a zombie.
func victimAlive(v *victim) bool {
	select {
	case <-v.exited:
		return false
	case <-time.After(100 * time.Millisecond):
		return true
	}
}

// forge writes the task-writable pid file and status.json as a hostile
// task would: they name the victim, or every process of the user.
func forge(t *testing.T, tk *testTask, pid, toolPID int) {
	t.Helper()
	st := tk.status(t)
	st.PID, st.ToolPID = pid, toolPID
	data, _ := json.Marshal(st)
	if err := os.WriteFile(tk.path(taskfiles.FileStatus), data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tk.path(taskfiles.FilePID), []byte(strconv.Itoa(pid)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// orphaned runs an attempt whose tool (orphanTool) leaves a process in its
// group, kills its supervisor with SIGKILL once that process runs, and
// returns the record of the orphaned group.
func orphaned(t *testing.T, tk *testTask) *proc.ProcRecord {
	t.Helper()
	tk.run(t, "")
	// Nothing is forged yet: status.json's pids are the real ones.
	st := tk.waitStatus(t, "tool_pid", func(st *wire.Status) bool { return st.ToolPID > 1 && st.PID > 1 })
	// The kernel kills the tool's shell with its supervisor; the sleep it
	// started is what stays, so it must have been started.
	wtest.Poll(t, 10*time.Second, "the tool to start its sleep", func() bool {
		_, err := os.Stat(filepath.Join(tk.dir, taskfiles.DirOutput, "sleeping"))
		return err == nil
	})
	if err := syscall.Kill(st.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	wtest.Poll(t, 10*time.Second, "the supervisor to die", func() bool { return !tk.alive(t) })
	if !proc.GroupAlive(st.ToolPID) {
		t.Fatal("the tool group died with its supervisor; the test proves nothing")
	}
	return &proc.ProcRecord{SupervisorPID: st.PID, ToolPGID: st.ToolPID}
}

// TestForgedPidsAreNotSignalled: status.json and the pid file are the
// task's to write. Whatever they name, kill and a new run signal only the
// attempt's own processes, from the wrapper's process record.
func TestForgedPidsAreNotSignalled(t *testing.T) {
	t.Parallel()
	const orphanTool = "sleep 30 & touch sleeping; wait"
	t.Run("kill of a dead supervisor", func(t *testing.T) {
		t.Parallel()
		victim := startVictim(t)
		tk := newTask(t, "", wire.Launch{Command: shell(orphanTool)})
		rec := orphaned(t, tk)
		for _, toolPID := range []int{victim.Pid, 1} {
			forge(t, tk, victim.Pid, toolPID)
			out, code := runWrapper(t, "", "kill", "--dir", tk.dir)
			var st wire.Status
			if err := json.Unmarshal(out, &st); err != nil || code != 0 || st.Status != wire.StatusKilled {
				t.Fatalf("kill: exit %d, %s", code, out)
			}
			if !victimAlive(victim) {
				t.Fatalf("kill signalled the process named by status.json (tool_pid %d)", toolPID)
			}
			wtest.Poll(t, 5*time.Second, "the attempt's own tool group to die", func() bool { return !proc.GroupAlive(rec.ToolPGID) })
			// Make the attempt look running again for the next forgery.
			st.Status = wire.StatusRunning
			data, _ := json.Marshal(st)
			os.WriteFile(tk.path(taskfiles.FileStatus), data, 0o644)
		}
	})
	t.Run("new attempt moving a dead one aside", func(t *testing.T) {
		t.Parallel()
		victim := startVictim(t)
		tk := newTask(t, "", wire.Launch{Command: shell(orphanTool)})
		rec := orphaned(t, tk)
		forge(t, tk, victim.Pid, victim.Pid)
		tk.setLaunch(t, wire.Launch{Project: "demo", Task: "T1", Attempt: 2, HeartbeatSeconds: 0.1, Command: shell("echo two")})
		tk.run(t, "")
		if st := tk.waitFinal(t); st.Status != wire.StatusCompleted {
			t.Fatalf("attempt 2: %+v", st)
		}
		if !victimAlive(victim) {
			t.Fatal("run killed the group status.json named")
		}
		wtest.Poll(t, 5*time.Second, "attempt 1's tool group to die", func() bool { return !proc.GroupAlive(rec.ToolPGID) })
	})
	t.Run("kill of a live supervisor", func(t *testing.T) {
		t.Parallel()
		victim := startVictim(t)
		tk := newTask(t, "", wire.Launch{Command: shell("sleep 30")})
		tk.run(t, "")
		rec := tk.waitStatus(t, "tool_pid", func(st *wire.Status) bool { return st.ToolPID > 1 })
		forge(t, tk, victim.Pid, victim.Pid)
		out, code := runWrapper(t, "", "kill", "--dir", tk.dir, "--grace", "1s")
		var st wire.Status
		if err := json.Unmarshal(out, &st); err != nil || code != 0 || st.Status != wire.StatusKilled {
			t.Fatalf("kill: exit %d, %s", code, out)
		}
		if !victimAlive(victim) {
			t.Fatal("kill signalled the pid file's process")
		}
		wtest.Poll(t, 5*time.Second, "the tool group to die", func() bool { return !proc.GroupAlive(rec.ToolPID) })
	})
	t.Run("pid reused", func(t *testing.T) {
		t.Parallel()
		// The record names the victim's pid, group and session, but with a
		// start time before the victim's: the recorded processes are gone
		// and the victim got their pid later.
		victim := startVictim(t)
		pid := victim.Pid
		start, err := proc.ProcStart(pid)
		if err != nil {
			t.Fatal(err)
		}
		earlier := "earlier-than-" + start
		if n, err := strconv.ParseInt(start, 10, 64); err == nil {
			earlier = strconv.FormatInt(n-1, 10)
		}
		sid, err := proc.Getsid(pid)
		if err != nil {
			t.Fatal(err)
		}
		tk := newTask(t, "", wire.Launch{Command: shell("exit 0")})
		rec := proc.ProcRecord{Dir: filepath.Clean(tk.dir), Attempt: 1, SupervisorPID: pid, SupervisorStart: earlier,
			SID: sid, ToolPGID: pid, ToolStart: earlier}
		writeTestRecord(t, tk, rec)
		st := wire.Status{Task: "T1", Attempt: 1, Status: wire.StatusRunning, PID: pid, ToolPID: pid}
		data, _ := json.Marshal(st)
		if err := os.WriteFile(tk.path(taskfiles.FileStatus), data, 0o644); err != nil {
			t.Fatal(err)
		}
		// No supervisor: kill takes the orphan path and must not kill the
		// group.
		out, code := runWrapper(t, "", "kill", "--dir", tk.dir)
		if code != 0 || !strings.Contains(string(out), wire.StatusKilled) {
			t.Fatalf("kill: exit %d, %s", code, out)
		}
		if !victimAlive(victim) {
			t.Fatal("kill signalled a group whose leader started after the recorded one")
		}
		if log := tk.readFile(t, taskfiles.FileWrapper); !strings.Contains(log, "not the tool") {
			t.Errorf("wrapper.log does not say why nothing was signalled:\n%s", log)
		}
		// A lock held as by a live supervisor: kill must refuse to signal
		// the recorded supervisor pid.
		writeTestRecord(t, tk, rec)
		os.WriteFile(tk.path(taskfiles.FileStatus), data, 0o644)
		lock, ok, err := taskfiles.LockTask(tk.dir, 0)
		if err != nil || !ok {
			t.Fatalf("lock: %v %v", ok, err)
		}
		defer lock.Close()
		// The recorded supervisor is provably gone, so the lock's holder is
		// a stranger: kill ends the attempt without signalling anyone.
		out, code = runWrapper(t, "", "kill", "--dir", tk.dir, "--grace", "0")
		if code != 0 || !strings.Contains(string(out), wire.StatusKilled) {
			t.Fatalf("kill under a stranger's lock: exit %d, %s", code, out)
		}
		if !victimAlive(victim) {
			t.Fatal("kill signalled a supervisor pid that started after the recorded one")
		}
	})
}

func writeTestRecord(t *testing.T, tk *testTask, rec proc.ProcRecord) {
	t.Helper()
	data, _ := json.Marshal(rec)
	if err := os.MkdirAll(filepath.Dir(tk.recordFile()), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tk.recordFile(), data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestStatusSurvivesHostileControlFiles: a FIFO, a symlink, a directory or
// a huge file in one task directory is an error of that task alone; the
// call returns promptly and reports the healthy task beside them.
func TestStatusSurvivesHostileControlFiles(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	healthy := newTask(t, root, wire.Launch{Task: "OK", Command: shell("exit 0")})
	healthy.run(t, "")
	healthy.waitFinal(t)
	mk := func(name string, f func(dir string) error) {
		dir := filepath.Join(root, "demo", "tasks", name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		data, _ := json.Marshal(wire.Status{Task: name, Attempt: 1, Status: wire.StatusRunning})
		if err := os.WriteFile(filepath.Join(dir, taskfiles.FileStatus), data, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := f(dir); err != nil {
			t.Fatal(err)
		}
	}
	replace := func(name string, f func(path string) error) func(string) error {
		return func(dir string) error {
			p := filepath.Join(dir, name)
			os.Remove(p)
			return f(p)
		}
	}
	fifo := func(p string) error { return syscall.Mkfifo(p, 0o644) }
	mk("FIFO-STATUS", replace(taskfiles.FileStatus, fifo))
	mk("FIFO-HEARTBEAT", replace(taskfiles.FileHeartbeat, fifo))
	mk("FIFO-LOCK", replace(taskfiles.FileLock, fifo))
	mk("HUGE", replace(taskfiles.FileStatus, func(p string) error {
		f, err := os.Create(p)
		if err != nil {
			return err
		}
		defer f.Close()
		return f.Truncate(200 << 20)
	}))
	mk("SYMLINK", replace(taskfiles.FileStatus, func(p string) error { return os.Symlink(healthy.path(taskfiles.FileStatus), p) }))
	mk("DIR", replace(taskfiles.FileStatus, func(p string) error { return os.Mkdir(p, 0o755) }))

	ns := nodeStatusOf(t, root)
	byTask := map[string]wire.TaskStatus{}
	for _, ts := range ns.Tasks {
		byTask[ts.Task] = ts
	}
	if ok := byTask["OK"]; ok.StatusError != "" || ok.Status == nil || ok.Status.Status != wire.StatusCompleted {
		t.Errorf("healthy task: %+v", ok)
	}
	for _, name := range []string{"FIFO-STATUS", "FIFO-HEARTBEAT", "FIFO-LOCK", "HUGE", "SYMLINK", "DIR"} {
		ts, ok := byTask[name]
		if !ok || ts.StatusError == "" || ts.Status != nil {
			t.Errorf("%s: %+v, want a status error", name, ts)
		}
	}
	if e := byTask["HUGE"].StatusError; !strings.Contains(e, "larger than") {
		t.Errorf("HUGE: %q", e)
	}
}

// TestKillFrozenSupervisor: a stopped supervisor (SIGSTOP) handles no
// SIGTERM; kill kills its tool group and then the supervisor itself, and
// writes the final status in its place.
func TestKillFrozenSupervisor(t *testing.T) {
	t.Parallel()
	tk := newTask(t, "", wire.Launch{Command: shell("sleep 60")})
	tk.run(t, "")
	st := tk.waitStatus(t, "tool_pid", func(st *wire.Status) bool { return st.ToolPID > 1 && st.PID > 1 })
	if err := syscall.Kill(st.PID, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(st.PID, syscall.SIGCONT) })
	out, code := runWrapper(t, "", "kill", "--dir", tk.dir, "--grace", "0.2s")
	var got wire.Status
	if err := json.Unmarshal(out, &got); err != nil || code != 0 {
		t.Fatalf("kill: exit %d, %s", code, out)
	}
	if got.Status != wire.StatusKilled || got.ErrorClass != wire.ClassKilled || !strings.Contains(got.Error, "did not respond") {
		t.Errorf("kill printed %+v", got)
	}
	if tk.alive(t) {
		t.Error("the frozen supervisor still holds the lock")
	}
	if proc.GroupAlive(st.ToolPID) {
		t.Error("the tool group is still alive")
	}
	if *tk.status(t) != got {
		t.Errorf("status.json %+v differs from what kill printed", tk.status(t))
	}
}

// TestKillWithTheLockHeldByTheTask: a task can take D/lock itself (from a
// process that outlives its attempt) and so look alive for ever. kill must
// neither fail for ever (the controller would wait on it) nor signal the
// stranger: the recorded supervisor is gone, so the attempt's final status
// stands, and a running one is ended as an orphan's.
func TestKillWithTheLockHeldByTheTask(t *testing.T) {
	t.Parallel()
	for _, running := range []bool{false, true} {
		t.Run(map[bool]string{false: "finished attempt", true: "running status"}[running], func(t *testing.T) {
			t.Parallel()
			tk := newTask(t, "", wire.Launch{Command: shell("exit 0")})
			tk.run(t, "")
			final := tk.waitFinal(t)
			wtest.Poll(t, 5*time.Second, "the supervisor to let go of the lock", func() bool { return !tk.alive(t) })
			if running {
				final.Status, final.CompletedAt = wire.StatusRunning, ""
				data, _ := json.Marshal(final)
				if err := os.WriteFile(tk.path(taskfiles.FileStatus), data, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			lock, ok, err := taskfiles.LockTask(tk.dir, 0)
			if err != nil || !ok {
				t.Fatalf("lock: %v %v", ok, err)
			}
			defer lock.Close()
			if !tk.alive(t) {
				t.Fatal("the held lock does not make the attempt look alive; the test proves nothing")
			}
			out, code := runWrapper(t, "", "kill", "--dir", tk.dir, "--grace", "0")
			var st wire.Status
			if err := json.Unmarshal(out, &st); err != nil || code != 0 {
				t.Fatalf("kill: exit %d, %s", code, out)
			}
			want := wire.StatusCompleted
			if running {
				want = wire.StatusKilled
			}
			if st.Status != want {
				t.Fatalf("kill reported %q, want %q: %s", st.Status, want, out)
			}
		})
	}
}
