package plan

import (
	"strings"
	"testing"

	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/spec"
	"github.com/dispatch-tool/dispatch/wire"
)

func TestCheckExecutables(t *testing.T) {
	cfg, err := nodes.Parse("nodes.yaml", []byte(`
nodes:
  - name: a
    slots: 1
  - name: b
    slots: 1
    tool: codex
  - name: r
    slots: 1
    dangerous: true
  - name: box
    slots: 1
    api_mode: sandbox
  - name: rb
    slots: 1
    dangerous: true
    sandbox: on
  - name: au
    slots: 1
    sandbox: auto
  - name: sb
    slots: 1
    sandbox: on
api_modes:
  sandbox:
    dangerous: true
    env: {IS_SANDBOX: "1"}
`))
	if err != nil {
		t.Fatal(err)
	}
	s01 := Row{Task: &spec.Task{ID: "S01"}, Type: "implementation", Nodes: []string{"a", "b"}, Tools: map[string]string{"a": "claude", "b": "codex"}}
	s99 := Row{Task: &spec.Task{ID: "S99"}, Type: "integration", Generated: true, Nodes: []string{"a"}, Tools: map[string]string{"a": "claude"}}
	sh := Row{Task: &spec.Task{ID: "S02"}, Type: "implementation", Nodes: []string{"a"}, Tools: map[string]string{"a": "shell"}}
	onR := Row{Task: &spec.Task{ID: "S03"}, Type: "implementation", Nodes: []string{"r"}, Tools: map[string]string{"r": "claude"}}
	onBox := Row{Task: &spec.Task{ID: "S04"}, Type: "implementation", Nodes: []string{"box"}, Tools: map[string]string{"box": "claude"}}
	onRB := Row{Task: &spec.Task{ID: "S06"}, Type: "implementation", Nodes: []string{"rb"}, Tools: map[string]string{"rb": "claude"}}
	bwrap := func(p Probe) Probe {
		p.Sandbox = &wire.SandboxReply{Sandbox: wire.SandboxBwrap}
		return p
	}
	noneAU := Row{Task: &spec.Task{ID: "S07", Network: "none"}, Type: "implementation", Nodes: []string{"au"}, Tools: map[string]string{"au": "claude"}}
	openAU := Row{Task: &spec.Task{ID: "S08"}, Type: "implementation", Nodes: []string{"au"}, Tools: map[string]string{"au": "claude"}}
	noBwrap := func(p Probe) Probe {
		p.Sandbox = &wire.SandboxReply{Error: "bwrap not found", Fix: "apt install bubblewrap"}
		return p
	}
	gitRow := Row{Task: &spec.Task{ID: "S05"}, Type: "implementation", Nodes: []string{"a", "b"}, Tools: map[string]string{"a": "claude", "b": "codex"}, Git: true}
	root := func(p Probe) Probe { p.Root = true; return p }
	found := func(names ...string) Probe {
		p := Probe{Found: map[string]bool{}}
		for _, n := range names {
			p.Found[n] = true
		}
		return p
	}
	const underTmp = "the tool lies in /tmp/t, under /tmp, which the sandbox replaces with the attempt's own; install it elsewhere"
	refused := func(p Probe) Probe {
		p.SandboxRefused = map[string]string{"claude": underTmp}
		return p
	}
	onSB := Row{Task: &spec.Task{ID: "S09"}, Type: "implementation", Nodes: []string{"sb"}, Tools: map[string]string{"sb": "claude"}}
	onSBOrA := Row{Task: &spec.Task{ID: "S10"}, Type: "implementation", Nodes: []string{"sb", "a"}, Tools: map[string]string{"sb": "claude", "a": "claude"}}
	offAU := Row{Task: &spec.Task{ID: "S11", Sandbox: "off"}, Type: "implementation", Nodes: []string{"au"}, Tools: map[string]string{"au": "claude"}}
	tests := []struct {
		name     string
		rows     []Row
		probes   map[string]Probe
		problems []string // substrings, one per problem
		notes    int
	}{
		{"one node has it", []Row{s01}, map[string]Probe{"a": found(), "b": found("codex")}, nil, 0},
		{"no node has it", []Row{s01}, map[string]Probe{"a": found(), "b": found()},
			[]string{"task S01 cannot run anywhere: a (tool claude: no claude in its PATH); b (tool codex: no codex in its PATH)"}, 0},
		{"generated phase task names the phase fix", []Row{s99}, map[string]Probe{"a": found("codex")},
			[]string{"the generated integration task S99|integration: false"}, 0},
		{"unreachable node is a note, not a problem", []Row{s01}, map[string]Probe{"a": found(), "b": {Err: "connection refused"}}, nil, 1},
		{"shell needs /bin/sh", []Row{sh}, map[string]Probe{"a": found("/bin/sh")}, nil, 0},
		{"dangerous claude as root", []Row{onR}, map[string]Probe{"r": root(found("claude"))},
			[]string{"task S03 cannot run anywhere: on r claude would run as root with --dangerously-skip-permissions|IS_SANDBOX=1"}, 0},
		{"dangerous claude as another user", []Row{onR}, map[string]Probe{"r": found("claude")}, nil, 0},
		{"dangerous claude as root in a sandbox", []Row{onBox}, map[string]Probe{"box": root(found("claude"))}, nil, 0},
		{"dangerous claude as root on a sandbox: on node", []Row{onRB}, map[string]Probe{"rb": bwrap(root(found("claude")))}, nil, 0},
		{"a repo project's node with git", []Row{gitRow}, map[string]Probe{"a": found("claude"), "b": found("codex", "git")}, nil, 0},
		{"a repo project's nodes without git", []Row{gitRow}, map[string]Probe{"a": found("claude"), "b": found("codex")},
			[]string{"task S05 cannot run anywhere: a (no git in its PATH|b (no git in its PATH|install git"}, 0},
		{"network: none where the sandbox works", []Row{noneAU}, map[string]Probe{"au": bwrap(found("claude"))}, nil, 0},
		{"network: none where the sandbox does not work", []Row{noneAU}, map[string]Probe{"au": noBwrap(found("claude"))},
			[]string{"task S07 cannot run anywhere: au (sandbox: unavailable: bwrap not found|make the sandbox work"}, 0},
		{"network open on sandbox: auto without the sandbox", []Row{openAU}, map[string]Probe{"au": noBwrap(found("claude"))}, nil, 0},
		{"root without dangerous", []Row{s01}, map[string]Probe{"a": root(found("claude")), "b": found()}, nil, 0},
		// What the wrapper's probe knows the sandbox refuses (issue 32 item 4).
		{"a tool under /tmp on a sandbox: on node", []Row{onSB}, map[string]Probe{"sb": refused(bwrap(found("claude")))},
			[]string{"task S09 cannot run anywhere: sb (tool claude: claude cannot run in the node's sandbox: " + underTmp + "|install the tool outside /tmp|sandbox: off"}, 0},
		{"a tool under /tmp on sandbox: auto where bwrap works", []Row{openAU}, map[string]Probe{"au": refused(bwrap(found("claude")))},
			[]string{"task S08 cannot run anywhere: au (tool claude: claude cannot run in the node's sandbox"}, 0},
		{"a tool under /tmp on sandbox: auto without bwrap runs unconfined", []Row{openAU}, map[string]Probe{"au": refused(noBwrap(found("claude")))}, nil, 0},
		{"a tool under /tmp on sandbox: auto, the sandbox not asked", []Row{openAU}, map[string]Probe{"au": found("claude")}, nil, 0},
		{"a tool under /tmp for a task with sandbox: off", []Row{offAU}, map[string]Probe{"au": refused(bwrap(found("claude")))}, nil, 0},
		{"a tool under /tmp on one node, fine on another", []Row{onSBOrA}, map[string]Probe{"sb": refused(bwrap(found("claude"))), "a": found("claude")}, nil, 0},
		{"a sandbox: on node whose bwrap does not work", []Row{onSB}, map[string]Probe{"sb": noBwrap(found("claude"))},
			[]string{"task S09 cannot run anywhere: sb (sandbox: unavailable: bwrap not found|make the sandbox work"}, 0},
		{"a sandbox: on node not asked of its sandbox", []Row{onSB}, map[string]Probe{"sb": found("claude")}, nil, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			problems, notes := CheckExecutables(cfg, tc.rows, tc.probes)
			if len(problems) != len(tc.problems) || len(notes) != tc.notes {
				t.Fatalf("problems %q, notes %q; want %d problems, %d notes", problems, notes, len(tc.problems), tc.notes)
			}
			for i, wants := range tc.problems {
				for _, want := range append(strings.Split(wants, "|"), "fix:") {
					if !strings.Contains(problems[i], want) {
						t.Errorf("problem %q lacks %q", problems[i], want)
					}
				}
			}
		})
	}
}

// TestCheckExecutablesNotesSayWhy: a task none of whose nodes could be
// asked gets a note naming each node with its reason (issue 39: "could
// not check box1, box2 for its tool" said none).
func TestCheckExecutablesNotesSayWhy(t *testing.T) {
	cfg := &nodes.Config{Nodes: []nodes.Node{{Name: "box1"}, {Name: "box2"}, {Name: "box3"}}}
	row := Row{Task: &spec.Task{ID: "S01"}, Type: "implementation", Nodes: []string{"box1", "box2", "box3"},
		Tools: map[string]string{"box1": "shell", "box2": "shell", "box3": "shell"}}
	probes := map[string]Probe{
		"box1": {Err: "node box1 unreachable: connect: connection refused (ssh u@127.0.0.1:1, while exec /bin/sh on box1)"},
		"box2": {Err: "host key of node box2 is unknown\n  fix: run `dispatch nodes trust box2`"},
	}
	_, notes := CheckExecutables(cfg, []Row{row}, probes)
	want := "task S01: could not check box1 (unreachable: connect: connection refused (ssh u@127.0.0.1:1, while exec /bin/sh on box1)); box2 (host key of node box2 is unknown); box3 (not asked) for its tool"
	if len(notes) != 1 || !strings.HasPrefix(notes[0], want) {
		t.Errorf("notes %q; want one beginning %q", notes, want)
	}
}
