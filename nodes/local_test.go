//go:build unix

package nodes_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/nodes/transporttest"
)

func TestLocal(t *testing.T) {
	transporttest.Run(t, func(t *testing.T) (nodes.Transport, string) {
		return nodes.NewLocal(), t.TempDir()
	})
}

// A child that inherits the command's pipes keeps them open after the command
// exits; Exec must still return (after the WaitDelay), with the command's output
// and exit code.
func TestLocalExecChildHoldingPipes(t *testing.T) {
	l := nodes.NewLocal()
	start := time.Now()
	res, err := l.Exec(t.Context(), []string{"/bin/sh", "-c", "sleep 30 & echo $!; exit 4"}, nil)
	if pid, perr := strconv.Atoi(strings.TrimSpace(string(res.Stdout))); perr == nil {
		t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	}
	if err != nil {
		t.Fatalf("Exec: %v", err)
	}
	if d := time.Since(start); d > 15*time.Second {
		t.Errorf("Exec took %v; a child holding the pipes must not block it past the wait delay", d)
	}
	if res.ExitCode != 4 {
		t.Errorf("exit code = %d, want 4", res.ExitCode)
	}
}

// Cancelling ctx kills the command's whole process group, not only the command:
// otherwise `sh -c 'sleep 30'` would leave the sleep running.
func TestLocalExecCancelKillsGroup(t *testing.T) {
	l := nodes.NewLocal()
	dir := t.TempDir()
	pidFile := dir + "/pid"
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() {
		_, err := l.Exec(ctx, []string{"/bin/sh", "-c", `sleep 30 & echo $! > "$1"; wait`, "sh", pidFile}, nil)
		errc <- err
	}()
	pid := waitForPid(t, pidFile)
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("Exec after cancel = %v, want context.Canceled", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("grandchild %d still alive after Exec was cancelled", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestLocalHomeFollowsHOME(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("HOME", dir)
	home, err := nodes.NewLocal().Home(t.Context())
	if err != nil || home != dir {
		t.Errorf("Home = %q, %v; want %q", home, err, dir)
	}
	t.Setenv("HOME", "relative")
	if home, err := nodes.NewLocal().Home(t.Context()); err == nil {
		t.Errorf("Home with a relative $HOME = %q, want an error", home)
	}
}

// alive reports whether pid runs. A zombie does not count: in a container whose
// init does not reap, the killed grandchild stays one.
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true // no procfs (macOS): zombies are reaped by launchd
	}
	if i := bytes.LastIndexByte(stat, ')'); i >= 0 && i+2 < len(stat) {
		return stat[i+2] != 'Z'
	}
	return true
}

func waitForPid(t *testing.T, file string) int {
	t.Helper()
	l := nodes.NewLocal()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		var b strings.Builder
		if err := l.Get(t.Context(), file, &b); err == nil && strings.HasSuffix(b.String(), "\n") {
			pid, err := strconv.Atoi(strings.TrimSpace(b.String()))
			if err != nil {
				t.Fatalf("pid file holds %q", b.String())
			}
			return pid
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no pid in %s after 10s", file)
	return 0
}
