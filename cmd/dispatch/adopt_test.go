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
)

// TestStartEndsWithItsProject: after Ctrl-C of `dispatch start a` (a stays
// active, its task running), `dispatch start b` exits once b is finished,
// with b's exit code, and says that a stays active and how to resume it
// (issue 32: it printed "b project finished: passed" and ran until a was
// finished too). a's running attempt stays on its node and the next
// controller (`dispatch start a`) collects it.
func TestStartEndsWithItsProject(t *testing.T) {
	gate := filepath.Join(t.TempDir(), "gate")
	home, _ := opsHome(t, map[string]map[string]string{
		"a": {"S01-wait.md": fmt.Sprintf("while [ ! -e '%s' ]; do sleep 0.05; done\necho a done\n", gate)},
		"b": {"S01-quick.md": "echo b done\n"},
	})
	unsandboxed(t, home, "a's task waits for a file the test writes outside its workspace")
	ctx, cancel := context.WithTimeout(context.Background(), 2*cmdTimeout)
	defer cancel()
	cmd, _, _ := dispatchCmd(ctx, nil, "--home", home, "start", "a")
	var stdout, stderr lockedBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	pollUntil(t, 30*time.Second, "a/S01 to run", func() bool {
		return control.Running(home) && taskState(t, home, "a", "S01").Status == domain.Running
	})
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != 130 {
		t.Fatalf("start a after Ctrl-C: %v\n%s%s", err, stdout.String(), stderr.String())
	}

	bctx, bcancel := context.WithTimeout(ctx, 60*time.Second)
	defer bcancel()
	bcmd, bout, berr := dispatchCmd(bctx, nil, "--home", home, "start", "b")
	r := finish(t, bctx, bcmd, bcmd.Run(), bout, berr)
	if r.code != 0 {
		t.Fatalf("start b: want exit 0 (b passed): %s", r)
	}
	for _, want := range []string{"a stays active", "dispatch start a", "dispatch serve"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("start b does not say %q: %s", want, r)
		}
	}
	if control.Running(home) {
		t.Errorf("a controller still runs on the home after start b ended")
	}
	if st := taskState(t, home, "a", "S01").Status; st != domain.Running {
		t.Errorf("a/S01 is %s after start b, want still running on its node", st)
	}

	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if r := runDispatch(t, nil, "--home", home, "start", "a"); r.code != 0 || strings.Contains(r.stdout, "stays active") {
		t.Fatalf("start a after start b: want a collected and passed, nothing left active: %s", r)
	}
	if st := taskState(t, home, "a", "S01").Status; st != domain.Completed {
		t.Errorf("a/S01 is %s, want completed", st)
	}
}
