package attempt

import (
	"strings"
	"testing"

	"github.com/dispatch-tool/dispatch/wire"
)

// TestDecideSandbox plans the sandbox from launch.json and the probe alone;
// the probe is asked only when launch.json wants a sandbox.
func TestDecideSandbox(t *testing.T) {
	t.Parallel()
	works := wire.SandboxReply{Sandbox: wire.SandboxBwrap, Path: "/usr/bin/bwrap"}
	missing := wire.SandboxReply{Error: "bwrap is not installed", Fix: "apt install bubblewrap"}
	const dir = "/w/demo/tasks/T1"
	tests := []struct {
		name          string
		l             wire.Launch
		probe         *wire.SandboxReply // nil: must not be asked
		wantBwrap     string
		wantNoNet     bool
		wantErr       string
		wantPermanent bool
	}{
		{"off", wire.Launch{WorkDir: "/w"}, nil, "", false, "", false},
		{"off, network none", wire.Launch{WorkDir: "/w", Network: wire.NetworkNone}, nil, "", false, "network: none needs the sandbox, and launch.json does not ask", true},
		{"off, the default allow list", wire.Launch{WorkDir: "/w", Network: wire.NetworkAllow, NetworkDefault: true}, nil, "", false, "", false},
		{"outside the work_dir", wire.Launch{WorkDir: "/elsewhere", Sandbox: wire.SandboxAuto}, nil, "", false, "is not in the work_dir", true},
		{"the work_dir itself", wire.Launch{WorkDir: dir, Sandbox: wire.SandboxAuto}, nil, "", false, "is not in the work_dir", true},
		{"auto, bwrap works", wire.Launch{WorkDir: "/w", Sandbox: wire.SandboxAuto}, &works, "/usr/bin/bwrap", false, "", false},
		{"auto, allow list", wire.Launch{WorkDir: "/w", Sandbox: wire.SandboxAuto, Network: wire.NetworkAllow}, &works, "/usr/bin/bwrap", true, "", false},
		{"auto, no bwrap", wire.Launch{WorkDir: "/w", Sandbox: wire.SandboxAuto}, &missing, "", false, "", false},
		{"on, no bwrap", wire.Launch{WorkDir: "/w", Sandbox: wire.SandboxBwrap, Node: "n1"}, &missing, "", false, "sandbox: on, but it is unavailable on node n1: bwrap is not installed; fix: apt install bubblewrap", false},
		{"auto, network none, no bwrap", wire.Launch{WorkDir: "/w", Sandbox: wire.SandboxAuto, Network: wire.NetworkNone, Node: "n1"}, &missing, "", false, "network: none needs the sandbox, which is unavailable on node n1", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			probe := func() wire.SandboxReply {
				if tc.probe == nil {
					t.Fatal("probed")
				}
				return *tc.probe
			}
			p := DecideSandbox(&tc.l, dir, probe)
			if p.Bwrap != tc.wantBwrap || p.NoNetwork != tc.wantNoNet || p.Permanent != tc.wantPermanent ||
				(tc.wantErr == "") != (p.Err == "") || !strings.Contains(p.Err, tc.wantErr) {
				t.Errorf("DecideSandbox = %+v; want bwrap %q, no network %v, err %q, permanent %v", p, tc.wantBwrap, tc.wantNoNet, tc.wantErr, tc.wantPermanent)
			}
		})
	}
}
