package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dispatch-tool/dispatch/internal/gittest"
	"github.com/dispatch-tool/dispatch/internal/sshdtest"
)

// TestGitStackedDAG: a git project's DAG over two sshd nodes (issue 33,
// item 1). S01 on n1 writes a file; S02, which depends on it, runs on n2
// and starts on S01's commit, so it sees the file; S03 depends on both and
// sees both; S04, start_from: base, starts on the base as before. Each
// node is sent the commits it lacks, once. The integration merges the
// stacked branches without a conflict and the project passes.
// TestBaseShippedOncePerNode shows that a node is sent only what it lacks.
func TestGitStackedDAG(t *testing.T) {
	h := newSSHHome(t)
	s1 := h.client.StartServer(t, "n1")
	s2 := h.client.StartServer(t, "n2")
	for _, s := range []*sshdtest.Server{s1, s2} {
		h.client.Trust(t, s)
	}
	writeFile(t, filepath.Join(h.home, "nodes.yaml"), testController+fmt.Sprintf(`nodes:
  - name: n1
    ssh: %s@127.0.0.1:%d
    slots: 2
    spares: 0
    work_dir: %s
  - name: n2
    ssh: %s@127.0.0.1:%d
    slots: 2
    spares: 0
    work_dir: %s
`, h.client.User, s1.Port, s1.WorkDir, h.client.User, s2.Port, s2.WorkDir))
	op := gittest.New(t)
	op.Write("README", "base\n")
	base := op.Commit("base")
	dir := filepath.Join(h.home, "specs", "dag")
	writeFile(t, filepath.Join(dir, "project.yaml"), fmt.Sprintf("repo: %s\ntool: shell\nmax_retries: 0\nmax_fix_rounds: 0\n", op.Dir))
	writeFile(t, filepath.Join(dir, "S01-schema.md"), "---\nnode: n1\n---\necho one > s01.txt\n")
	writeFile(t, filepath.Join(dir, "S02-api.md"), "---\nnode: n2\ndepends_on: [S01]\n---\ncat s01.txt > s02-saw.txt && echo two > s02.txt\n")
	writeFile(t, filepath.Join(dir, "S03-both.md"), "---\nnode: n1\ndepends_on: [S02, S01]\n---\ncat s01.txt s02.txt > s03.txt\n")
	writeFile(t, filepath.Join(dir, "S04-alone.md"), "---\nnode: n2\ndepends_on: [S01]\nstart_from: base\n---\ntest ! -e s01.txt && echo alone > s04.txt\n")
	writeFile(t, filepath.Join(dir, "S99-integrate.md"), "cat s01.txt s02.txt s03.txt s04.txt > integrated.txt\n")
	writeFile(t, filepath.Join(dir, "V01-verify.md"), "echo '{\"pass\": true, \"issues\": []}' > verdict.json\n")

	if r := h.run(t, "start", "dag"); r.code != 0 {
		t.Fatalf("start: %s", r)
	}
	branch := func(id string) string { return op.Git("rev-parse", "refs/heads/dispatch/dag/"+id) }
	s01, s02, s03, s04 := branch("S01"), branch("S02"), branch("S03"), branch("S04")
	// Each result is one commit on where it started: S02 on S01's commit,
	// S03 on S02's (which holds S01's), S04 on the base.
	for id, want := range map[string][2]string{"S01": {s01, base}, "S02": {s02, s01}, "S03": {s03, s02}, "S04": {s04, base}} {
		if got := op.Git("log", "-1", "--format=%P", want[0]); got != want[1] {
			t.Errorf("%s's commit has the parents %q, want %s", id, got, want[1])
		}
	}
	for file, want := range map[string]string{s02 + ":s02-saw.txt": "one", s03 + ":s03.txt": "one\ntwo", s04 + ":s04.txt": "alone"} {
		if got := op.Git("show", file); got != want {
			t.Errorf("%s = %q, want %q", file, got, want)
		}
	}
	if files := op.Git("diff", "--name-only", s01, s02); files != "s02-saw.txt\ns02.txt" {
		t.Errorf("S02 changed %q from its start", files)
	}
	if stat := readFile(t, filepath.Join(h.home, "runs", "dag", "S03", "diffstat.txt")); !strings.Contains(stat, s02[:12]+".."+s03[:12]) || !strings.Contains(stat, "1 file changed") {
		t.Errorf("S03's diffstat is not counted from its start:\n%s", stat)
	}
	// Each node was sent the start of the task it ran (its repository
	// names each commit received; the phase tasks add theirs).
	for _, nc := range []struct {
		srv  *sshdtest.Server
		want []string
	}{{s1, []string{base, s02}}, {s2, []string{base, s01}}} {
		refs := strings.Fields(nodeGit(t, filepath.Join(nc.srv.WorkDir, "dag", "repo.git"), "for-each-ref", "--format=%(objectname)", "refs/dispatch/base/"))
		for _, c := range nc.want {
			if !slices.Contains(refs, c) {
				t.Errorf("%s's repository holds the commits %v, not %s", nc.srv.WorkDir, refs, c)
			}
		}
	}
	// The integration merges S03 (which holds S01 and S02) and S04, with
	// no conflict; the final tree has every task's files.
	merge := branch("merge")
	if got := op.Git("log", "--format=%s", "--first-parent", base+".."+merge); got != "Merge S04\nMerge S03" {
		t.Errorf("merges:\n%s", got)
	}
	var rep struct {
		Result    string            `json:"result"`
		Conflicts []json.RawMessage `json:"conflicts"`
	}
	r := h.run(t, "report", "dag", "--format", "json")
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || rep.Result != "passed" || len(rep.Conflicts) != 0 {
		t.Errorf("report: %+v %v\n%s", rep, err, r)
	}
	final := filepath.Join(h.home, "runs", "dag", "final")
	if got := readFile(t, filepath.Join(final, "integrated.txt")); got != "one\ntwo\none\ntwo\nalone\n" {
		t.Errorf("final/integrated.txt = %q", got)
	}
	if _, err := os.Stat(filepath.Join(final, "s02-saw.txt")); err != nil {
		t.Errorf("final/ lacks S02's file: %v", err)
	}
}

// nodeGit runs git in a node's repository (the nodes are on this machine).
func nodeGit(t *testing.T, dir string, args ...string) string {
	t.Helper()
	return (&gittest.Repo{T: t, Dir: dir}).Git(args...)
}
