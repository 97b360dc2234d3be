package gitrepo

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dispatch-tool/dispatch/internal/gittest"
)

// repo is the operator's repository of a test.
type repo struct{ *gittest.Repo }

func newRepo(t *testing.T) *repo { return &repo{gittest.New(t)} }

func (r *repo) git(args ...string) string  { r.T.Helper(); return r.Git(args...) }
func (r *repo) write(name, content string) { r.T.Helper(); r.Write(name, content) }
func (r *repo) commit(msg string) string   { r.T.Helper(); return r.Commit(msg) }

// task makes a commit on top of base changing files, as a task's branch
// would be, without moving the operator's branch, and returns it.
func (r *repo) task(base string, files map[string]string) string {
	r.T.Helper()
	wt := r.T.TempDir()
	r.git("worktree", "add", "-q", "--detach", wt, base)
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(wt, name), []byte(content), 0o644); err != nil {
			r.T.Fatal(err)
		}
	}
	sub := &repo{&gittest.Repo{T: r.T, Dir: wt}}
	c := sub.commit("task")
	r.git("worktree", "remove", "--force", wt)
	return c
}

// state is everything of the operator's repository dispatch must not
// touch: HEAD, the index, the working tree's status and every ref but
// refs/heads/dispatch/.
func (r *repo) state() string {
	r.T.Helper()
	index, _ := os.ReadFile(filepath.Join(r.Dir, ".git", "index"))
	var refs []string
	for _, l := range strings.Split(r.git("for-each-ref", "--format=%(refname) %(objectname)"), "\n") {
		if !strings.HasPrefix(l, RefPrefix) {
			refs = append(refs, l)
		}
	}
	return strings.Join([]string{r.git("rev-parse", "HEAD"), r.git("symbolic-ref", "HEAD"), string(index),
		r.git("status", "--porcelain", "--untracked-files=all"), strings.Join(refs, "\n")}, "\x00")
}

func TestResolve(t *testing.T) {
	ctx := context.Background()
	r := newRepo(t)
	empty := newRepo(t)
	r.write("a.txt", "a\n")
	first := r.commit("first")
	r.git("tag", "v1")
	r.write("a.txt", "b\n")
	second := r.commit("second")
	notRepo := t.TempDir()

	for _, tc := range []struct {
		name, dir, ref string
		want           string
		kind           error
	}{
		{"HEAD by default", r.Dir, "", second, nil},
		{"a tag", r.Dir, "v1", first, nil},
		{"a commit", r.Dir, first[:10], first, nil},
		{"a directory that is not a repository", notRepo, "", "", ErrNotRepo},
		{"a path that does not exist", filepath.Join(notRepo, "nope"), "", "", ErrNotRepo},
		{"a ref that does not exist", r.Dir, "no-such-branch", "", ErrNoRef},
		{"an option as a ref", r.Dir, "--all", "", ErrNoRef},
		{"a repository with no commits", empty.Dir, "", "", ErrNoCommits},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src, err := Resolve(ctx, tc.dir, tc.ref)
			if tc.kind != nil {
				var p *Problem
				if !errors.Is(err, tc.kind) || !errors.As(err, &p) || p.Fix == "" {
					t.Fatalf("Resolve: %v, want %v with a fix", err, tc.kind)
				}
				return
			}
			if err != nil || src.Commit != tc.want {
				t.Fatalf("Resolve: %+v, %v; want commit %s", src, err, tc.want)
			}
		})
	}

	// What is not shipped as one may expect is said.
	src, err := Resolve(ctx, r.Dir, "")
	if err != nil || len(src.Notes) != 0 {
		t.Fatalf("clean repository: %+v %v, want no notes", src, err)
	}
	r.write(".gitattributes", "*.bin filter=lfs diff=lfs merge=lfs -text\n")
	r.commit("lfs")
	r.write("a.txt", "dirty\n")
	src, err = Resolve(ctx, r.Dir, "")
	if err != nil || len(src.Notes) != 2 || !strings.Contains(src.Notes[0], "uncommitted") || !strings.Contains(src.Notes[1], "LFS") {
		t.Fatalf("dirty repository with LFS: notes %q, %v", src.Notes, err)
	}
}

func TestIntegrate(t *testing.T) {
	ctx := context.Background()
	r := newRepo(t)
	r.write("shared.txt", "one\ntwo\nthree\n")
	r.write("a.txt", "a\n")
	r.write("b.txt", "b\n")
	base := r.commit("base")

	t.Run("disjoint changes merge cleanly", func(t *testing.T) {
		s01 := r.task(base, map[string]string{"a.txt": "a by S01\n"})
		s02 := r.task(base, map[string]string{"b.txt": "b by S02\n", "new.txt": "new\n"})
		before := r.state()
		m, err := Integrate(ctx, r.Dir, base, []TaskBranch{{ID: "S01", Commit: s01}, {ID: "S02", Commit: s02}})
		if err != nil {
			t.Fatal(err)
		}
		if len(m.Conflicts) != 0 || len(m.Overlaps) != 0 {
			t.Fatalf("conflicts %+v, overlaps %+v; want none", m.Conflicts, m.Overlaps)
		}
		for file, want := range map[string]string{"a.txt": "a by S01\n", "b.txt": "b by S02\n", "new.txt": "new\n", "shared.txt": "one\ntwo\nthree\n"} {
			if got := r.git("show", m.Commit+":"+file); got != strings.TrimSpace(want) {
				t.Errorf("%s in the merge: %q, want %q", file, got, want)
			}
		}
		if parents := strings.Fields(r.git("log", "-1", "--format=%P", m.Commit)); len(parents) != 2 || parents[1] != s02 {
			t.Errorf("merge parents %v, want the S01 merge and S02", parents)
		}
		if after := r.state(); after != before {
			t.Error("Integrate changed the operator's HEAD, index, working tree or refs")
		}
	})

	t.Run("the same lines changed twice are a listed conflict", func(t *testing.T) {
		s03 := r.task(base, map[string]string{"shared.txt": "one\nTWO by S03\nthree\n"})
		s04 := r.task(base, map[string]string{"shared.txt": "one\nTWO by S04\nthree\n", "a.txt": "a by S04\n"})
		s05 := r.task(base, map[string]string{"b.txt": "b by S05\n"})
		before := r.state()
		m, err := Integrate(ctx, r.Dir, base, []TaskBranch{{ID: "S03", Commit: s03}, {ID: "S04", Commit: s04}, {ID: "S05", Commit: s05}})
		if err != nil {
			t.Fatal(err)
		}
		want := []Conflict{{Path: "shared.txt", Tasks: []string{"S03", "S04"}}}
		if len(m.Conflicts) != 1 || m.Conflicts[0].Path != want[0].Path || !slices.Equal(m.Conflicts[0].Tasks, want[0].Tasks) {
			t.Fatalf("conflicts %+v, want %+v", m.Conflicts, want)
		}
		if len(m.Overlaps) != 1 || m.Overlaps[0].Path != "shared.txt" {
			t.Errorf("overlaps %+v, want shared.txt", m.Overlaps)
		}
		merged := r.git("show", m.Commit+":shared.txt")
		for _, marker := range []string{"<<<<<<<", "=======", ">>>>>>>", "TWO by S03", "TWO by S04"} {
			if !strings.Contains(merged, marker) {
				t.Errorf("the merged shared.txt lacks %q:\n%s", marker, merged)
			}
		}
		// The merge goes on past the conflict: S04's other file and S05.
		if got := r.git("show", m.Commit+":a.txt"); got != "a by S04" {
			t.Errorf("a.txt in the merge: %q", got)
		}
		if got := r.git("show", m.Commit+":b.txt"); got != "b by S05" {
			t.Errorf("b.txt in the merge: %q", got)
		}
		if after := r.state(); after != before {
			t.Error("Integrate changed the operator's HEAD, index, working tree or refs")
		}
	})

	t.Run("a conflict names the tasks whose changes clash, not every task that changed the file", func(t *testing.T) {
		r.write("long.txt", strings.Repeat("line\n", 30))
		base := r.commit("long")
		lines := func(at int, text string) string {
			l := strings.Split(strings.Repeat("line\n", 30), "\n")
			l[at] = text
			return strings.Join(l, "\n")
		}
		s06 := r.task(base, map[string]string{"long.txt": lines(2, "S06")})
		s07 := r.task(base, map[string]string{"long.txt": lines(25, "S07")}) // far away: merges cleanly
		s08 := r.task(base, map[string]string{"long.txt": lines(2, "S08")})
		m, err := Integrate(ctx, r.Dir, base, []TaskBranch{{ID: "S06", Commit: s06}, {ID: "S07", Commit: s07}, {ID: "S08", Commit: s08}})
		if err != nil {
			t.Fatal(err)
		}
		if len(m.Conflicts) != 1 || !slices.Equal(m.Conflicts[0].Tasks, []string{"S06", "S08"}) {
			t.Fatalf("conflicts %+v, want long.txt between S06 and S08", m.Conflicts)
		}
		if len(m.Overlaps) != 1 || !slices.Equal(m.Overlaps[0].Tasks, []string{"S06", "S07", "S08"}) {
			t.Errorf("overlaps %+v, want long.txt changed by S06, S07, S08", m.Overlaps)
		}
		if !slices.Equal(m.Changed, []string{"long.txt"}) {
			t.Errorf("changed %v", m.Changed)
		}
	})
}

func TestSetRef(t *testing.T) {
	ctx := context.Background()
	r := newRepo(t)
	r.write("a.txt", "a\n")
	c := r.commit("base")
	before := r.state()
	if err := SetRef(ctx, r.Dir, RefPrefix+"demo/S01", c); err != nil {
		t.Fatal(err)
	}
	if err := SetRef(ctx, r.Dir, RefPrefix+"demo/S01", c); err != nil {
		t.Fatalf("setting the same ref again: %v", err)
	}
	if got := r.git("rev-parse", RefPrefix+"demo/S01"); got != c {
		t.Errorf("ref at %s, want %s", got, c)
	}
	if after := r.state(); after != before {
		t.Error("SetRef changed something outside refs/heads/dispatch/")
	}
	for _, bad := range []string{"refs/heads/main", "HEAD", RefPrefix + "../main", RefPrefix + "a b", "refs/heads/dispatcher/x"} {
		if err := SetRef(ctx, r.Dir, bad, c); err == nil {
			t.Errorf("SetRef(%q) succeeded; want it refused", bad)
		}
	}
	if r.git("rev-parse", "main") != c || r.state() != before {
		t.Error("a refused SetRef changed the repository")
	}
}

// TestPackAndImport: a node's repository gets the operator's base commit
// as one pack stream, a task's commits come back as another into
// refs/heads/dispatch/, and nothing else of the operator's repository
// changes. A pack cut off midway sets no ref; importing twice is one
// branch; a result that is a name, not a commit of the pack, or not a
// descendant of the base is refused.
func TestPackAndImport(t *testing.T) {
	ctx := context.Background()
	op := newRepo(t)
	for i := range 200 {
		op.write(filepath.Join("src", "f"+strings.Repeat("x", i%7)+string(rune('a'+i%26)), "f.txt"), strings.Repeat("line\n", i+1))
	}
	base := op.commit("base")

	// The node: a bare repository fed by a pack of the base.
	node := &repo{&gittest.Repo{T: t, Dir: t.TempDir()}}
	node.git("init", "-q", "--bare")
	var pack bytes.Buffer
	if err := Pack(ctx, op.Dir, base, nil, &pack); err != nil {
		t.Fatal(err)
	}
	idx := exec.Command("git", "index-pack", "--stdin", "--fix-thin")
	idx.Dir, idx.Stdin = node.Dir, &pack
	if out, err := idx.CombinedOutput(); err != nil {
		t.Fatalf("index-pack on the node: %v\n%s", err, out)
	}
	node.git("update-ref", "refs/dispatch/base", base)

	// A task works in a clone sharing the node's objects and commits.
	work := &repo{&gittest.Repo{T: t, Dir: t.TempDir()}}
	work.git("clone", "-q", "--shared", "--no-checkout", node.Dir, ".")
	work.git("checkout", "-q", "-b", "dispatch/demo/S01", base)
	work.write("src/new.txt", "new\n")
	work.write("README", "changed\n")
	result := work.commit("S01: a change")

	var back bytes.Buffer
	if err := Pack(ctx, work.Dir, result, []string{base}, &back); err != nil {
		t.Fatal(err)
	}
	full := back.Bytes()
	before := op.state()
	ref := RefPrefix + "demo/S01"

	if err := Import(ctx, op.Dir, bytes.NewReader(full[:len(full)/2]), result, base, ref, roomy); err == nil {
		t.Fatal("a pack cut off midway was imported")
	}
	if _, err := Resolve(ctx, op.Dir, ref); err == nil {
		t.Fatal("a cut-off pack set the ref")
	}
	for _, bad := range []string{"main", "HEAD", base[:12]} {
		if err := Import(ctx, op.Dir, bytes.NewReader(full), bad, base, ref, roomy); err == nil {
			t.Errorf("Import of result %q succeeded; want it refused", bad)
		}
	}
	for range 2 {
		if err := Import(ctx, op.Dir, bytes.NewReader(full), result, base, ref, roomy); err != nil {
			t.Fatal(err)
		}
	}
	if got := op.git("rev-parse", ref); got != result {
		t.Fatalf("%s at %s, want %s", ref, got, result)
	}
	if got := op.git("show", ref+":src/new.txt"); got != "new" {
		t.Errorf("the imported branch's src/new.txt: %q", got)
	}
	if n := op.git("for-each-ref", "--format=x", RefPrefix); n != "x" {
		t.Errorf("dispatch refs after two imports: %q, want one", n)
	}
	if op.state() != before {
		t.Error("Import changed the operator's HEAD, index, working tree or other refs")
	}
	// A result that does not descend from the base.
	other := op.task(base, map[string]string{"README": "x\n"})
	var stray bytes.Buffer
	if err := Pack(ctx, op.Dir, other, nil, &stray); err != nil {
		t.Fatal(err)
	}
	if err := Import(ctx, op.Dir, &stray, other, result, RefPrefix+"demo/S02", roomy); err == nil {
		t.Error("a result not descending from its base was imported")
	}
	packsBefore := op.git("count-objects", "-v")
	// What a hostile node may send: not a pack, a header that claims
	// half a billion objects (git would allocate gigabytes for them), a
	// corrupt body, a pack without the commit named.
	claims := append([]byte("PACK\x00\x00\x00\x02\x20\x00\x00\x00"), full[12:]...)
	corrupt := bytes.Clone(full)
	corrupt[len(corrupt)/2] ^= 0xff
	for name, b := range map[string][]byte{"not a pack": []byte("hello"), "a huge count": claims, "corrupt": corrupt} {
		err := Import(ctx, op.Dir, bytes.NewReader(b), result, base, RefPrefix+"demo/S03", roomy)
		if err == nil {
			t.Errorf("%s: imported", name)
		}
		if name == "a huge count" && !strings.Contains(err.Error(), "claims 536870912 objects") {
			t.Errorf("%s: %v", name, err)
		}
	}
	if err := Import(ctx, op.Dir, bytes.NewReader(full), strings.Repeat("ab", 20), base, RefPrefix+"demo/S03", roomy); err == nil {
		t.Error("a pack without the named commit was imported")
	}
	// Nothing of the refused packs is left in the repository.
	if after := op.git("count-objects", "-v"); after != packsBefore {
		t.Errorf("refused packs left objects behind:\nbefore %s\nafter %s", packsBefore, after)
	}
	objects := filepath.Join(op.Dir, ".git", "objects")
	left, _ := filepath.Glob(filepath.Join(objects, "pack", "tmp_*"))
	quarantines, _ := filepath.Glob(filepath.Join(objects, quarantinePrefix+"*"))
	if len(left)+len(quarantines) > 0 {
		t.Errorf("left behind: %v %v", left, quarantines)
	}
	if refs := op.git("for-each-ref", "--format=%(refname)", RefPrefix); refs != ref {
		t.Errorf("refs: %q", refs)
	}
}

func TestParseVersion(t *testing.T) {
	for in, want := range map[string][2]int{"git version 2.39.5": {2, 39}, "git version 2.50.1 (Apple Git-155)": {2, 50}, "git version 3.0": {3, 0}} {
		if got, ok := ParseVersion(in); !ok || got != want {
			t.Errorf("ParseVersion(%q) = %v, %v; want %v", in, got, ok, want)
		}
	}
	for _, bad := range []string{"", "git version", "hg version 2.38", "git version x.y"} {
		if _, ok := ParseVersion(bad); ok {
			t.Errorf("ParseVersion(%q) succeeded", bad)
		}
	}
}

func TestChanges(t *testing.T) {
	ctx := context.Background()
	r := newRepo(t)
	r.write("keep.txt", "keep\n")
	r.write("edit.txt", "old\n")
	r.write("gone.txt", "gone\n")
	base := r.commit("base")
	r.write("edit.txt", "a longer text\n")
	r.write("dir/new.txt", "12345\n")
	r.git("rm", "-q", "gone.txt")
	c := r.commit("change")
	changes, stat, err := Changes(ctx, r.Dir, base, c)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, ch := range changes {
		got[ch.Path] = ch.Size
	}
	want := map[string]int64{"edit.txt": 14, "dir/new.txt": 6, "gone.txt": -1}
	if len(got) != len(want) {
		t.Fatalf("changes %v, want %v", got, want)
	}
	for p, n := range want {
		if got[p] != n {
			t.Errorf("%s: size %d, want %d", p, got[p], n)
		}
	}
	if !strings.Contains(stat, "3 files changed") {
		t.Errorf("diffstat:\n%s", stat)
	}
}

// roomy are quotas no test result comes near.
var roomy = Limits{MaxBytes: 1 << 30, MaxFiles: 1 << 20}

// TestRefsAndDeleteRef: Refs lists a project's branches only (not those of
// a project whose name it prefixes); DeleteRef deletes a branch only at
// the commit given and refuses refs outside refs/heads/dispatch/;
// CheckedOut names the branches of the worktrees.
func TestRefsAndDeleteRef(t *testing.T) {
	ctx := context.Background()
	r := newRepo(t)
	r.write("a.txt", "a\n")
	c1 := r.commit("one")
	r.write("a.txt", "b\n")
	c2 := r.commit("two")
	for ref, c := range map[string]string{"p/S01": c1, "p/S02": c2, "p2/S01": c1} {
		if err := SetRef(ctx, r.Dir, RefPrefix+ref, c); err != nil {
			t.Fatal(err)
		}
	}
	refs, err := Refs(ctx, r.Dir, RefPrefix+"p/")
	if err != nil || len(refs) != 2 || refs[RefPrefix+"p/S01"] != c1 || refs[RefPrefix+"p/S02"] != c2 {
		t.Fatalf("Refs = %v, %v", refs, err)
	}
	if _, err := Refs(ctx, r.Dir, "refs/heads/"); err == nil {
		t.Error("Refs outside dispatch/ succeeded")
	}
	if err := DeleteRef(ctx, r.Dir, RefPrefix+"p/S02", c1); err == nil || r.git("rev-parse", RefPrefix+"p/S02") != c2 {
		t.Errorf("DeleteRef at another commit: %v; want refused, the branch kept", err)
	}
	if err := DeleteRef(ctx, r.Dir, RefPrefix+"p/S02", c2); err != nil {
		t.Fatal(err)
	}
	if refs, _ := Refs(ctx, r.Dir, RefPrefix+"p/"); len(refs) != 1 {
		t.Errorf("after DeleteRef: %v", refs)
	}
	if err := DeleteRef(ctx, r.Dir, "refs/heads/main", c2); err == nil || r.git("rev-parse", "main") != c2 {
		t.Error("DeleteRef of refs/heads/main succeeded")
	}
	// A symbolic ref under dispatch/ that names an operator's branch: the
	// link goes, never the branch it names.
	r.git("symbolic-ref", RefPrefix+"p/LINK", "refs/heads/main")
	if err := DeleteRef(ctx, r.Dir, RefPrefix+"p/LINK", c2); err != nil {
		t.Fatal(err)
	}
	if r.git("rev-parse", "main") != c2 {
		t.Error("DeleteRef of a symbolic ref deleted the branch it names")
	}
	wt := filepath.Join(t.TempDir(), "wt")
	r.git("worktree", "add", wt, "dispatch/p/S01")
	busy, err := CheckedOut(ctx, r.Dir)
	if err != nil || !busy[RefPrefix+"p/S01"] || !busy["refs/heads/main"] || len(busy) != 2 {
		t.Errorf("CheckedOut = %v, %v", busy, err)
	}
}
