package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dispatch-tool/dispatch/internal/crashpoint"
	"github.com/dispatch-tool/dispatch/internal/gittest"
	"github.com/dispatch-tool/dispatch/internal/sshdtest"
)

// operatorState is what of the operator's repository dispatch must leave
// as it was: HEAD, the index, the working tree's status, and every ref
// outside refs/heads/dispatch/.
type operatorState struct {
	head, index, status string
	refs                []string
}

func readOperatorState(t *testing.T, op *gittest.Repo) operatorState {
	t.Helper()
	idx, err := os.ReadFile(filepath.Join(op.Dir, ".git", "index"))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(idx)
	var refs []string
	for _, l := range strings.Split(op.Git("for-each-ref", "--format=%(refname) %(objectname)"), "\n") {
		if !strings.HasPrefix(l, "refs/heads/dispatch/") {
			refs = append(refs, l)
		}
	}
	return operatorState{
		head:   op.Git("symbolic-ref", "HEAD") + " " + op.Git("rev-parse", "HEAD"),
		index:  hex.EncodeToString(sum[:]),
		status: op.Git("status", "--porcelain", "--untracked-files=all"),
		refs:   refs,
	}
}

// gitProject is an operator repository with three files and a project of
// three shell tasks on it: S01 and S02 change the same line of shared.txt
// (a real conflict), S03 another line, and S02 depends on S03 (it starts
// on S03's commit), so that the merge order is S01, S03, S02. S99 resolves the
// conflict and V01 passes. The working tree is left dirty.
func gitProject(t *testing.T, home string) (*gittest.Repo, string) {
	t.Helper()
	op := gittest.New(t)
	var shared strings.Builder
	for i := 1; i <= 20; i++ {
		fmt.Fprintf(&shared, "line %d\n", i)
	}
	op.Write("shared.txt", shared.String())
	op.Write("a.txt", "committed\n")
	op.Write(".gitignore", "*.log\n")
	op.Write("tools/run.sh", "#!/bin/sh\necho run\n")
	os.Chmod(filepath.Join(op.Dir, "tools/run.sh"), 0o755)
	base := op.Commit("base")
	op.Git("branch", "other")
	op.Git("tag", "v1")
	// Uncommitted work of the operator's: not shipped, not touched.
	op.Write("a.txt", "dirty, not committed\n")
	op.Write("untracked.txt", "mine\n")
	op.Git("add", "untracked.txt")

	dir := filepath.Join(home, "specs", "g")
	writeFile(t, filepath.Join(dir, "project.yaml"), fmt.Sprintf("repo: %s\ntool: shell\nmax_fix_rounds: 0\n", op.Dir))
	writeFile(t, filepath.Join(dir, "S01-one.md"), "sed -i 's/^line 3$/line 3 by S01/' shared.txt && echo one > s01.txt && echo noise > s01.log\n")
	writeFile(t, filepath.Join(dir, "S02-two.md"), "---\ndepends_on: [S03]\n---\nsed -i 's/^line 3$/line 3 by S02/' shared.txt && cat a.txt > seen-a.txt\n")
	writeFile(t, filepath.Join(dir, "S03-three.md"), "sed -i 's/^line 18$/line 18 by S03/' shared.txt && echo three > s03.txt\n")
	// S04 fails once: its retry starts from a fresh workspace.
	writeFile(t, filepath.Join(dir, "S04-retried.md"), "if [ -e ../failed-once ]; then echo four > s04.txt; "+
		"else touch ../failed-once; echo partial > partial.txt; exit 1; fi\n")
	writeFile(t, filepath.Join(dir, "S99-integrate.md"), "grep -c '^<<<<<<<' shared.txt > conflicts-seen.txt; "+
		"sed -i -e '/^<<<<<<< /d' -e '/^=======$/d' -e '/^>>>>>>> /d' shared.txt && git status --porcelain > INTEGRATION.md\n")
	writeFile(t, filepath.Join(dir, "V01-verify.md"), "if grep -q '^<<<<<<<' shared.txt; then echo '{\"pass\": false, \"issues\": [\"markers\"]}'; else echo '{\"pass\": true, \"issues\": []}'; fi > verdict.json\n")
	return op, base
}

// TestGitNativeProject: a project on a git repository, on two sshd nodes:
// each task works on its own branch, the results come back as branches of
// the operator's repository, the integration merges them with git (the
// real conflict listed and committed with markers for S99), and the
// operator's HEAD, index, working tree and other refs are untouched.
func TestGitNativeProject(t *testing.T) {
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
	unsandboxed(t, h.home, "S04 leaves a marker outside its workspace for its retry")
	op, base := gitProject(t, h.home)
	before := readOperatorState(t, op)

	r := h.run(t, "validate", "g")
	if r.code != 0 || !strings.Contains(r.stderr, "uncommitted changes") || !strings.Contains(r.stderr, base[:12]) {
		t.Fatalf("validate: %s", r)
	}
	r = h.run(t, "start", "g")
	if r.code != 0 {
		t.Fatalf("start: %s", r)
	}
	if strings.Count(r.stderr, "uncommitted changes") != 1 {
		t.Errorf("start says the dirty tree %d times, want once:\n%s", strings.Count(r.stderr, "uncommitted changes"), r.stderr)
	}
	if after := readOperatorState(t, op); !equalState(before, after) {
		t.Errorf("the operator's repository changed:\nbefore %+v\nafter  %+v", before, after)
	}

	branches := map[string]string{}
	for _, l := range strings.Split(op.Git("for-each-ref", "--format=%(refname:short) %(objectname)", "refs/heads/dispatch/"), "\n") {
		name, commit, _ := strings.Cut(l, " ")
		branches[name] = commit
	}
	for _, b := range []string{"S01", "S02", "S03", "S04", "S99", "V01", "merge", "final"} {
		if branches["dispatch/g/"+b] == "" {
			t.Errorf("no branch dispatch/g/%s; have %v", b, branches)
		}
	}
	// Each task's commit is one commit on the base, by dispatch <ID>, with
	// its title; .gitignore is respected.
	s01 := branches["dispatch/g/S01"]
	if got := op.Git("rev-parse", s01+"^"); got != base {
		t.Errorf("S01's commit's parent is %s, want the base %s", got, base)
	}
	if got := op.Git("log", "-1", "--format=%an|%s", s01); got != "dispatch S01|S01: one (attempt 1)" {
		t.Errorf("S01's commit: %q", got)
	}
	if files := op.Git("diff", "--name-only", base, s01); files != "s01.txt\nshared.txt" {
		t.Errorf("S01 changed %q, want s01.txt and shared.txt (s01.log is ignored)", files)
	}
	if files := op.Git("diff", "--name-only", base, branches["dispatch/g/S04"]); files != "s04.txt" {
		t.Errorf("S04's second attempt changed %q, want s04.txt only (a fresh workspace)", files)
	}
	// Its commit names the attempt that completed: the second, or a later
	// one when a loaded machine failed the second for another cause (said
	// in the log).
	s04, _ := openStore(t, h.home).Task(context.Background(), "g", "S04")
	if got, want := op.Git("log", "-1", "--format=%s", branches["dispatch/g/S04"]), fmt.Sprintf("S04: retried (attempt %d)", s04.Attempt); s04.Attempt < 2 || got != want {
		t.Errorf("S04's commit: %q, want %q (attempt 2 or later)", got, want)
	}
	if s04.Attempt > 2 {
		runs, _ := openStore(t, h.home).Attempts(context.Background(), "g", "S04")
		for _, r := range runs {
			t.Logf("S04 attempt %d on %s: %s %s %s", r.Attempt, r.Node, r.Status, r.ErrorClass, r.Error)
		}
	}
	// The committed a.txt was shipped, not the dirty one.
	if got := op.Git("show", branches["dispatch/g/S02"]+":seen-a.txt"); got != "committed" {
		t.Errorf("S02 saw a.txt = %q, want the committed content", got)
	}
	if stat := readFile(t, filepath.Join(h.home, "runs", "g", "S01", "diffstat.txt")); !strings.Contains(stat, "s01.txt") || !strings.Contains(stat, "2 files changed") {
		t.Errorf("diffstat.txt of S01:\n%s", stat)
	}

	// The merge: S01, S03, then S02 (after S03, its dependency, whose
	// commit S02 started on: S03 comes in with S02); S02 conflicts with
	// S01.
	merge := branches["dispatch/g/merge"]
	if got := op.Git("rev-parse", branches["dispatch/g/S02"]+"^"); got != branches["dispatch/g/S03"] {
		t.Errorf("S02 started on %s, want S03's commit %s", got, branches["dispatch/g/S03"])
	}
	if got := op.Git("log", "--format=%s", "--first-parent", base+".."+merge); got != "Merge S04\nMerge S02 (conflicts: shared.txt)\nMerge S01" {
		t.Errorf("merges:\n%s", got)
	}
	if got := op.Git("show", merge+":shared.txt"); !strings.Contains(got, "<<<<<<<") || !strings.Contains(got, "line 18 by S03") {
		t.Errorf("the merge's shared.txt holds no conflict markers or lacks S03's change:\n%s", got)
	}
	var rep struct {
		Result    string `json:"result"`
		Conflicts []struct {
			Path  string   `json:"path"`
			Tasks []string `json:"tasks"`
		} `json:"conflicts"`
	}
	r = h.run(t, "report", "g", "--format", "json")
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("report: %v\n%s", err, r)
	}
	if rep.Result != "passed" || len(rep.Conflicts) != 1 || rep.Conflicts[0].Path != "shared.txt" || !slices.Equal(rep.Conflicts[0].Tasks, []string{"S01", "S02"}) {
		t.Errorf("report: %+v", rep)
	}
	// Before merging, the files more than one task changed are listed.
	evs, _ := openStore(t, h.home).Events(context.Background(), "g", 0, 0)
	listed := false
	for _, e := range evs {
		listed = listed || strings.Contains(e.Message, "shared.txt changed by S01, S03, S02")
	}
	if !listed {
		t.Error("no event lists shared.txt as changed by S01, S03 and S02")
	}
	md := readFile(t, filepath.Join(h.home, "runs", "g", "report.md"))
	if !strings.Contains(md, "shared.txt") || !strings.Contains(md, "dispatch/g/final") || !strings.Contains(md, branches["dispatch/g/final"][:12]) {
		t.Errorf("report.md lacks the conflict or the result's branch and commit:\n%s", md)
	}

	// S99 saw the conflict and resolved it on the merge; V01 verified it;
	// the result is S99's commit, checked out in runs/g/final/.
	final := branches["dispatch/g/final"]
	if final != branches["dispatch/g/S99"] {
		t.Errorf("final %s is not S99's commit %s", final, branches["dispatch/g/S99"])
	}
	if got := op.Git("show", final+":conflicts-seen.txt"); got != "1" {
		t.Errorf("S99 saw %q conflicts", got)
	}
	want := map[string]string{"shared.txt": "", "s01.txt": "one\n", "s03.txt": "three\n", "a.txt": "committed\n", "seen-a.txt": "committed\n"}
	for f, content := range want {
		got := readFile(t, filepath.Join(h.home, "runs", "g", "final", f))
		if content != "" && got != content {
			t.Errorf("final/%s = %q, want %q", f, got, content)
		}
		if f == "shared.txt" && (strings.Contains(got, "<<<<<<<") || !strings.Contains(got, "line 3 by S01") || !strings.Contains(got, "line 18 by S03")) {
			t.Errorf("final/shared.txt:\n%s", got)
		}
	}
	if fi, err := os.Stat(filepath.Join(h.home, "runs", "g", "final", "tools", "run.sh")); err != nil || fi.Mode().Perm()&0o100 == 0 {
		t.Errorf("final/tools/run.sh: %v %v, want executable", fi, err)
	}
	if _, err := os.Stat(filepath.Join(h.home, "runs", "g", "final", "verdict.json")); err == nil {
		t.Error("final/ holds the verifier's verdict.json")
	}

	// cleanup removes the workspaces, the nodes' repositories and the
	// wrapper's private records of the results.
	snapshots := func() []string {
		var all []string
		for _, s := range []*sshdtest.Server{s1, s2} {
			m, _ := filepath.Glob(filepath.Join(s.WorkDir, "*", ".ctl", "*.git"))
			all = append(all, m...)
		}
		return all
	}
	if len(snapshots()) == 0 {
		t.Fatal("no private git directory of a result on the nodes")
	}
	if r := h.run(t, "cleanup", "g", "--yes"); r.code != 0 {
		t.Fatalf("cleanup: %s", r)
	}
	if left := snapshots(); len(left) > 0 {
		t.Errorf("cleanup left %v", left)
	}
	for _, s := range []*sshdtest.Server{s1, s2} {
		if _, err := os.Stat(filepath.Join(s.WorkDir, "g")); err == nil {
			t.Errorf("cleanup left %s", filepath.Join(s.WorkDir, "g"))
		}
	}
}

func equalState(a, b operatorState) bool {
	return a.head == b.head && a.index == b.index && a.status == b.status && slices.Equal(a.refs, b.refs)
}

// TestGitNativeBadInput: a repo: that is not a repository, a ref that
// does not exist, a repository without commits, and nodes without git are
// each refused by validate and start with the line and the fix, exit 2,
// nothing written.
func TestGitNativeBadInput(t *testing.T) {
	t.Parallel()
	home, work := newLocalHome(t)
	op := gittest.New(t)
	op.Write("a.txt", "a\n")
	op.Commit("base")
	empty := gittest.New(t)
	dir := filepath.Join(home, "specs", "g")
	writeFile(t, filepath.Join(dir, "S01-one.md"), "echo one > one.txt\n")
	for _, tc := range []struct{ name, yaml, want string }{
		{"not a repository", "tool: shell\nrepo: " + t.TempDir() + "\n", "project.yaml:2: repo: "},
		{"unknown ref", "tool: shell\nrepo: " + op.Dir + "\nref: nope\n", `project.yaml:3: ref: "nope" names no commit`},
		{"no commits", "tool: shell\nrepo: " + empty.Dir + "\n", "has no commits"},
	} {
		writeFile(t, filepath.Join(dir, "project.yaml"), tc.yaml)
		for _, cmd := range []string{"validate", "start"} {
			r := runDispatch(t, nil, "--home", home, cmd, "g")
			if r.code != 2 || !strings.Contains(r.stderr, tc.want) || !strings.Contains(r.stderr, "fix:") {
				t.Errorf("%s, %s: %s; want exit 2 with %q and a fix", tc.name, cmd, r, tc.want)
			}
		}
	}
	// A node whose PATH has no git cannot run a repo project's tasks.
	writeFile(t, filepath.Join(home, "nodes.yaml"), fmt.Sprintf(`nodes:
  - name: local
    ssh: null
    work_dir: %s
    api_mode: bare
api_modes:
  bare:
    env:
      PATH: %s
`, work, t.TempDir()))
	writeFile(t, filepath.Join(dir, "project.yaml"), "tool: shell\nrepo: "+op.Dir+"\n")
	for _, cmd := range []string{"validate", "start"} {
		r := runDispatch(t, nil, "--home", home, cmd, "g")
		if r.code != 2 || !strings.Contains(r.stderr, "no git in its PATH") || !strings.Contains(r.stderr, "install git") {
			t.Errorf("%s with a node without git: %s", cmd, r)
		}
	}
	for _, p := range []string{filepath.Join(home, "dispatch.db"), filepath.Join(home, "runs"), work} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s was written", p)
		}
	}
	if refs := op.Git("for-each-ref", "refs/heads/dispatch/"); refs != "" {
		t.Errorf("refs written: %s", refs)
	}
}

// TestGitControllerKilledMidFetch: a controller killed while a task's
// commits stream into the operator's repository, or right after its
// branch is set, is restarted and ends with every task's branch, each
// task run once.
func TestGitControllerKilledMidFetch(t *testing.T) {
	for _, point := range []string{crashpoint.MidFetch, crashpoint.AfterImport} {
		t.Run(strings.ReplaceAll(point, ":", "_"), func(t *testing.T) {
			t.Parallel()
			h, _ := policyHome(t, "    spares: 0\n    sandbox: off # each task counts its runs in a ledger outside its workspace\n", "")
			op := gittest.New(t)
			// Enough content that the pack of a task's result takes more
			// than one read.
			op.Write("big.txt", strings.Repeat("base line\n", 1<<16))
			base := op.Commit("base")
			ledger := filepath.Join(t.TempDir(), "ledger")
			dir := filepath.Join(h.home, "specs", "k")
			writeFile(t, filepath.Join(dir, "project.yaml"), "repo: "+op.Dir+"\ntool: shell\nintegration: false\n")
			for _, id := range []string{"S01", "S02", "S03"} {
				writeFile(t, filepath.Join(dir, id+"-t.md"), fmt.Sprintf("echo %s >> %s\nhead -c 300000 /dev/urandom | base64 > %s.txt\n", id, ledger, id))
			}
			before := readOperatorState(t, op)
			r := runDispatch(t, append(h.env, crashpoint.Env+"="+point), "--home", h.home, "start", "k")
			if r.code != -1 {
				t.Fatalf("with %s=%s the controller should have been killed: %s", crashpoint.Env, point, r)
			}
			r = h.run(t, "start", "k")
			if r.code != 0 {
				t.Fatalf("restart: %s", r)
			}
			runs := map[string]int{}
			for _, l := range strings.Fields(readFile(t, ledger)) {
				runs[l]++
			}
			refs := op.Git("for-each-ref", "--format=%(refname)", "refs/heads/dispatch/")
			if refs != "refs/heads/dispatch/k/S01\nrefs/heads/dispatch/k/S02\nrefs/heads/dispatch/k/S03" {
				t.Errorf("refs after the restart:\n%s", refs)
			}
			for _, id := range []string{"S01", "S02", "S03"} {
				if runs[id] != 1 {
					t.Errorf("%s ran %d times", id, runs[id])
				}
				b := "dispatch/k/" + id
				if got := op.Git("rev-parse", b+"^"); got != base {
					t.Errorf("%s's parent is %s, want the base", b, got)
				}
				if files := op.Git("diff", "--name-only", base, b); files != id+".txt" {
					t.Errorf("%s changed %q", b, files)
				}
			}
			if after := readOperatorState(t, op); !equalState(before, after) {
				t.Errorf("the operator's repository changed:\nbefore %+v\nafter  %+v", before, after)
			}
		})
	}
}

// TestGitSpareCheckouts: after a launch the node prepares a spare checkout
// of the base in the background, and the next launch takes it instead of
// writing the tree again; its result is its own change only.
func TestGitSpareCheckouts(t *testing.T) {
	t.Parallel()
	h, srv := policyHome(t, "    spares: 1\n", "")
	t.Cleanup(func() { gittest.WaitForSpares(t, srv.WorkDir) })
	op := gittest.New(t)
	for i := range 40 {
		op.Write(fmt.Sprintf("src/%02d.txt", i), strings.Repeat("x\n", i))
	}
	base := op.Commit("base")
	dir := filepath.Join(h.home, "specs", "s")
	writeFile(t, filepath.Join(dir, "project.yaml"), "repo: "+op.Dir+"\nintegration: false\n")
	// S01 lasts long enough for the spare to be ready when S02 launches;
	// S02 starts on the base (a stacked task starts on its dependencies'
	// results, which no spare holds).
	writeFile(t, filepath.Join(dir, "S01-first.md"), "echo one > one.txt; sleep 3\n")
	writeFile(t, filepath.Join(dir, "S02-second.md"), "---\ndepends_on: [S01]\nstart_from: base\n---\necho two > two.txt\n")
	if r := h.run(t, "start", "s"); r.code != 0 {
		t.Fatalf("start: %s", r)
	}
	logs := map[string]string{}
	for _, id := range []string{"S01", "S02"} {
		logs[id] = readFile(t, filepath.Join(srv.WorkDir, "s", "tasks", id, "wrapper.log"))
		if files := op.Git("diff", "--name-only", base, "dispatch/s/"+id); files != map[string]string{"S01": "one.txt", "S02": "two.txt"}[id] {
			t.Errorf("%s changed %q", id, files)
		}
	}
	if !strings.Contains(logs["S01"], "from_spare=false") || !strings.Contains(logs["S02"], "from_spare=true") {
		t.Errorf("S01 should have checked out the tree and S02 taken a spare:\nS01: %s\nS02: %s", logs["S01"], logs["S02"])
	}
}

// TestRepoProjectNameGitRefuses: validate and start refuse a git-native
// project whose name makes branch names git refuses (x.lock), exit 2 with
// the rule and the fix, before anything runs.
func TestRepoProjectNameGitRefuses(t *testing.T) {
	home, _ := opsHome(t, nil)
	op := gittest.New(t)
	op.Write("a.txt", "a\n")
	op.Commit("base")
	dir := filepath.Join(home, "specs", "x.lock")
	writeFile(t, filepath.Join(dir, "project.yaml"), "repo: "+op.Dir+"\ntool: shell\nintegration: false\n")
	writeFile(t, filepath.Join(dir, "S01-a.md"), "echo a > a.txt\n")
	before := tree(t, home)
	for _, cmd := range []string{"validate", "start"} {
		r := runDispatch(t, nil, "--home", home, cmd, "x.lock")
		if r.code != 2 {
			t.Fatalf("%s: %s; want exit 2", cmd, r)
		}
		for _, want := range []string{"dispatch/x.lock/", `cannot end with ".lock"`, "rename the project's directory"} {
			if !strings.Contains(r.stderr, want) {
				t.Errorf("%s: stderr lacks %q:\n%s", cmd, want, r.stderr)
			}
		}
	}
	assertTreeUnchanged(t, home, before)
	if refs := op.Git("for-each-ref", "refs/heads/dispatch/"); refs != "" {
		t.Errorf("branches made: %s", refs)
	}
}
