package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/control"
	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/nodes"
)

// TestCtrlCExits130: Ctrl-C (SIGINT) ends the commands that follow a
// project — status --watch, logs -f, events -f and the start that runs the
// controller — with exit 130, as shells expect of an interrupted program
// (so `dispatch start p && next` does not go on), not 1 or 0.
func TestCtrlCExits130(t *testing.T) {
	gate := filepath.Join(t.TempDir(), "never")
	home, _ := opsHome(t, map[string]map[string]string{
		"p": {"S01-wait.md": fmt.Sprintf("echo waiting\nwhile [ ! -e '%s' ]; do sleep 0.05; done\ntouch '%s.seen'\n", gate, gate)},
	})
	unsandboxed(t, home, "the task waits for a file the test writes outside its workspace")
	ctx, cancel := context.WithTimeout(context.Background(), 2*cmdTimeout)
	defer cancel()
	// launch runs dispatch with args; stop waits for its first output (its
	// signal handler is set by then), sends SIGINT and returns the result.
	launch := func(args ...string) (stop func() result) {
		t.Helper()
		cmd, _, _ := dispatchCmd(ctx, nil, append([]string{"--home", home}, args...)...)
		var stdout, stderr lockedBuffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill() })
		return func() result {
			t.Helper()
			pollUntil(t, 30*time.Second, strings.Join(args, " ")+" to print", func() bool { return stdout.String() != "" })
			if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
				t.Fatal(err)
			}
			err := cmd.Wait()
			if cmd.ProcessState == nil {
				t.Fatalf("%s: %v", strings.Join(args, " "), err)
			}
			return result{code: cmd.ProcessState.ExitCode(), stdout: stdout.String(), stderr: stderr.String()}
		}
	}
	stopStart := launch("start", "p")
	pollUntil(t, 30*time.Second, "p/S01 to run", func() bool {
		return control.Running(home) && taskState(t, home, "p", "S01").Status == domain.Running
	})
	for _, args := range [][]string{{"status", "p", "--watch"}, {"logs", "p", "S01", "-f"}, {"events", "p", "-f"}} {
		if r := launch(args...)(); r.code != 130 {
			t.Errorf("%s after Ctrl-C: want exit 130: %s", strings.Join(args, " "), r)
		}
	}
	if r := stopStart(); r.code != 130 || !strings.Contains(r.stderr, "interrupted") {
		t.Errorf("start after Ctrl-C: want exit 130 and the message: %s", r)
	}
	// The task ends (no controller follows it any more): nothing of the
	// test outlives it.
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	pollUntil(t, 30*time.Second, "S01 to see the gate and end", func() bool {
		_, err := os.Stat(gate + ".seen")
		return err == nil
	})
}

// TestVersion: `dispatch --version` and `dispatch version` print the same
// thing: the version, the commit and the wrapper version nodes get.
func TestVersion(t *testing.T) {
	wv, err := nodes.NewWrappers().Version()
	if err != nil {
		t.Fatal(err)
	}
	a := runDispatch(t, nil, "--version")
	b := runDispatch(t, nil, "version")
	if a.code != 0 || a.stdout != b.stdout || b.code != 0 {
		t.Fatalf("--version and version differ:\n%s\n%s", a, b)
	}
	for _, w := range []string{"dispatch ", "\ncommit: ", "\nwrapper: " + wv + "\n"} {
		if !strings.Contains(a.stdout, w) {
			t.Errorf("--version lacks %q: %s", w, a)
		}
	}
}
