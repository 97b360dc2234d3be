//go:build linux

package wrapper

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/dispatch-tool/dispatch/wire"
	gatepkg "github.com/dispatch-tool/dispatch/wrapper/gate"
)

// TestGateSandboxed: the gate runs the project's code (here, what the
// agent wrote) under the attempt's sandbox: the node user's keys are not
// there, and nothing but the gate's own copy and its private home can be
// written (a write one level up lands in the sandbox's own tmpfs over the
// work_dir, not in the task directory).
func TestGateSandboxed(t *testing.T) {
	t.Parallel()
	n := newSandboxNode(t, "")
	key := filepath.Join(n.home, ".ssh", "id_ed25519")
	gate := wire.LaunchGate{Decides: true, TimeoutSeconds: 20,
		Command: "if cat " + key + "; then exit 1; fi; touch ../escape ../output/planted; echo contained"}
	n.launch(t, n.item("S01", wire.Launch{Command: shell("echo built > answer"), Sandbox: n.mode, Gate: &gate}))
	st := n.final(t, "S01")
	if n.mode == "" {
		t.Skip("DISPATCH_TEST_SANDBOX=off")
	}
	if st.Status != wire.StatusCompleted || st.Sandbox != wire.SandboxBwrap {
		log, _ := os.ReadFile(filepath.Join(n.taskDir("S01"), gatepkg.FileLog))
		t.Fatalf("attempt %+v; gate.log:\n%s", st, log)
	}
	for _, p := range []string{"escape", "output/planted"} {
		if fileExists(filepath.Join(n.taskDir("S01"), p)) {
			t.Errorf("the gate wrote %s in the task directory", p)
		}
	}
}

// TestGateFreshHomeAndTmp: the gate does not run with the HOME and /tmp
// the tool wrote into: a sandboxed tool that leaves a configuration there
// (go env -w GOFLAGS=-exec=true in its HOME makes every go test pass)
// does not reach the gate, which gets a HOME and a TMPDIR of its own,
// made afresh for each gate run.
func TestGateFreshHomeAndTmp(t *testing.T) {
	t.Parallel()
	n := newSandboxNode(t, "")
	check := `for f in "$HOME/planted" /tmp/planted "$TMPDIR/planted"; do if test -e "$f"; then echo "found $f"; exit 1; fi; done; ` +
		`touch "$HOME/planted" /tmp/planted; ` + gateAnswer
	gate := wire.LaunchGate{Decides: true, TimeoutSeconds: 20, Command: check}
	n.launch(t, n.item("S01", wire.Launch{Command: shell(`echo right > answer; touch "$HOME/planted" /tmp/planted "$TMPDIR/planted"`),
		Sandbox: n.mode, Gate: &gate}))
	st := n.final(t, "S01")
	if n.mode == "" {
		t.Skip("DISPATCH_TEST_SANDBOX=off")
	}
	if st.Status != wire.StatusCompleted || st.Sandbox != wire.SandboxBwrap {
		log, _ := os.ReadFile(filepath.Join(n.taskDir("S01"), gatepkg.FileLog))
		t.Fatalf("attempt %+v; gate.log:\n%s", st, log)
	}
}
