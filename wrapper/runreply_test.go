package wrapper

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/internal/wtest"
	"github.com/dispatch-tool/dispatch/wrapper/sandbox"
	"github.com/dispatch-tool/dispatch/wrapper/taskfiles"
)

// launchDoc runs `run` with a launch document (the controller's way) of
// the given tasks' launch.json and spec, with env, and returns its reply.
func launchDoc(ctx context.Context, env []string, tks ...*testTask) (wire.LaunchReply, []byte, error) {
	var batch wire.LaunchBatch
	for _, tk := range tks {
		data, err := os.ReadFile(tk.path(taskfiles.FileLaunch))
		if err != nil {
			return wire.LaunchReply{}, nil, err
		}
		var l wire.Launch
		if err := json.Unmarshal(data, &l); err != nil {
			return wire.LaunchReply{}, nil, err
		}
		batch.Launches = append(batch.Launches, wire.LaunchItem{Dir: tk.dir, Spec: "# spec\n", Launch: l})
	}
	doc, err := json.Marshal(batch)
	if err != nil {
		return wire.LaunchReply{}, nil, err
	}
	out, _, _, err := execWrapper(ctx, string(doc), env, "run")
	var reply wire.LaunchReply
	if err == nil {
		err = json.Unmarshal(out, &reply)
	}
	return reply, out, err
}

// heldProbe returns an environment whose PATH holds a bwrap that hangs on
// a FIFO until release, after touching probing: a supervisor's sandbox
// probe (a launch with sandbox auto) holds up the attempt's start there.
// The probe is killed after sandbox.ProbeTimeout whatever happens.
func heldProbe(t *testing.T) (env []string, probing string, release func()) {
	t.Helper()
	bin := t.TempDir()
	fifo := filepath.Join(bin, "hold")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	probing = filepath.Join(bin, "probing")
	fake := "#!/bin/sh\ntouch " + probing + "\nread x < " + fifo + "\nexit 1\n"
	if err := os.WriteFile(filepath.Join(bin, "bwrap"), []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	release = func() {
		// Without a reader (the probe not there yet, or timed out) the
		// open fails at once: tried until the probe's own timeout.
		deadline := time.Now().Add(sandbox.ProbeTimeout)
		for time.Now().Before(deadline) {
			f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0)
			if err == nil {
				f.Write([]byte("go\n"))
				f.Close()
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH")), probing, release
}

// TestRunRepliesBeforeTheFirstStatus: `run` replies once the attempt is
// the node's (its lock held by the supervisor, its live marker written),
// not once the supervisor has prepared it: here the sandbox probe, run
// before the first status.json, waits on a FIFO (a bwrap that hangs).
// The reply comes while it waits; the task is alive with no status of
// the attempt; once the probe answers, the attempt runs to its end.
func TestRunRepliesBeforeTheFirstStatus(t *testing.T) {
	t.Parallel()
	env, probing, release := heldProbe(t)
	tk := newTask(t, "", wire.Launch{Command: shell("echo ran")})
	tk.setLaunch(t, wire.Launch{Project: "demo", Task: "T1", Attempt: 1, Node: "local", HeartbeatSeconds: 0.1, TimeoutSeconds: 20,
		Sandbox: wire.SandboxAuto, WorkDir: tk.root, Command: shell("echo ran")})

	type result struct {
		reply wire.LaunchReply
		out   []byte
		err   error
	}
	done := make(chan result, 1)
	go func() {
		r, out, err := launchDoc(t.Context(), env, tk)
		done <- result{r, out, err}
	}()
	var res result
	select {
	case res = <-done:
	case <-time.After(15 * time.Second):
		release()
		t.Fatal("run did not reply while the attempt's sandbox probe was held")
	}
	if res.err != nil || len(res.reply.Results) != 1 || res.reply.Results[0].Run == nil {
		release()
		t.Fatalf("run: %v: %s", res.err, res.out)
	}
	run := res.reply.Results[0].Run
	wtest.Poll(t, 15*time.Second, "the sandbox probe to start", func() bool {
		_, err := os.Stat(probing)
		return err == nil
	})
	if _, err := os.Stat(tk.path(taskfiles.FileStatus)); !os.IsNotExist(err) {
		t.Errorf("status.json before the probe answered: %v, want none", err)
	}
	if !tk.alive(t) {
		t.Error("no supervisor holds the lock of the attempt run acknowledged")
	}
	ns := nodeStatusOf(t, tk.root)
	if len(ns.Tasks) != 1 || !ns.Tasks[0].Alive || ns.Tasks[0].Status != nil {
		t.Errorf("status while the attempt starts: %+v, want it alive with no status", ns.Tasks)
	}
	release()
	st := tk.waitFinal(t)
	if st.Status != wire.StatusCompleted || st.Attempt != 1 || st.PID != run.PID {
		t.Errorf("final status %+v, want attempt 1 completed by supervisor %d", st, run.PID)
	}
}

// TestStartFailureAfterTheReply: an attempt that cannot be prepared once
// `run` has replied (here output/ is a file) ends with a failed status of
// class start, naming why; its live marker goes and its lock is free, so
// the controller reads it as a start failure, not a crash.
func TestStartFailureAfterTheReply(t *testing.T) {
	t.Parallel()
	tk := newTask(t, "", wire.Launch{Command: shell("echo ran")})
	if err := os.WriteFile(tk.path(taskfiles.DirOutput), []byte("not a directory\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	reply, out, err := launchDoc(t.Context(), nil, tk)
	if err != nil || len(reply.Results) != 1 || reply.Results[0].Run == nil {
		t.Fatalf("run: %v: %s (want the attempt acknowledged)", err, out)
	}
	st := tk.waitFinal(t)
	if st.Status != wire.StatusFailed || st.ErrorClass != wire.ClassStart || st.Attempt != 1 ||
		!strings.Contains(st.Error, "did not start") || !strings.Contains(st.Error, taskfiles.DirOutput) {
		t.Errorf("status %+v, want attempt 1 failed, class start, saying why", st)
	}
	if _, err := os.Lstat(markerOf(tk)); !os.IsNotExist(err) {
		t.Errorf("live marker after the start failure: %v, want it gone", err)
	}
}

// TestKillWaitsForTheStartingSupervisor: A and B share a supervisor; B
// ends, and B's attempt 2 is launched with its start held (its process
// record is still attempt 1's, naming the live supervisor of A). A kill
// of B then signals nothing (it waits for B's supervisor to record
// itself, then refuses) and A runs on; once B's attempt 2 is under way, a
// kill stops it, attempt 2, and A is still untouched.
func TestKillWaitsForTheStartingSupervisor(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	a := newTask(t, root, wire.Launch{Task: "A", Command: shell(waitForGo + "echo a")})
	b := newTask(t, root, wire.Launch{Task: "B", Command: shell("echo b")})
	if r, out, err := launchDoc(t.Context(), nil, a, b); err != nil || len(r.Results) != 2 || r.Results[0].Run == nil || r.Results[1].Run == nil {
		t.Fatalf("launch: %v: %s", err, out)
	}
	a.waitStarted(t, 1)
	if st := b.waitFinal(t); st.Status != wire.StatusCompleted {
		t.Fatalf("B attempt 1: %+v", st)
	}

	env, probing, release := heldProbe(t)
	b.setLaunch(t, wire.Launch{Project: "demo", Task: "B", Attempt: 2, Node: "local", HeartbeatSeconds: 0.1, TimeoutSeconds: 20,
		Sandbox: wire.SandboxAuto, WorkDir: root, Command: shell(waitForGo + "echo b2")})
	if r, out, err := launchDoc(t.Context(), env, b); err != nil || len(r.Results) != 1 || r.Results[0].Run == nil {
		release()
		t.Fatalf("launch of B attempt 2: %v: %s", err, out)
	}
	wtest.Poll(t, 15*time.Second, "B's held sandbox probe", func() bool {
		_, err := os.Stat(probing)
		return err == nil
	})
	out, _, code, err := execWrapper(t.Context(), "", nil, "kill", "--dir", b.dir, "--grace", "0")
	if err != nil {
		release()
		t.Fatal(err)
	}
	if code == 0 {
		// The probe's own timeout let B start during the kill: then it
		// must be B's attempt 2 that was killed.
		var st wire.Status
		if json.Unmarshal(out, &st) != nil || st.Attempt != 2 || st.Status != wire.StatusKilled {
			t.Errorf("kill during B's start: %s; want nothing signalled, or attempt 2 killed", out)
		}
	}
	if !a.alive(t) {
		t.Fatalf("A's supervisor is gone after the kill of B: %+v", a.status(t))
	}
	release()
	if code != 0 {
		b.waitStarted(t, 2)
		out, code = runWrapper(t, "", "kill", "--dir", b.dir, "--grace", "0")
		var st wire.Status
		if code != 0 || json.Unmarshal(out, &st) != nil || st.Attempt != 2 || st.Status != wire.StatusKilled {
			t.Fatalf("kill of B's attempt 2: exit %d: %s", code, out)
		}
	}
	if !a.alive(t) {
		t.Fatalf("A's supervisor is gone after B's attempt 2 was killed: %+v", a.status(t))
	}
	a.touch(t, "go")
	if st := a.waitFinal(t); st.Status != wire.StatusCompleted {
		t.Errorf("A: %+v", st)
	}
}
