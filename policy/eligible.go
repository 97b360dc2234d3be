package policy

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/internal/yamlval"
	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/wire"
)

// Eligible reports whether t may run on n, ignoring load; the reason is for
// `validate` and for errors when no node at all fits.
func Eligible(cfg *nodes.Config, t *domain.Task, n nodes.Node) (bool, string) {
	if t.NodePin != "" && t.NodePin != n.Name {
		return false, "pinned to " + t.NodePin
	}
	for _, tag := range t.Tags {
		if !slices.Contains(n.Tags, tag) {
			return false, "lacks tag " + tag
		}
	}
	if tag, ok := cfg.Routes[t.Type]; ok && !slices.Contains(n.Tags, tag) {
		return false, fmt.Sprintf("type %s is routed to tag %s", t.Type, tag)
	}
	if _, _, ok, why := TaskLaunch(t.Sandbox, t.Network, n); !ok {
		return false, why
	}
	return true, ""
}

// TaskLaunch decides launch.json's sandbox and network for a task's
// sandbox and network settings on node n. The network is the task's,
// else the node's, else open; network: none and an allow list need the
// sandbox, so the task's sandbox is then on whatever it says but off,
// which cannot run.
func TaskLaunch(sandbox, network string, n nodes.Node) (sb, net string, ok bool, why string) {
	net = cmp.Or(network, n.Network, yamlval.NetworkOpen)
	if !yamlval.NetworkConfined(net) {
		sb, ok, why = sandboxLaunch(sandbox, n.Sandbox)
		return sb, net, ok, why
	}
	word := yamlval.NetworkWord(net)
	if sandbox == nodes.SandboxOff {
		return "", net, false, "network: " + word + " needs the sandbox, the task says sandbox: off"
	}
	if sb, ok, _ = sandboxLaunch(nodes.SandboxOn, n.Sandbox); !ok {
		why = "the task has network: " + word + ", which needs the sandbox, the node has sandbox: off (set sandbox: on or auto on the node in nodes.yaml, or network: open for the task)"
	}
	return sb, net, ok, why
}

// sandboxLaunch decides launch.json's sandbox for a task's sandbox
// setting (on, off, auto, "") on a node's (on, off, auto; "" is off, but
// nodes.yaml's default is auto): "bwrap" (must be sandboxed), "auto"
// (where bwrap works) or "" (never). ok is false when the task may not
// run on the node at all, and why says so.
func sandboxLaunch(task, node string) (launch string, ok bool, why string) {
	switch {
	case node == nodes.SandboxOn && task == nodes.SandboxOff:
		return "", false, "sandbox: on on the node, the task says sandbox: off"
	case node == nodes.SandboxOn:
		return wire.SandboxBwrap, true, ""
	case node == nodes.SandboxAuto && task == nodes.SandboxOn:
		return wire.SandboxBwrap, true, ""
	case node == nodes.SandboxAuto && task == nodes.SandboxOff:
		return "", true, ""
	case node == nodes.SandboxAuto:
		return wire.SandboxAuto, true, ""
	case task == nodes.SandboxOn:
		return "", false, "the task needs sandbox: on, the node has sandbox: off (set sandbox: on or auto on the node in nodes.yaml)"
	}
	return "", true, ""
}
