package wrapper

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/internal/gittest"
	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/gitresult"
	"github.com/dispatch-tool/dispatch/wrapper/taskfiles"
)

// gitCall runs a git subcommand of the wrapper and returns the commits it
// replies, sorted.
func gitCall(t *testing.T, stdin string, args ...string) []string {
	t.Helper()
	out, code := runWrapper(t, stdin, args...)
	var r wire.GitReply
	if code != 0 || json.Unmarshal(out, &r) != nil || r.Commits == nil {
		t.Fatalf("exit %d: %s", code, out)
	}
	slices.Sort(r.Commits)
	return r.Commits
}

// TestGitReceive: a base commit reaches the node's repository as one pack;
// when the base moves, a thin pack of what is missing is enough; a pack cut
// off midway is refused and records nothing.
func TestGitReceive(t *testing.T) {
	t.Parallel()
	op := gittest.New(t)
	for i := range 300 {
		op.Write(filepath.Join("src", strings.Repeat("d", i%5), "f"+strings.Repeat("x", i%9)+".txt"), strings.Repeat("line\n", i))
	}
	base1 := op.Commit("one")
	op.Write("src/f.txt", "changed\n")
	base2 := op.Commit("two")
	repo := filepath.Join(t.TempDir(), "demo", "repo.git")

	if got := gitCall(t, "", "git-have", "--repo", repo); len(got) != 0 {
		t.Fatalf("git-have before anything was received: %v", got)
	}
	got := gitCall(t, string(op.Pack(base1)), "git-receive", "--repo", repo, "--commit", base1)
	if !slices.Equal(got, []string{base1}) {
		t.Fatalf("after the first base: %v", got)
	}
	if fi, err := os.Stat(repo); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("repo.git: %v %v, want mode 0700", fi, err)
	}
	thin := op.Pack(base2, base1)
	// Cut off midway: refused, nothing recorded.
	out, code := runWrapper(t, string(thin[:len(thin)/2]), "git-receive", "--repo", repo, "--commit", base2)
	wantError(t, out, code, wire.KindIO)
	if got := gitCall(t, "", "git-have", "--repo", repo); !slices.Equal(got, []string{base1}) {
		t.Fatalf("after a cut-off pack: %v, want only the first base", got)
	}
	got = gitCall(t, string(thin), "git-receive", "--repo", repo, "--commit", base2)
	want := []string{base1, base2}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("after the moved base: %v, want %v", got, want)
	}
	if len(thin) > len(op.Pack(base1))/4 {
		t.Errorf("the pack of the moved base is %d bytes, the whole first base %d: want only what is missing", len(thin), len(op.Pack(base1)))
	}
	for _, args := range [][]string{
		{"git-receive", "--repo", "relative/repo.git", "--commit", base1},
		{"git-receive", "--repo", filepath.Join(t.TempDir(), "other.git"), "--commit", base1},
		{"git-receive", "--repo", repo, "--commit", "main"},
		{"git-have", "--repo", repo + "/../repo.git"},
	} {
		out, code := runWrapper(t, "", args...)
		wantError(t, out, code, wire.KindUsage)
	}

	// --pack: the controller's upload is read, then removed; a link in its
	// place is not followed.
	op.Write("src/g.txt", "three\n")
	base3 := op.Commit("three")
	pack := filepath.Join(filepath.Dir(repo), "upload.pack")
	if err := os.Symlink(filepath.Join(t.TempDir(), "elsewhere"), pack); err != nil {
		t.Fatal(err)
	}
	out, code = runWrapper(t, "", "git-receive", "--repo", repo, "--commit", base3, "--pack", pack)
	wantError(t, out, code, wire.KindIO)
	os.Remove(pack)
	if err := os.WriteFile(pack, op.Pack(base3, base2), 0o600); err != nil {
		t.Fatal(err)
	}
	got = gitCall(t, "", "git-receive", "--repo", repo, "--commit", base3, "--pack", pack)
	if !slices.Contains(got, base3) {
		t.Fatalf("after --pack: %v, want %s", got, base3)
	}
	if _, err := os.Lstat(pack); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the pack file is left behind: %v", err)
	}
}

// TestRepoWorkspaceSnapshot: a task's workspace is a clone at the base on
// its branch; what it leaves is recorded as one commit on the base, its
// .gitignore respected, without running anything the task put in its
// .git or .gitattributes.
func TestRepoWorkspaceSnapshot(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	op := gittest.New(t)
	op.Write("keep.txt", "keep\n")
	op.Write("edit.txt", "old\n")
	op.Write("gone.txt", "gone\n")
	op.Write(".gitignore", "*.log\n")
	base := op.Commit("base")
	root := t.TempDir()
	repo := filepath.Join(root, "demo", "repo.git")
	gitCall(t, string(op.Pack(base)), "git-receive", "--repo", repo, "--commit", base)

	out := filepath.Join(root, "demo", "tasks", "S01", "output")
	// The private git directory the wrapper binary keeps for this task.
	taskDir := filepath.Dir(out)
	gitDir := gitresult.SnapshotDirOf(wrapperBin, taskDir)
	t.Cleanup(func() { os.RemoveAll(gitDir) })
	if _, err := gitresult.PrepareRepoWorkspace(ctx, repo, base, "dispatch/demo/S01", out, gitDir, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(gitDir, gitresult.SnapshotIndex)); err != nil {
		t.Errorf("no copy of the checkout's index: %v", err)
	}
	ws := &gittest.Repo{T: t, Dir: out}
	if b := ws.Git("symbolic-ref", "HEAD"); b != "refs/heads/dispatch/demo/S01" {
		t.Errorf("workspace on %s", b)
	}
	if b, err := os.ReadFile(filepath.Join(out, "edit.txt")); err != nil || string(b) != "old\n" {
		t.Fatalf("workspace edit.txt: %q %v", b, err)
	}

	// The task's work, and its traps: a hook, an fsmonitor and a clean
	// filter in its .git/config, named by its .gitattributes.
	marker := filepath.Join(root, "ran")
	trap := "#!/bin/sh\ntouch " + marker + "\ncat\n"
	if err := os.WriteFile(filepath.Join(root, "trap.sh"), []byte(trap), 0o755); err != nil {
		t.Fatal(err)
	}
	ws.Write("edit.txt", "new\n")
	ws.Write("sub/added.txt", "added\n")
	ws.Write("debug.log", "ignored\n")
	os.Remove(filepath.Join(out, "gone.txt"))
	ws.Write(".gitattributes", "* filter=evil\n")
	ws.Git("config", "filter.evil.clean", filepath.Join(root, "trap.sh"))
	ws.Git("config", "filter.evil.required", "true")
	ws.Git("config", "core.fsmonitor", filepath.Join(root, "trap.sh"))
	ws.Write(".git/hooks/pre-commit", trap)
	os.Chmod(filepath.Join(out, ".git", "hooks", "pre-commit"), 0o755)

	commit, err := gitresult.SnapshotWorkspace(ctx, repo, gitDir, out, base, "dispatch/demo/S01", "dispatch S01", "S01: the title (attempt 1)")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the snapshot ran a program the task configured")
	}
	// The traps are live: the workspace's own git runs them.
	ws.Git("add", "-A")
	if _, err := os.Stat(marker); err != nil {
		t.Fatal("the task's traps do not even fire for the workspace's own git; the test proves nothing")
	}
	snap := &gittest.Repo{T: t, Dir: gitDir}
	if commit == base || snap.Git("rev-parse", commit+"^") != base || snap.Git("rev-parse", "refs/heads/dispatch/demo/S01") != commit {
		t.Fatalf("snapshot %s: want one commit on %s under the task's branch", commit, base)
	}
	files := strings.Fields(snap.Git("ls-tree", "-r", "--name-only", commit))
	if want := []string{".gitattributes", ".gitignore", "edit.txt", "keep.txt", "sub/added.txt"}; !slices.Equal(files, want) {
		t.Errorf("snapshot files %v, want %v (no ignored log, no removed file, no .git)", files, want)
	}
	if got := snap.Git("show", commit+":edit.txt"); got != "new" {
		t.Errorf("edit.txt in the snapshot: %q", got)
	}
	if got := snap.Git("log", "-1", "--format=%an|%s", commit); got != "dispatch S01|S01: the title (attempt 1)" {
		t.Errorf("author and message %q", got)
	}

	// The result travels back as a pack of what the base lacks, which
	// completes the operator's repository.
	packPath := filepath.Join(taskDir, "result.pack")
	out3, code := runWrapper(t, "", "git-pack", "--dir", taskDir, "--base", base, "--branch", "dispatch/demo/S01", "--out", packPath)
	var pr wire.PackReply
	if err := json.Unmarshal(out3, &pr); err != nil || code != 0 || pr.Commit != commit || pr.Bytes <= 0 {
		t.Fatalf("git-pack: exit %d: %s", code, out3)
	}
	data, err := os.ReadFile(packPath)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := op.Run(data, "index-pack", "--stdin", "--fix-thin"); err != nil {
		t.Fatalf("index-pack of the result in the operator's repository: %v %s", err, out)
	}
	if got := op.Git("show", commit+":sub/added.txt"); got != "added" {
		t.Errorf("the operator's repository has %q for the result's sub/added.txt", got)
	}
	for _, args := range [][]string{
		{"git-pack", "--dir", taskDir, "--base", base, "--branch", "main", "--out", packPath},
		{"git-pack", "--dir", taskDir, "--base", "HEAD", "--branch", "dispatch/demo/S01", "--out", packPath},
	} {
		out, code := runWrapper(t, "", args...)
		wantError(t, out, code, wire.KindUsage)
	}
	out4, code := runWrapper(t, "", "git-pack", "--dir", taskDir, "--base", base, "--branch", "dispatch/demo/S09", "--out", packPath)
	wantError(t, out4, code, wire.KindNotFound)

	// A workspace left as it was is the base itself.
	out2 := filepath.Join(root, "demo", "tasks", "S02", "output")
	s02 := filepath.Join(root, "private", "S02.git")
	if _, err := gitresult.PrepareRepoWorkspace(ctx, repo, base, "dispatch/demo/S02", out2, s02, false, nil); err != nil {
		t.Fatal(err)
	}
	if c, err := gitresult.SnapshotWorkspace(ctx, repo, s02, out2, base, "dispatch/demo/S02", "dispatch S02", "S02"); err != nil || c != base {
		t.Errorf("unchanged workspace: %s %v, want the base", c, err)
	}
	// Without the prepared directory (a resumed attempt's), every file is
	// read: the same result.
	ws2 := &gittest.Repo{T: t, Dir: out2}
	ws2.Write("keep.txt", "kept no more\n")
	for _, dir := range []string{s02, filepath.Join(root, "private", "S02-cold.git")} {
		c, err := gitresult.SnapshotWorkspace(ctx, repo, dir, out2, base, "dispatch/demo/S02", "dispatch S02", "S02")
		if err != nil {
			t.Fatal(err)
		}
		if got := ws2.Git("--git-dir", dir, "show", c+":keep.txt"); got != "kept no more" {
			t.Errorf("snapshot in %s: keep.txt = %q", dir, got)
		}
	}
}

// TestGitNativeAttempt: with launch.json's repo, output/ is a clone of the
// node's repository on the task's branch at the base, and an attempt whose
// tool ends well is recorded as one commit (status.json's commit) that
// git-pack sends; a tool that fails leaves no result.
func TestGitNativeAttempt(t *testing.T) {
	t.Parallel()
	op := gittest.New(t)
	op.Write("README", "base\n")
	base := op.Commit("base")
	root := t.TempDir()
	repo := filepath.Join(root, "demo", "repo.git")
	gitCall(t, string(op.Pack(base)), "git-receive", "--repo", repo, "--commit", base)
	lr := func(id string) *wire.LaunchRepo {
		return &wire.LaunchRepo{Dir: repo, Base: base, Branch: "dispatch/demo/" + id, Message: id + ": edit the README (attempt 1)"}
	}

	tk := newTask(t, root, wire.Launch{Task: "S01", Repo: lr("S01"),
		Command: shell(`test "$(git symbolic-ref --short HEAD)" = dispatch/demo/S01 && echo edited >> README && echo x > new.txt`)})
	t.Cleanup(func() { os.RemoveAll(gitresult.SnapshotDirOf(wrapperBin, tk.dir)) })
	tk.run(t, "")
	st := tk.waitFinal(t)
	if st.Status != wire.StatusCompleted || !wire.IsCommitID(st.Commit) {
		t.Fatalf("attempt: %+v, want completed with a commit; task.log: %s", st, tk.readFile(t, taskfiles.FileLog))
	}
	packPath := filepath.Join(tk.dir, "result.pack")
	out, code := runWrapper(t, "", "git-pack", "--dir", tk.dir, "--base", base, "--branch", "dispatch/demo/S01", "--out", packPath)
	var pr wire.PackReply
	if err := json.Unmarshal(out, &pr); err != nil || code != 0 || pr.Commit != st.Commit {
		t.Fatalf("git-pack: exit %d: %s (status commit %s)", code, out, st.Commit)
	}
	data, _ := os.ReadFile(packPath)
	if out, err := op.Run(data, "index-pack", "--stdin", "--fix-thin"); err != nil {
		t.Fatalf("index-pack: %v %s", err, out)
	}
	if got := op.Git("show", st.Commit+":README"); got != "base\nedited" {
		t.Errorf("README of the result: %q", got)
	}
	if got := op.Git("log", "-1", "--format=%an|%s", st.Commit); got != "dispatch S01|S01: edit the README (attempt 1)" {
		t.Errorf("result author and message: %q", got)
	}

	failing := newTask(t, root, wire.Launch{Task: "S02", Repo: lr("S02"), Command: shell(`echo x > new.txt; exit 3`)})
	failing.run(t, "")
	if st := failing.waitFinal(t); st.Status != wire.StatusFailed || st.Commit != "" {
		t.Fatalf("failing attempt: %+v, want failed without a commit", st)
	}

	// base and repo at once are refused.
	bad := newTask(t, root, wire.Launch{Task: "S03", Repo: lr("S03"), Base: "base", Command: shell("true")})
	out, code = runWrapper(t, "", "run", "--dir", bad.dir)
	wantError(t, out, code, wire.KindUsage)
}

// TestGitSpares: a spare checkout made after a launch is taken whole by the
// next one (a rename), once; at most --max are kept; unfinished spares and
// those of a base no launch uses are removed in time.
func TestGitSpares(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	op := gittest.New(t)
	for i := range 50 {
		op.Write(filepath.Join("src", strings.Repeat("d", i%4), "f"+strings.Repeat("x", i%7)+".txt"), strings.Repeat("x\n", i))
	}
	op.Write("run.sh", "#!/bin/sh\n")
	os.Chmod(filepath.Join(op.Dir, "run.sh"), 0o755)
	base := op.Commit("base")
	root := t.TempDir()
	repo := filepath.Join(root, "demo", "repo.git")
	gitCall(t, string(op.Pack(base)), "git-receive", "--repo", repo, "--commit", base)
	spares := filepath.Join(root, "demo", "spares", base)
	ready := func() int {
		m, _ := filepath.Glob(filepath.Join(spares, gitresult.SparePrefix+"*"))
		return len(m)
	}

	for range 3 {
		out, code := runWrapper(t, "", "git-spare", "--repo", repo, "--base", base, "--max", "2")
		if code != 0 {
			t.Fatalf("git-spare: %s", out)
		}
	}
	if n := ready(); n != 2 {
		t.Fatalf("%d spares ready after three git-spare --max 2, want 2", n)
	}
	for i, wantSpare := range []bool{true, true, false} {
		out := filepath.Join(root, "demo", "tasks", fmt.Sprintf("S0%d", i+1), "output")
		os.MkdirAll(out, 0o755) // as the supervisor leaves it
		gitDir := filepath.Join(root, "private", fmt.Sprintf("S0%d.git", i+1))
		spare, err := gitresult.PrepareRepoWorkspace(ctx, repo, base, fmt.Sprintf("dispatch/demo/S0%d", i+1), out, gitDir, true, nil)
		if err != nil || spare != wantSpare {
			t.Fatalf("launch %d: spare %v, %v; want %v", i+1, spare, err, wantSpare)
		}
		ws := &gittest.Repo{T: t, Dir: out}
		if b := ws.Git("symbolic-ref", "HEAD"); b != fmt.Sprintf("refs/heads/dispatch/demo/S0%d", i+1) {
			t.Errorf("launch %d: on %s", i+1, b)
		}
		if st := ws.Git("status", "--porcelain"); st != "" {
			t.Errorf("launch %d: the workspace is not the base: %s", i+1, st)
		}
		if fi, err := os.Stat(filepath.Join(out, "run.sh")); err != nil || fi.Mode().Perm()&0o100 == 0 {
			t.Errorf("launch %d: run.sh %v %v", i+1, fi, err)
		}
		ws.Write("new.txt", "new\n")
		c, err := gitresult.SnapshotWorkspace(ctx, repo, gitDir, out, base, fmt.Sprintf("dispatch/demo/S0%d", i+1), "dispatch", "m")
		if err != nil {
			t.Fatal(err)
		}
		if got := ws.Git("--git-dir", gitDir, "diff", "--name-only", base, c); got != "new.txt" {
			t.Errorf("launch %d: recorded %q", i+1, got)
		}
	}
	if n := ready(); n != 0 {
		t.Errorf("%d spares left after three launches took two", n)
	}

	// Stale: an unfinished spare, and the spares of a base unused for long.
	old := time.Now().Add(-2 * gitresult.SpareStale)
	tmp := filepath.Join(spares, gitresult.SpareTmp+"dead")
	os.MkdirAll(tmp, 0o700)
	os.Chtimes(tmp, old, old)
	other := filepath.Join(root, "demo", "spares", strings.Repeat("ab", 20))
	os.MkdirAll(filepath.Join(other, gitresult.SparePrefix+"x"), 0o700)
	os.Chtimes(other, old, old)
	if out, code := runWrapper(t, "", "git-spare", "--repo", repo, "--base", base, "--max", "1"); code != 0 {
		t.Fatalf("git-spare: %s", out)
	}
	for _, p := range []string{tmp, other} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s is left", p)
		}
	}
	if n := ready(); n != 1 {
		t.Errorf("%d spares ready, want 1", n)
	}
	for _, args := range [][]string{
		{"git-spare", "--repo", repo, "--base", "main"},
		{"git-spare", "--repo", repo, "--base", base, "--max", "0"},
		{"git-spare", "--repo", "relative/repo.git", "--base", base},
	} {
		out, code := runWrapper(t, "", args...)
		wantError(t, out, code, wire.KindUsage)
	}
}
