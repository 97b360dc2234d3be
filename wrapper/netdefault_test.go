package wrapper

import (
	"strings"
	"testing"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/egress"
	"github.com/dispatch-tool/dispatch/wrapper/sandbox"
)

// TestDecideSandboxNetworkDefault: an allow list that is an agent's
// default under the sandbox (network_default) confines the attempt only
// where it runs under bwrap: with sandbox auto where bwrap does not work,
// or no sandbox at all, it runs with the node's network; an allow list or
// none that the task set still refuses to run unconfined, and sandbox: on
// still needs bwrap.
func TestDecideSandboxNetworkDefault(t *testing.T) {
	unavailable := func() wire.SandboxReply {
		return wire.SandboxReply{Error: "bwrap is not installed", Fix: "apt install bubblewrap"}
	}
	for _, c := range []struct {
		name            string
		sandbox         string
		network         string
		byDefault       bool
		wantErrContains string // "" for none
	}{
		{"the default where auto finds no bwrap", wire.SandboxAuto, wire.NetworkAllow, true, ""},
		{"the default without a sandbox", "", wire.NetworkAllow, true, ""},
		{"a set allow list where auto finds no bwrap", wire.SandboxAuto, wire.NetworkAllow, false, "needs the sandbox"},
		{"a set allow list without a sandbox", "", wire.NetworkAllow, false, "needs the sandbox"},
		{"network none where auto finds no bwrap", wire.SandboxAuto, wire.NetworkNone, false, "network: none needs the sandbox"},
		{"the default with sandbox on", wire.SandboxBwrap, wire.NetworkAllow, true, "sandbox: on, but it is unavailable"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := &supervisor{dir: "/w/demo/tasks/T1", launch: wire.Launch{Node: "n1", Sandbox: c.sandbox, WorkDir: "/w",
				Network: c.network, NetworkDefault: c.byDefault}}
			s.decideSandbox(unavailable)
			if s.sandbox != nil {
				t.Fatal("sandboxed where bwrap is unavailable")
			}
			if c.wantErrContains == "" && s.sandboxErr != "" || !strings.Contains(s.sandboxErr, c.wantErrContains) {
				t.Errorf("sandbox error %q; want one containing %q", s.sandboxErr, c.wantErrContains)
			}
		})
	}
}

// TestRefusedNote: a failed attempt's error names what the proxy refused
// and the exact line that lets it: the whole setting when the list was an
// agent's default, the entries to add to a list the task set; a
// malformed destination is named, never offered.
func TestRefusedNote(t *testing.T) {
	many := []string{"a.com:443", "b.com:443", "c.com:443", "d.com:443", "e.com:443", "f.com:443",
		"g.com:443", "h.com:443", "i.com:443", "j.com:443", "k.com:443"}
	for _, c := range []struct {
		name      string
		refused   []string
		byDefault bool
		want      string
	}{
		{"nothing refused", nil, true, ""},
		{"the default", []string{"evil.example:443", "127.0.0.1:9"}, true,
			"; the sandbox's network refused evil.example:443, 127.0.0.1:9 (under the sandbox an agent reaches only its provider's API unless told otherwise; see task.log); " +
				`to allow it, add this line to project.yaml, the spec's front matter or the node in nodes.yaml: network: {allow: ["evil.example:443", "127.0.0.1:9"]}`},
		{"a set list", []string{"[::1]:8080", egress.RefusedMalformed}, false,
			"; the network allow list refused [::1]:8080, a malformed destination (see task.log); " +
				`to allow it, add to the task's network: {allow: [...]} the entries "[::1]:8080"`},
		{"only malformed", []string{egress.RefusedMalformed}, true, "; the network allow list refused a malformed destination (see task.log)"},
		{"many", many, true,
			"; the sandbox's network refused a.com:443, b.com:443, c.com:443 and 8 more (under the sandbox an agent reaches only its provider's API unless told otherwise; see task.log); " +
				`to allow it, add this line to project.yaml, the spec's front matter or the node in nodes.yaml: network: {allow: ["a.com:443", "b.com:443", "c.com:443", "d.com:443", "e.com:443", "f.com:443", "g.com:443", "h.com:443", "i.com:443", "j.com:443"]}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := sandbox.RefusedNote(c.refused, c.byDefault); got != c.want {
				t.Errorf("refusedNote(%q, %v)\n got %s\nwant %s", c.refused, c.byDefault, got, c.want)
			}
		})
	}
}
