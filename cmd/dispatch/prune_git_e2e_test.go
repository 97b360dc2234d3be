package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dispatch-tool/dispatch/internal/gittest"
)

// TestPruneGitBranches: a git-native project run four times on the local
// node (with spare checkouts) with retention {runs: 2}; runs 1 and 2
// start from one commit of the operator's, runs 3 and 4 from the next.
// S01 never changes (run 4 reuses run 3's commit), S02 changes each run,
// S03 is in runs 1 and 2 only, S04 in run 1 only and its branch moved by
// the operator since. Pruning runs 1 and 2 deletes dispatch/g/S03 only
// (--dry-run lists it and deletes nothing) and the node's spares of the
// first base; S01's, S02's and the moved S04's branches stay, and the
// second base's spares, the operator's own refs are untouched, and a fifth
// run still reuses S01.
func TestPruneGitBranches(t *testing.T) {
	op := gittest.New(t)
	op.Write("a.txt", "base\n")
	base := op.Commit("base")
	home, work := opsHome(t, map[string]map[string]string{"g": {
		"S01-one.md": "echo one > one.txt\n", "S02-two.md": "echo two-1 > two.txt\n",
		"S03-three.md": "echo three > three.txt\n", "S04-four.md": "echo four > four.txt\n"}})
	cfg := filepath.Join(home, "nodes.yaml")
	writeFile(t, cfg, strings.Replace(readFile(t, cfg), "    slots: 4\n", "    slots: 4\n    spares: 1\n", 1))
	t.Cleanup(func() { gittest.WaitForSpares(t, work) })
	dir := filepath.Join(home, "specs", "g")
	writeFile(t, filepath.Join(dir, "project.yaml"), "repo: "+op.Dir+"\ntool: shell\nintegration: false\n")
	branch := func(id string) string {
		out, err := op.Run(nil, "rev-parse", "--verify", "-q", "refs/heads/dispatch/g/"+id)
		if err != nil {
			return ""
		}
		return strings.TrimSpace(string(out))
	}
	var next string
	for i := 1; i <= 4; i++ {
		writeFile(t, filepath.Join(dir, "S02-two.md"), fmt.Sprintf("echo two-%d > two.txt\n", i))
		switch i {
		case 2:
			os.Remove(filepath.Join(dir, "S04-four.md"))
			op.Git("update-ref", "refs/heads/dispatch/g/S04", base) // the operator's move
		case 3:
			os.Remove(filepath.Join(dir, "S03-three.md"))
			op.Write("a.txt", "next\n")
			next = op.Commit("next")
		}
		if r := runDispatch(t, nil, "--home", home, "start", "g"); r.code != 0 {
			t.Fatalf("run %d: %s", i, r)
		}
	}
	gittest.WaitForSpares(t, work)
	spares := filepath.Join(work, "g", "spares")
	for _, b := range []string{base, next} {
		if !exists(filepath.Join(spares, b)) {
			t.Fatalf("no spares of %s before the prune", b[:12])
		}
	}
	s01, s02, s03 := branch("S01"), branch("S02"), branch("S03")
	if s01 == "" || s02 == "" || s03 == "" || branch("S04") != base {
		t.Fatalf("branches before the prune: S01 %q S02 %q S03 %q S04 %q", s01, s02, s03, branch("S04"))
	}
	writeFile(t, filepath.Join(dir, "project.yaml"), "repo: "+op.Dir+"\ntool: shell\nintegration: false\nretention: {runs: 2}\n")
	before := readOperatorState(t, op)
	refs := op.Git("for-each-ref")

	dry := runDispatch(t, nil, "--home", home, "prune", "g", "--dry-run")
	want := fmt.Sprintf("g branch dispatch/g/S03 at %s in %s", s03[:12], op.Dir)
	if dry.code != 0 || !strings.Contains(dry.stdout, want) || strings.Count(dry.stdout, " branch dispatch/") != 1 ||
		!strings.Contains(dry.stdout, "1 branch(es)") || !strings.Contains(dry.stdout, "g spare checkouts of base(s) "+base[:12]+" on the nodes") {
		t.Fatalf("prune --dry-run should list %q only: %s", want, dry)
	}
	if got := op.Git("for-each-ref"); got != refs || !exists(filepath.Join(spares, base)) {
		t.Fatalf("--dry-run changed refs or spares:\n%s\n---\n%s", refs, got)
	}
	r := runDispatch(t, nil, "--home", home, "prune", "g")
	if r.code != 0 || !strings.Contains(r.stdout, want) || !strings.Contains(r.stdout, "pruned 2 run(s) of g") {
		t.Fatalf("prune: %s", r)
	}
	if got := [4]string{branch("S01"), branch("S02"), branch("S03"), branch("S04")}; got != [4]string{s01, s02, "", base} {
		t.Errorf("branches after the prune (S01..S04) = %v, want %v", got, [4]string{s01, s02, "", base})
	}
	if exists(filepath.Join(spares, base)) || !exists(filepath.Join(spares, next)) {
		t.Errorf("after the prune the spares of %s should be gone, those of %s there", base[:12], next[:12])
	}
	if after := readOperatorState(t, op); !equalState(before, after) {
		t.Errorf("the operator's repository changed outside dispatch/:\n%+v\n%+v", before, after)
	}
	writeFile(t, filepath.Join(dir, "S02-two.md"), "echo two-9 > two.txt\n")
	if r := runDispatch(t, nil, "--home", home, "start", "g"); r.code != 0 || !strings.Contains(r.stdout, "1 task(s) to run, 1 reused") {
		t.Fatalf("a run after the prune: %s", r)
	}
	if files := op.Git("diff", "--name-only", next, "dispatch/g/S01"); files != "one.txt" {
		t.Errorf("dispatch/g/S01 after the fifth run changes %q", files)
	}
}
