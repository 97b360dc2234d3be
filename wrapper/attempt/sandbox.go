package attempt

import (
	"fmt"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/sandbox"
)

// SandboxPlan is whether and how an attempt is confined, before its
// sandbox is built: Bwrap is the bwrap to run it under ("" unconfined);
// Err, when set, why the attempt cannot run as launch.json asks
// (Permanent: the launch itself is at fault, no retry mends it).
type SandboxPlan struct {
	Bwrap     string
	NoNetwork bool // network none or allow: a network namespace of its own
	Err       string
	Permanent bool
}

// DecideSandbox plans the sandbox of the attempt in task directory dir:
// none when launch.json asks for none (refused when its network needs
// one), refused when dir is not inside the work_dir, else bwrap when the
// probe (asked only then) finds it works, and refused when it does not
// and launch.json insists (sandbox on, or a network that needs it).
func DecideSandbox(l *wire.Launch, dir string, probe func() wire.SandboxReply) SandboxPlan {
	noNetwork := l.Network == wire.NetworkNone || l.Network == wire.NetworkAllow
	word := l.Network
	if word == wire.NetworkAllow {
		word = "{allow: [...]}"
	}
	if l.Sandbox == "" {
		if noNetwork && !l.NetworkDefault {
			return SandboxPlan{Err: "network: " + word + " needs the sandbox, and launch.json does not ask for it; the attempt is not run with the network open", Permanent: true}
		}
		return SandboxPlan{}
	}
	if !sandbox.Under(dir, l.WorkDir) || dir == l.WorkDir {
		return SandboxPlan{Err: fmt.Sprintf("sandbox: the task directory %s is not in the work_dir %s", dir, l.WorkDir), Permanent: true}
	}
	pr := probe()
	if pr.Sandbox != wire.SandboxBwrap {
		switch {
		case noNetwork && !l.NetworkDefault:
			return SandboxPlan{Err: fmt.Sprintf("network: %s needs the sandbox, which is unavailable on node %s: %s; fix: %s, or set network: open for the task", word, l.Node, pr.Error, pr.Fix)}
		case l.Sandbox == wire.SandboxBwrap:
			return SandboxPlan{Err: fmt.Sprintf("sandbox: on, but it is unavailable on node %s: %s; fix: %s, or set sandbox: off (or auto) for the task", l.Node, pr.Error, pr.Fix)}
		}
		return SandboxPlan{}
	}
	return SandboxPlan{Bwrap: pr.Path, NoNetwork: noNetwork}
}
