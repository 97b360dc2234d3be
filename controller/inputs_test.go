package controller

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/home"
	"github.com/dispatch-tool/dispatch/store"
)

// TestSplitInputs: a dependency's output is copied on the node when its
// collected attempt ran there, else sent from the controller; one not
// collected as that attempt (no record, another attempt's manifest) is
// always sent.
func TestSplitInputs(t *testing.T) {
	f := func(attempt int) []store.File { return []store.File{{Attempt: attempt, Path: "a"}} }
	outs := map[string]depOutput{
		"S01": {node: "n1", attempt: 1, collected: true, files: f(1)},
		"S02": {node: "n2", attempt: 1, collected: true, files: f(1)},
		"S03": {node: "n1", attempt: 2, collected: false},
		"S04": {node: "n1", attempt: 1, collected: true}, // an empty output
	}
	tests := []struct {
		name          string
		deps          []string
		node          string
		local, pushed []string
	}{
		{"same node", []string{"S01"}, "n1", []string{"S01"}, nil},
		{"another node", []string{"S01"}, "n2", nil, []string{"S01"}},
		{"mixed, in order", []string{"S02", "S01", "S04"}, "n1", []string{"S01", "S04"}, []string{"S02"}},
		{"not collected", []string{"S03"}, "n1", nil, []string{"S03"}},
		{"unknown", []string{"S09"}, "n1", nil, []string{"S09"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			local, pushed := splitInputs(tc.deps, tc.node, outs)
			if !slices.Equal(local, tc.local) || !slices.Equal(pushed, tc.pushed) {
				t.Errorf("splitInputs = %v, %v, want %v, %v", local, pushed, tc.local, tc.pushed)
			}
		})
	}
}

// twoNodesYAML is two local nodes, unsandboxed: the dependents below try
// to write into their inputs, which only the sandbox refuses.
const twoNodesYAML = `
controller:
  ssh_connect_timeout: 1s
  retry_backoff: 10s
  max_retries: 1
nodes:
  - name: n1
    slots: 2
    work_dir: WORK/n1
    sandbox: off # the dependents tamper with their inputs unconfined
  - name: n2
    slots: 2
    work_dir: WORK/n2
    sandbox: off # the dependents tamper with their inputs unconfined
`

// tamper is a dependent that records what it was given, then does all an
// unconfined task can to its inputs: makes them writable, appends, empties,
// removes.
const tamper = `cat "$DISPATCH_INPUTS/S01/data.txt" "$DISPATCH_INPUTS/S01/sub/x.txt" > seen.txt
stat -c %a "$DISPATCH_INPUTS/S01/sub/x.txt" > mode.txt
chmod -R u+w "$DISPATCH_INPUTS"
echo tampered >> "$DISPATCH_INPUTS/S01/data.txt"
: > "$DISPATCH_INPUTS/S01/sub/x.txt"
chmod 0777 "$DISPATCH_INPUTS/S01/data.txt"
rm -f "$DISPATCH_INPUTS/S01/sub/x.txt"
`

// TestInputsCopiedOnTheNode: a dependent on the node where its dependency
// ran gets the dependency's output copied there (the launch's inputs
// event says so), one on another node gets it from the controller; both
// see what was collected, and neither, unsandboxed, changes by writing,
// chmodding or removing in its inputs/ the controller's collected copy or
// the dependency's output on its node.
func TestInputsCopiedOnTheNode(t *testing.T) {
	h := newHarness(t, twoNodesYAML, shellProject(map[string]string{
		"S01-make.md":      "---\nnode: n1\n---\necho collected > data.txt\nmkdir sub\necho x > sub/x.txt\nchmod 0444 data.txt\n",
		"S02-same.md":      "---\nnode: n1\ndepends_on: [S01]\n---\n" + tamper,
		"S03-other.md":     "---\nnode: n2\ndepends_on: [S01]\n---\n" + tamper,
		"S04-sameagain.md": "---\nnode: n1\ndepends_on: [S02]\n---\ntest -e \"$DISPATCH_INPUTS/S02/seen.txt\"\n",
	}))
	h.tickUntil("project to finish", func() bool {
		p, _ := h.st.Project(context.Background(), "p")
		return p.State == domain.ProjectDone
	})
	if p, _ := h.st.Project(context.Background(), "p"); p.Result != domain.ResultPassed {
		t.Fatalf("result %s: %s", p.Result, h.dump())
	}
	runs := home.RunsDir(h.home, "p")
	for _, id := range []string{"S02", "S03"} {
		if b, _ := os.ReadFile(filepath.Join(runs, id, "output", "seen.txt")); string(b) != "collected\nx\n" {
			t.Errorf("%s saw %q in its inputs, want the collected output", id, b)
		}
		if b, _ := os.ReadFile(filepath.Join(runs, id, "output", "mode.txt")); string(b) != "444\n" {
			t.Errorf("%s's inputs/S01/sub/x.txt has mode %q (0644 in S01's output), want 444: read-only", id, b)
		}
	}
	nodeOut := filepath.Join(h.work, "n1", "p", "tasks", "S01", "output")
	for _, dir := range []string{filepath.Join(runs, "S01", "output"), nodeOut} {
		if b, err := os.ReadFile(filepath.Join(dir, "data.txt")); string(b) != "collected\n" {
			t.Errorf("%s/data.txt = %q (%v): a dependent wrote into it", dir, b, err)
		}
		if b, err := os.ReadFile(filepath.Join(dir, "sub", "x.txt")); string(b) != "x\n" {
			t.Errorf("%s/sub/x.txt = %q (%v): a dependent changed it", dir, b, err)
		}
	}
	if fi, err := os.Stat(filepath.Join(nodeOut, "data.txt")); err != nil || fi.Mode().Perm() != 0o444 {
		t.Errorf("the dependency's data.txt on its node: %v %v, want mode 0444 as it left it", fi.Mode(), err)
	}
	notes := inputsEvents(t, h)
	for id, want := range map[string]string{"S02": "S01 copied on the node", "S03": "S01 sent from the controller",
		"S04": "S02 copied on the node"} {
		if !strings.Contains(notes[id], want) {
			t.Errorf("%s's inputs event %q, want it to say %q", id, notes[id], want)
		}
	}
}

// TestInputsChangedOnTheNodeAreSent: when the dependency's files on the
// node are no longer what was collected (changed in place, same size),
// the dependent gets the controller's collected copy instead, and the
// inputs event says why.
func TestInputsChangedOnTheNodeAreSent(t *testing.T) {
	h := newHarness(t, twoNodesYAML, shellProject(map[string]string{
		"S01-make.md": "---\nnode: n1\n---\necho collected > data.txt\nmkdir sub\necho x > sub/x.txt\n",
		"S02-use.md":  "---\nnode: n1\ndepends_on: [S01]\n---\ncat \"$DISPATCH_INPUTS/S01/data.txt\" > seen.txt\n",
	}))
	h.tickUntil("S01 to be collected", func() bool {
		runs, _ := h.st.Attempts(context.Background(), "p", "S01")
		return len(runs) == 1 && !runs[0].CollectedAt.IsZero()
	})
	if s2 := h.task("S02"); s2.Status != domain.Pending {
		t.Fatalf("S02 is %s before its dependency's files were changed: the test cannot tell", s2.Status)
	}
	nodeData := filepath.Join(h.work, "n1", "p", "tasks", "S01", "output", "data.txt")
	if err := os.WriteFile(nodeData, []byte("CHANGED!!\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	h.tickUntil("project to finish", func() bool {
		p, _ := h.st.Project(context.Background(), "p")
		return p.State == domain.ProjectDone
	})
	if b, _ := os.ReadFile(filepath.Join(home.RunsDir(h.home, "p"), "S02", "output", "seen.txt")); string(b) != "collected\n" {
		t.Errorf("S02 saw %q, want the collected output", b)
	}
	if note := inputsEvents(t, h)["S02"]; !strings.Contains(note, "S01 sent from the controller (its files on the node are not the collected ones: data.txt: its content differs") {
		t.Errorf("S02's inputs event %q, want it sent from the controller, saying why", note)
	}
}

// inputsEvents returns each task's inputs event message.
func inputsEvents(t *testing.T, h *harness) map[string]string {
	t.Helper()
	evs, err := h.st.Events(context.Background(), "p", 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	notes := map[string]string{}
	for _, e := range evs {
		if e.Kind == eventInputs {
			notes[e.Task] = e.Message
		}
	}
	return notes
}
