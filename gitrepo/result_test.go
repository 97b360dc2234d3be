package gitrepo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/internal/gittest"
)

// node is a node's repository holding what the operator shipped, and
// more: it may forge anything.
func node(t *testing.T, op *repo, refs ...string) *repo {
	t.Helper()
	n := &repo{&gittest.Repo{T: t, Dir: t.TempDir()}}
	n.git("init", "-q")
	for _, r := range refs {
		n.git("fetch", "-q", op.Dir, r+":"+r)
	}
	return n
}

// commitTree makes a commit of the tree of files (path → content) with
// parents, in r, without touching its work tree.
// honestResult gives op (an empty repository) a base commit, and a node
// cloned from it an honest result on that base: README kept, x.txt added.
func honestResult(t *testing.T, op *repo) (_ *repo, n *repo, base, result string) {
	t.Helper()
	op.write("README", "base\n")
	base = op.commit("base")
	n = node(t, op, "refs/heads/main")
	return op, n, base, n.commitTree(map[string]string{"README": "base\n", "x.txt": "x\n"}, base)
}

func (r *repo) commitTree(files map[string]string, parents ...string) string {
	r.T.Helper()
	idx := filepath.Join(r.T.TempDir(), "index")
	run := func(stdin []byte, args ...string) string {
		cmd := append([]string{"-c", "core.autocrlf=false"}, args...)
		out, err := (&gittest.Repo{T: r.T, Dir: r.Dir}).RunEnv([]string{"GIT_INDEX_FILE=" + idx}, stdin, cmd...)
		if err != nil {
			r.T.Fatalf("git %v: %v %s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	for p, content := range files {
		id := run([]byte(content), "hash-object", "-w", "--stdin")
		run(nil, "update-index", "--add", "--cacheinfo", "100644,"+id+","+p)
	}
	tree := run(nil, "write-tree")
	args := []string{"commit-tree", tree, "-m", "forged"}
	for _, p := range parents {
		args = append(args, "-p", p)
	}
	return run(nil, args...)
}

func (r *repo) objectCount() string {
	r.T.Helper()
	return r.git("count-objects", "-v")
}

// TestImportHoldsTheResultToTheQuotas: a result whose tree's files are
// over collect_max_bytes, or whose entries are over collect_max_files, is
// refused though its pack is tiny (ten identical files are one blob), and
// nothing of it stays.
func TestImportHoldsTheResultToTheQuotas(t *testing.T) {
	ctx := context.Background()
	op := newRepo(t)
	op.write("README", "base\n")
	base := op.commit("base")
	n := node(t, op, "refs/heads/main")
	same := strings.Repeat("twenty megabytes, say\n", 10_000) // 220 kB
	files := map[string]string{}
	for i := range 10 {
		files[fmt.Sprintf("copy%d.bin", i)] = same
	}
	result := n.commitTree(files, base)
	pack := n.Pack(result, base)
	if len(pack) > 10_000 {
		t.Fatalf("a pack of %d bytes; the test wants a tiny one", len(pack))
	}
	before := op.objectCount()
	for _, tc := range []struct {
		lim  Limits
		want string
	}{
		{Limits{MaxBytes: 1 << 20, MaxFiles: 1000}, "holds 2.1 MiB in its files, over collect_max_bytes (1.0 MiB)"},
		{Limits{MaxBytes: 1 << 30, MaxFiles: 5}, "holds more than 5 files, over collect_max_files (5)"},
	} {
		err := Import(ctx, op.Dir, bytes.NewReader(pack), result, base, RefPrefix+"q/S01", tc.lim)
		var p *Problem
		if !errors.Is(err, ErrOverLimit) || !errors.As(err, &p) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(p.Fix, "collect_max_bytes") {
			t.Errorf("%+v: %v; want ErrOverLimit saying %q and the fix", tc.lim, err, tc.want)
		}
	}
	if after := op.objectCount(); after != before {
		t.Errorf("a refused result left objects:\n%s\n%s", before, after)
	}
	if refs := op.git("for-each-ref", RefPrefix); refs != "" {
		t.Errorf("a refused result set %s", refs)
	}
	if err := Import(ctx, op.Dir, bytes.NewReader(pack), result, base, RefPrefix+"q/S01", Limits{MaxBytes: 3 << 20, MaxFiles: 10}); err != nil {
		t.Errorf("within the quotas: %v", err)
	}
}

// TestImportRefusesForeignHistory: a result must be one commit on its
// base made of what its pack holds. A forged commit naming an operator
// commit that was never shipped as its parent, naming a blob of it in its
// tree, or sending a delta built on it is refused, and nothing of it
// reaches the operator's repository.
func TestImportRefusesForeignHistory(t *testing.T) {
	ctx := context.Background()
	op := newRepo(t)
	op.write("README", "base\n")
	base := op.commit("base")
	// The operator's private work: never shipped, its id known to the
	// node (say from a cherry-pick message).
	secret := strings.Repeat("the operator's secret line\n", 400)
	op.git("checkout", "-q", "-b", "private")
	op.write("secret.txt", secret)
	private := op.commit("private")
	op.git("checkout", "-q", "main")
	secretBlob := op.git("rev-parse", private+":secret.txt")

	// The node forges with the private objects at hand (as if it had
	// them), and sends only what the private commit lacks.
	n := node(t, op, "refs/heads/main", "refs/heads/private")
	onPrivate := n.commitTree(map[string]string{"README": "base\n", "x.txt": "x\n"}, private)
	twoParents := n.commitTree(map[string]string{"README": "base\n", "x.txt": "x\n"}, base, private)
	namesSecret := n.commitTree(map[string]string{"README": "base\n", "stolen.txt": secret}, base)
	deltaOnSecret := n.commitTree(map[string]string{"README": "base\n", "secret.txt": secret + "one more line\n"}, base)
	honest := n.commitTree(map[string]string{"README": "base\n", "x.txt": "x\n"}, base)
	before := op.objectCount()
	// What the node sends of a commit: its commit and tree whole, and a
	// new blob as a delta on the secret one (copy it, add a line).
	sendOnly := func(commit string) []byte {
		return gittest.BuildPack(t, n.Objects(commit, n.git("rev-parse", commit+"^{tree}")))
	}
	withDelta := func(commit string) []byte {
		objs := n.Objects(commit, n.git("rev-parse", commit+"^{tree}"))
		delta := append(gittest.Varint(len(secret)), gittest.Varint(len(secret)+len("one more line\n"))...)
		delta = append(delta, 0x80|0x10|0x20, byte(len(secret)), byte(len(secret)>>8)) // copy offset 0, two size bytes
		delta = append(delta, byte(len("one more line\n")))
		delta = append(delta, "one more line\n"...)
		return gittest.BuildPack(t, append(objs, gittest.PackObject{Type: gittest.ObjRefDelta, Data: delta, Ref: secretBlob}))
	}
	for _, tc := range []struct {
		name   string
		commit string
		pack   []byte
		want   string
	}{
		{"a parent never shipped", onPrivate, n.Pack(onPrivate, base, private), "has the parents " + private[:12] + ", not its base " + base[:12] + " alone"},
		{"a second parent", twoParents, n.Pack(twoParents, base, private), "has the parents " + base[:12] + ", " + private[:12]},
		{"a blob it did not send", namesSecret, sendOnly(namesSecret), "names 1 object(s) its pack does not hold and its base " + base[:12] + " does not either (" + secretBlob[:12] + ")"},
		{"a delta on a blob it never had", deltaOnSecret, withDelta(deltaOnSecret), "has a delta on object " + secretBlob[:12] + ", which the task's base " + base[:12] + " does not hold"},
	} {
		pack := tc.pack
		err := Import(ctx, op.Dir, bytes.NewReader(pack), tc.commit, base, RefPrefix+"f/S01", roomy)
		if !errors.Is(err, ErrForeign) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "fix: check the node") {
			t.Errorf("%s: %v; want ErrForeign saying %q", tc.name, err, tc.want)
		}
	}
	if after := op.objectCount(); after != before {
		t.Errorf("refused results left objects:\n%s\n%s", before, after)
	}
	if refs := op.git("for-each-ref", RefPrefix); refs != "" {
		t.Errorf("a refused result set %s", refs)
	}
	if err := Import(ctx, op.Dir, bytes.NewReader(n.Pack(honest, base)), honest, base, RefPrefix+"f/S01", roomy); err != nil {
		t.Errorf("an honest result: %v", err)
	}
}

// TestImportRefusesAPackBomb: a pack well within collect_max_bytes whose
// deltas would inflate to hundreds of megabytes (a copy of a 64 KiB blob
// takes one byte) is refused before git inflates anything, and leaves
// nothing behind; the same pack is taken when the quota allows it.
func TestImportRefusesAPackBomb(t *testing.T) {
	ctx := context.Background()
	op, n, base, result := honestResult(t, newRepo(t))
	// The result's own objects, whole, then the bomb: a 64 KiB blob and a
	// delta copying it 1024 times (64 MiB), which the result does not
	// even name.
	objs := n.Objects(strings.Fields(n.git("rev-list", "--objects", "--no-object-names", result, "^"+base))...)
	objs = append(objs, gittest.Bomb(1024)...)
	pack := gittest.BuildPack(t, objs)
	if len(pack) > 4096 {
		t.Fatalf("the bomb packs to %d bytes; the test wants a small one", len(pack))
	}
	before := op.objectCount()
	lim := Limits{MaxBytes: 16 << 20, MaxFiles: 100}
	err := Import(ctx, op.Dir, bytes.NewReader(pack), result, base, RefPrefix+"b/S01", lim)
	if !errors.Is(err, ErrOverLimit) || !strings.Contains(err.Error(), "the task's pack inflates to more than 64.1 MiB") {
		t.Errorf("the bomb: %v; want ErrOverLimit saying what it inflates to", err)
	}
	if after := op.objectCount(); after != before {
		t.Errorf("a refused pack left objects:\n%s\n%s", before, after)
	}
	quarantines, _ := filepath.Glob(filepath.Join(op.Dir, ".git", "objects", quarantinePrefix+"*"))
	if len(quarantines) > 0 {
		t.Errorf("left behind: %v", quarantines)
	}
	// The pack is a valid one: the inflation check reads it right.
	if err := Import(ctx, op.Dir, bytes.NewReader(pack), result, base, RefPrefix+"b/S01", Limits{MaxBytes: 128 << 20, MaxFiles: 100}); err != nil {
		t.Errorf("the same pack within the quota: %v", err)
	}
	// Cut in the middle of an object's stream, or an object longer than
	// its header says: corrupt, before index-pack.
	longer := gittest.BuildPack(t, []gittest.PackObject{{Type: gittest.ObjBlob, Data: []byte("hello, world"), Declared: 5}})
	for name, b := range map[string][]byte{"cut off": pack[:len(pack)-200], "longer": longer} {
		if err := checkInflation(writeTemp(t, b), int64(len(objs)), 20, 1<<30); err == nil || !strings.Contains(err.Error(), "corrupt") {
			t.Errorf("%s: %v; want it corrupt", name, err)
		}
	}
}

func writeTemp(t *testing.T, b []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "pack")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestExportWritesRawBlobs: exporting a result writes each file as
// stored: a task's .gitattributes naming a filter driver the operator's
// git configures (git-lfs, say) runs nothing on the operator's machine,
// export-subst and export-ignore do nothing; exec bits are kept, links and
// anything under a .git directory left out. A tree over the quotas, or
// larger than the room given, is refused before anything is written.
func TestExportWritesRawBlobs(t *testing.T) {
	ctx := context.Background()
	tmp := t.TempDir()
	marker := filepath.Join(tmp, "filter-ran")
	// The operator's own git configuration defines the driver, as
	// `git lfs install` does.
	global := filepath.Join(tmp, "gitconfig")
	if err := os.WriteFile(global, []byte("[filter \"lfs\"]\n\tsmudge = touch "+marker+"; cat\n\trequired = true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("GIT_CONFIG_GLOBAL", global)
	t.Setenv("HOME", tmp)

	op := newRepo(t)
	op.write("README", "base\n")
	base := op.commit("base")
	n := op // the result is made in the operator's repository: git's own checks on a pack would refuse the .git directory
	files := map[string]string{
		".gitattributes": "*.dat filter=lfs diff=lfs merge=lfs -text\n*.txt export-subst\nhidden.txt export-ignore\n",
		"blob.dat":       "version https://git-lfs.github.com/spec/v1\noid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\nsize 12345\n",
		"subst.txt":      "$Format:%H$\n",
		"hidden.txt":     "still here\n",
		"bin/run.sh":     "#!/bin/sh\necho hi\n",
	}
	result := n.commitTree(files, base)
	// An executable, a link out of the tree, and a .git directory, added
	// by hand to the tree (git add refuses the last).
	tree := n.git("rev-parse", result+"^{tree}")
	link := strings.TrimSpace(string(mustRun(t, n, []byte("/etc/passwd"), "hash-object", "-w", "--stdin")))
	hook := strings.TrimSpace(string(mustRun(t, n, []byte("[core]\n\tfsmonitor = touch "+marker+"\n"), "hash-object", "-w", "--stdin")))
	dotgit := strings.TrimSpace(string(mustRun(t, n, []byte("100644 blob "+hook+"\tconfig\n"), "mktree")))
	var entries bytes.Buffer
	entries.Write(mustRun(t, n, nil, "ls-tree", tree))
	entries.WriteString("120000 blob " + link + "\tpasswd\n040000 tree " + dotgit + "\t.GIT\n")
	runSh := n.git("rev-parse", result+":bin/run.sh")
	binTree := strings.TrimSpace(string(mustRun(t, n, []byte("100755 blob "+runSh+"\trun.sh\n"), "mktree")))
	lines := strings.Split(strings.TrimSpace(entries.String()), "\n")
	for i, l := range lines {
		if strings.HasSuffix(l, "\tbin") {
			lines[i] = "040000 tree " + binTree + "\tbin"
		}
	}
	tree = strings.TrimSpace(string(mustRun(t, n, []byte(strings.Join(lines, "\n")+"\n"), "mktree")))
	result = strings.TrimSpace(string(mustRun(t, n, nil, "commit-tree", tree, "-p", base, "-m", "result")))

	dest := filepath.Join(tmp, "final")
	if err := Export(ctx, op.Dir, result, dest, roomy, 1<<30); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("exporting ran the filter driver the task's .gitattributes named")
	}
	for p, want := range files {
		got, err := os.ReadFile(filepath.Join(dest, p))
		if err != nil || string(got) != want {
			t.Errorf("%s: %q %v, want it as committed: %q", p, got, err, want)
		}
	}
	if fi, err := os.Stat(filepath.Join(dest, "bin", "run.sh")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("bin/run.sh: %v %v, want mode 0755", fi, err)
	}
	for _, p := range []string{"passwd", ".GIT"} {
		if _, err := os.Lstat(filepath.Join(dest, p)); err == nil {
			t.Errorf("%s written", p)
		}
	}

	// Quotas and room: refused, nothing written.
	for _, tc := range []struct {
		lim  Limits
		room int64
		kind error
		want string
	}{
		{Limits{MaxBytes: 100, MaxFiles: 100}, 1 << 30, ErrOverLimit, "over collect_max_bytes"},
		{Limits{MaxBytes: 1 << 20, MaxFiles: 3}, 1 << 30, ErrOverLimit, "over collect_max_files (3)"},
		{roomy, 100, ErrNoRoom, "more than the 0.0 MiB free"},
	} {
		dest := filepath.Join(tmp, "refused")
		err := Export(ctx, op.Dir, result, dest, tc.lim, tc.room)
		if !errors.Is(err, tc.kind) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v room %d: %v; want %v saying %q", tc.lim, tc.room, err, tc.kind, tc.want)
		}
		if _, err := os.Lstat(dest); err == nil {
			t.Errorf("%+v room %d: %s written", tc.lim, tc.room, dest)
		}
	}
}

func mustRun(t *testing.T, r *repo, stdin []byte, args ...string) []byte {
	t.Helper()
	out, err := r.Run(stdin, args...)
	if err != nil {
		t.Fatalf("git %v: %v %s", args, err, out)
	}
	return out
}

// TestImportRefusesATreeBomb: a tiny pack whose trees name one another
// over and over (sixteen entries each, eight levels: four billion paths)
// is refused as over collect_max_files as soon as its listing passes the
// quota, whether its leaves are files or empty directories, and the
// operator's controller neither lists four billion paths nor holds them
// in memory. The context's deadline only bounds a failing run.
func TestImportRefusesATreeBomb(t *testing.T) {
	op := newRepo(t)
	op.write("README", "base\n")
	base := op.commit("base")
	n := node(t, op, "refs/heads/main")
	empty := strings.TrimSpace(string(mustRun(t, n, nil, "mktree")))
	leafBlob := strings.TrimSpace(string(mustRun(t, n, []byte("x\n"), "hash-object", "-w", "--stdin")))
	for _, tc := range []struct {
		name, leaf, typ, mode string
	}{
		{"files", leafBlob, "blob", "100644"},
		{"empty directories", empty, "tree", "040000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id, typ, mode := tc.leaf, tc.typ, tc.mode
			for range 8 {
				var b strings.Builder
				for i := range 16 {
					fmt.Fprintf(&b, "%s %s %s\tn%02d\n", mode, typ, id, i)
				}
				id = strings.TrimSpace(string(mustRun(t, n, []byte(b.String()), "mktree")))
				typ, mode = "tree", "040000"
			}
			readme := strings.TrimSpace(string(mustRun(t, n, []byte("base\n"), "hash-object", "-w", "--stdin")))
			root := strings.TrimSpace(string(mustRun(t, n, []byte("100644 blob "+readme+"\tREADME\n040000 tree "+id+"\tbomb\n"), "mktree")))
			result := strings.TrimSpace(string(mustRun(t, n, nil, "commit-tree", root, "-p", base, "-m", "bomb")))
			pack := n.Pack(result, base)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			err := Import(ctx, op.Dir, bytes.NewReader(pack), result, base, RefPrefix+"t/S01", Limits{MaxBytes: 1 << 30, MaxFiles: 1000})
			if !errors.Is(err, ErrOverLimit) || !strings.Contains(err.Error(), "over collect_max_files (1000)") {
				t.Errorf("a tree bomb of %d bytes: %v; want ErrOverLimit over collect_max_files", len(pack), err)
			}
			if refs := op.git("for-each-ref", RefPrefix); refs != "" {
				t.Errorf("a refused result set %s", refs)
			}
		})
	}
}

// TestImportRefusesAHugeCommit: a wrapper's commit is a few headers and a
// one-line message. A result whose commit object is larger than a commit
// may be (here a message of 4 MiB of one letter, which packs to a few
// kilobytes; as well 2 GiB in 2 MiB) is refused before the controller
// reads it into memory, sent whole or as a delta on a small commit.
func TestImportRefusesAHugeCommit(t *testing.T) {
	ctx := context.Background()
	op, n, base, honest := honestResult(t, newRepo(t))
	tree := n.git("rev-parse", honest+"^{tree}")
	msg := strings.Repeat("a", 4<<20)
	huge := strings.TrimSpace(string(mustRun(t, n, []byte(msg), "commit-tree", tree, "-p", base, "-F", "-")))
	objs := n.Objects(strings.Fields(n.git("rev-list", "--objects", "--no-object-names", huge, "^"+base))...)
	whole := gittest.BuildPack(t, objs)
	// As a delta on the small honest commit (its data inserted, 127 bytes
	// an instruction).
	small := n.Objects(honest)[0].Data
	hugeData := n.Objects(huge)[0].Data
	var delta []byte
	delta = append(delta, gittest.Varint(len(small))...)
	delta = append(delta, gittest.Varint(len(hugeData))...)
	for rest := hugeData; len(rest) > 0; {
		k := min(len(rest), 127)
		delta = append(delta, byte(k))
		delta = append(delta, rest[:k]...)
		rest = rest[k:]
	}
	var deltaObjs []gittest.PackObject
	for _, o := range objs {
		if o.Type != gittest.ObjCommit {
			deltaObjs = append(deltaObjs, o)
		}
	}
	deltaObjs = append(deltaObjs, n.Objects(honest)[0], gittest.PackObject{Type: gittest.ObjRefDelta, Data: delta, Ref: honest})
	viaDelta := gittest.BuildPack(t, deltaObjs)
	for name, pack := range map[string][]byte{"whole": whole, "a delta": viaDelta} {
		err := Import(ctx, op.Dir, bytes.NewReader(pack), huge, base, RefPrefix+"c/S01", Limits{MaxBytes: 64 << 20, MaxFiles: 100})
		if !errors.Is(err, ErrOverLimit) || !strings.Contains(err.Error(), "a commit may be") {
			t.Errorf("a commit of 4 MiB, %s, in a pack of %d bytes: %v; want ErrOverLimit", name, len(pack), err)
		}
	}
	if err := Import(ctx, op.Dir, bytes.NewReader(n.Pack(honest, base)), honest, base, RefPrefix+"c/S01", Limits{MaxBytes: 64 << 20, MaxFiles: 100}); err != nil {
		t.Errorf("an honest result: %v", err)
	}
}

// TestImportReadsThePackAsGitDoes: the pack's inflation is checked with
// the length of the repository's object ids, not the length of the id the
// node named: a SHA-256-long id for a SHA-1 repository had a ref-delta's
// base read as 32 bytes here and 20 by git, so that what was checked was
// not what git inflates. Such an id is refused before anything is
// unpacked; and bytes after a pack's objects other than its checksum are
// refused, not skipped.
func TestImportReadsThePackAsGitDoes(t *testing.T) {
	ctx := context.Background()
	op, n, base, result := honestResult(t, newRepo(t))
	objs := n.Objects(strings.Fields(n.git("rev-list", "--objects", "--no-object-names", result, "^"+base))...)
	objs = append(objs, gittest.Bomb(256)...)
	pack := gittest.BuildPack(t, objs)
	before := op.objectCount()
	long := strings.Repeat("ab", 32)
	err := Import(ctx, op.Dir, bytes.NewReader(pack), long, base, RefPrefix+"h/S01", roomy)
	if err == nil || !strings.Contains(err.Error(), "not a commit id of this repository (object format sha1)") {
		t.Errorf("a 64-digit id for a SHA-1 repository: %v; want it refused as such", err)
	}
	if after := op.objectCount(); after != before {
		t.Errorf("a refused result left objects:\n%s\n%s", before, after)
	}
	// Junk between the objects and the checksum.
	sum := pack[len(pack)-20:]
	junk := append(append(append([]byte(nil), pack[:len(pack)-20]...), "junk"...), sum...)
	if err := checkInflation(writeTemp(t, junk), int64(len(objs)), 20, 1<<30); err == nil || !strings.Contains(err.Error(), "24 bytes after its") {
		t.Errorf("junk after the objects: %v; want the pack corrupt", err)
	}
	if err := checkInflation(writeTemp(t, pack), int64(len(objs)), 20, 1<<30); err != nil {
		t.Errorf("the pack itself: %v", err)
	}
}

// TestImportRefusesMoreObjectsThanAResultHolds: a result names at most
// collect_max_files files and as many directories, its root tree and its
// commit. A pack of more objects than that (here a thousand small blobs
// no tree names; as well millions, which git indexes in gigabytes of
// memory, from a pack within collect_max_bytes) is refused before git
// indexes any, and leaves nothing behind.
func TestImportRefusesMoreObjectsThanAResultHolds(t *testing.T) {
	ctx := context.Background()
	op, n, base, result := honestResult(t, newRepo(t))
	objs := n.Objects(strings.Fields(n.git("rev-list", "--objects", "--no-object-names", result, "^"+base))...)
	for i := range 1000 {
		objs = append(objs, gittest.PackObject{Type: gittest.ObjBlob, Data: []byte(fmt.Sprintf("junk %d\n", i))})
	}
	pack := gittest.BuildPack(t, objs)
	before := op.objectCount()
	lim := Limits{MaxBytes: 1 << 30, MaxFiles: 100}
	err := Import(ctx, op.Dir, bytes.NewReader(pack), result, base, RefPrefix+"o/S01", lim)
	if !errors.Is(err, ErrOverLimit) || !strings.Contains(err.Error(), "the task's pack holds 1003 objects, more than a result of collect_max_files (100) may") {
		t.Errorf("a pack of 1003 objects: %v; want ErrOverLimit", err)
	}
	if after := op.objectCount(); after != before {
		t.Errorf("a refused pack left objects:\n%s\n%s", before, after)
	}
	if err := Import(ctx, op.Dir, bytes.NewReader(n.Pack(result, base)), result, base, RefPrefix+"o/S01", lim); err != nil {
		t.Errorf("the result alone: %v", err)
	}
}

// TestImportIntoARepositoryWithAColonInItsPath: the quarantine borrows
// the repository's objects through GIT_ALTERNATE_OBJECT_DIRECTORIES, a
// list split at colons, and its index was found by a glob: a repository
// whose path holds a colon (~/work/a:b), a backslash or a bracket could
// import no result at all.
func TestImportIntoARepositoryWithAColonInItsPath(t *testing.T) {
	for _, name := range []string{"a:b", `q"u\o:te`, "br[ack]et*"} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			dir := filepath.Join(t.TempDir(), name)
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			op := &repo{&gittest.Repo{T: t, Dir: dir}}
			op.git("init", "-q", "-b", "main")
			op, n, base, result := honestResult(t, op)
			if err := Import(ctx, op.Dir, bytes.NewReader(n.Pack(result, base)), result, base, RefPrefix+"a/S01", roomy); err != nil {
				t.Errorf("an honest result: %v", err)
			}
		})
	}
}
