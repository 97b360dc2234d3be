package policy

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/internal/netallow"
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
	if _, ok, why := TaskLaunch(t.Sandbox, t.Network, ToolFor(t.Tool, n), n); !ok {
		return false, why
	}
	return true, ""
}

// Confinement is how a launch is confined: launch.json's sandbox and
// network.
type Confinement struct {
	// Sandbox is wire.SandboxBwrap (must be sandboxed), wire.SandboxAuto
	// (where bwrap works) or "" (never).
	Sandbox string
	// Network is yamlval.NetworkOpen, yamlval.NetworkNone or an allow
	// list (netallow.Prefix and its entries).
	Network string
	// Default is set when Network is an agent's default under the sandbox
	// (DefaultNetwork), not a setting: the wrapper confines the attempt
	// with it where the attempt really runs under bwrap, and leaves the
	// network open where Sandbox auto finds none.
	Default bool
}

// DefaultNetwork is the network of a task of tool that no node, project
// or spec sets (issue 32): an agent CLI that may run under the sandbox,
// which runs it with its approval prompts off and a copy of its login in
// its HOME, reaches only its provider's API and the api_mode's URLs (an
// empty allow list, see NetworkAllow); every other task, and an agent
// that never runs sandboxed, has the node's network.
func DefaultNetwork(tool, sb string) string {
	if sb != "" && wire.IsAgent(tool) {
		return netallow.Prefix
	}
	return yamlval.NetworkOpen
}

// TaskLaunch decides launch.json's sandbox and network for a task of tool
// with sandbox and network settings on node n. The network is the task's,
// else the node's, else DefaultNetwork's; network: none and an allow list
// that are set need the sandbox, so the task's sandbox is then on whatever
// it says but off, which cannot run. The default never does: it follows
// the sandbox.
func TaskLaunch(sandbox, network, tool string, n nodes.Node) (c Confinement, ok bool, why string) {
	c.Network = cmp.Or(network, n.Network)
	if c.Network == "" {
		c.Sandbox, ok, why = sandboxLaunch(sandbox, n.Sandbox)
		c.Network = DefaultNetwork(tool, c.Sandbox)
		c.Default = c.Network != yamlval.NetworkOpen
		return c, ok, why
	}
	if !yamlval.NetworkConfined(c.Network) {
		c.Sandbox, ok, why = sandboxLaunch(sandbox, n.Sandbox)
		return c, ok, why
	}
	word := yamlval.NetworkWord(c.Network)
	if sandbox == nodes.SandboxOff {
		return c, false, "network: " + word + " needs the sandbox, the task says sandbox: off"
	}
	if c.Sandbox, ok, _ = sandboxLaunch(nodes.SandboxOn, n.Sandbox); !ok {
		why = "the task has network: " + word + ", which needs the sandbox, the node has sandbox: off (set sandbox: on or auto on the node in nodes.yaml, or network: open for the task)"
	}
	return c, ok, why
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
