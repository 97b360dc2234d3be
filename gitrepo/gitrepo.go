// Package gitrepo is what the controller does in the operator's git
// repository for git-native projects (issue 12): resolve the project's
// starting commit with a clear error for each bad input, merge the tasks'
// commits with git's own 3-way merge, listing the files more than one task
// changed and the real conflicts, and set the result under
// refs/heads/dispatch/ only. It never touches the operator's HEAD, index,
// working tree or any other ref: merges are computed with
// `git merge-tree --write-tree` and recorded with `git commit-tree`, which
// write objects and nothing else.
//
// It runs the git CLI (2.38 or later for merge-tree --write-tree) with a
// fixed environment: no system config, no prompts, C locale, a fixed
// identity for the commits it makes.
package gitrepo

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dispatch-tool/dispatch/internal/textfence"
	"github.com/dispatch-tool/dispatch/wire"
)

// RefPrefix is the only namespace of refs this package writes.
const RefPrefix = "refs/heads/dispatch/"

// identity is the author and committer of the commits dispatch makes.
const identity = "dispatch"

// Error kinds of Resolve, for errors.Is.
var (
	ErrNotRepo   = errors.New("not a git repository")
	ErrNoCommits = errors.New("repository has no commits")
	ErrNoRef     = errors.New("ref does not exist")
)

// Problem is a bad repository input: what is wrong and how to fix it.
type Problem struct {
	Kind error // ErrNotRepo, ErrNoCommits or ErrNoRef
	Msg  string
	Fix  string
}

func (p *Problem) Error() string { return p.Msg + "\n  fix: " + p.Fix }
func (p *Problem) Unwrap() error { return p.Kind }

// Source is a project's starting point: a commit of a repository.
type Source struct {
	// Dir is the repository's git directory, absolute.
	Dir    string
	Ref    string
	Commit string
	// Notes say, one line each, what of the repository is not shipped as
	// the operator may expect (uncommitted changes, submodules, LFS
	// contents, a shallow history); start says them once.
	Notes []string
}

// git runs git in dir with the package's environment and returns stdout.
func git(ctx context.Context, dir string, stdin []byte, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"GIT_CONFIG_NOSYSTEM=1", "GIT_TERMINAL_PROMPT=0", "LC_ALL=C", "GIT_OPTIONAL_LOCKS=0",
		"GIT_AUTHOR_NAME="+identity, "GIT_AUTHOR_EMAIL="+identity+"@localhost",
		"GIT_COMMITTER_NAME="+identity, "GIT_COMMITTER_EMAIL="+identity+"@localhost")
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		msg := strings.TrimSpace(errb.String())
		if msg == "" {
			msg = err.Error()
		}
		return out.Bytes(), &gitError{args: args, msg: msg, err: err}
	}
	return out.Bytes(), nil
}

type gitError struct {
	args []string
	msg  string
	err  error
}

func (e *gitError) Error() string { return "git " + strings.Join(e.args, " ") + ": " + e.msg }
func (e *gitError) Unwrap() error { return e.err }

// exitCode is the exit status of a failed git, or -1.
func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	return -1
}

func line(b []byte) string { return strings.TrimSpace(string(b)) }

// Resolve checks that dir is a git repository with commits and that ref
// (HEAD when empty) names a commit, and returns it.
func Resolve(ctx context.Context, dir, ref string) (*Source, error) {
	if ref == "" {
		ref = "HEAD"
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if err := checkVersion(ctx); err != nil {
		return nil, err
	}
	if fi, err := os.Stat(abs); err != nil || !fi.IsDir() {
		return nil, &Problem{Kind: ErrNotRepo, Msg: fmt.Sprintf("repo: %s is not a directory", dir),
			Fix: "give the path of a git repository on this machine, relative to the project's spec directory or absolute"}
	}
	out, err := git(ctx, abs, nil, "rev-parse", "--absolute-git-dir")
	if err != nil {
		return nil, &Problem{Kind: ErrNotRepo, Msg: fmt.Sprintf("repo: %s is not a git repository", dir),
			Fix: "give the path of a git repository (run `git init` there and commit, or point repo: at the right directory)"}
	}
	src := &Source{Dir: line(out), Ref: ref}
	out, err = git(ctx, abs, nil, "rev-parse", "--verify", "--quiet", "--end-of-options", ref+"^{commit}")
	if err != nil {
		_, headErr := git(ctx, abs, nil, "rev-parse", "--verify", "--quiet", "HEAD^{commit}")
		if refs, _ := git(ctx, abs, nil, "for-each-ref", "--count=1", "--format=x"); headErr != nil && len(bytes.TrimSpace(refs)) == 0 {
			return nil, &Problem{Kind: ErrNoCommits, Msg: fmt.Sprintf("repo: %s has no commits", dir),
				Fix: "commit the starting point of the tasks first (git add -A && git commit)"}
		}
		return nil, &Problem{Kind: ErrNoRef, Msg: fmt.Sprintf("ref: %q names no commit in %s", ref, dir),
			Fix: "give a branch, tag or commit of that repository (see `git branch -a`, `git tag`), or leave ref: out for HEAD"}
	}
	src.Commit = line(out)
	src.Notes = notes(ctx, abs, src.Commit, ref)
	return src, nil
}

// MinVersion is the oldest git the controller works with: merges are
// computed with `git merge-tree --write-tree` (2.38).
var MinVersion = [2]int{2, 38}

// ErrOldGit is Resolve's error kind for a git older than MinVersion, or none.
var ErrOldGit = errors.New("git too old")

// checkVersion checks that this machine's git is at least MinVersion.
func checkVersion(ctx context.Context) error {
	out, err := git(ctx, "/", nil, "version")
	if err != nil {
		return &Problem{Kind: ErrOldGit, Msg: "git does not run on this machine: " + err.Error(),
			Fix: fmt.Sprintf("install git %d.%d or later", MinVersion[0], MinVersion[1])}
	}
	v, ok := ParseVersion(line(out))
	if !ok || v[0] < MinVersion[0] || (v[0] == MinVersion[0] && v[1] < MinVersion[1]) {
		return &Problem{Kind: ErrOldGit, Msg: fmt.Sprintf("%s is too old for repo: projects", line(out)),
			Fix: fmt.Sprintf("install git %d.%d or later (merges use git merge-tree --write-tree)", MinVersion[0], MinVersion[1])}
	}
	return nil
}

// ParseVersion reads major and minor from `git version` output
// ("git version 2.39.5", "git version 2.50.1 (Apple Git-155)").
func ParseVersion(s string) ([2]int, bool) {
	f := strings.Fields(s)
	if len(f) < 3 || f[0] != "git" || f[1] != "version" {
		return [2]int{}, false
	}
	parts := strings.SplitN(f[2], ".", 3)
	if len(parts) < 2 {
		return [2]int{}, false
	}
	var v [2]int
	for i := range 2 {
		n, err := strconv.Atoi(parts[i])
		if err != nil {
			return [2]int{}, false
		}
		v[i] = n
	}
	return v, true
}

// notes says what of the repository is not shipped as one may expect.
func notes(ctx context.Context, dir, commit, ref string) []string {
	var out []string
	if st, err := git(ctx, dir, nil, "status", "--porcelain", "--untracked-files=no"); err == nil && len(bytes.TrimSpace(st)) > 0 {
		out = append(out, fmt.Sprintf("the working tree has uncommitted changes: they are not shipped; the tasks start from %s (%s)", ref, commit[:12]))
	}
	if _, err := git(ctx, dir, nil, "cat-file", "-e", commit+":.gitmodules"); err == nil {
		out = append(out, "the repository has submodules: their contents are not shipped, only the commits they point to")
	}
	if attrs, err := git(ctx, dir, nil, "cat-file", "blob", commit+":.gitattributes"); err == nil && bytes.Contains(attrs, []byte("filter=lfs")) {
		out = append(out, "the repository uses Git LFS: the tasks get the pointer files, not the large files' contents")
	}
	if sh, err := git(ctx, dir, nil, "rev-parse", "--is-shallow-repository"); err == nil && line(sh) == "true" {
		out = append(out, "the repository is a shallow clone: the tasks see its history only as far as it goes")
	}
	return out
}

// TaskBranch is one task's result to merge: its commit, descending from
// the base.
type TaskBranch struct {
	ID     string
	Commit string
	// Base is the commit the task started from, when not Integrate's base
	// (its changes are counted from there).
	Base string
}

// Overlap is a file that more than one task changed.
type Overlap struct {
	Path  string   `json:"path"`
	Tasks []string `json:"tasks"`
}

// Conflict is a file git could not merge: the task being merged and the
// earlier tasks that changed it.
type Conflict = Overlap

// Merge is the result of Integrate.
type Merge struct {
	// Commit is the last merge commit (the base when no task changed
	// anything).
	Commit string
	// Changed lists, sorted, every file some task changed.
	Changed   []string
	Overlaps  []Overlap
	Conflicts []Conflict
}

// Integrate merges the tasks' commits one by one, in the order given, onto
// base with git's 3-way merge; a commit a later one contains (a dependency
// its dependent was stacked on: see Stack) comes in with that one. A
// merge with conflicts is committed with git's conflict markers in the
// files (for the integration task to resolve) and listed. Only objects are written: no ref, index or working
// tree changes.
func Integrate(ctx context.Context, dir, base string, tasks []TaskBranch) (*Merge, error) {
	changed, err := changedBy(ctx, dir, base, tasks) // path → tasks, in merge order
	if err != nil {
		return nil, err
	}
	skip, err := subsumed(ctx, dir, base, tasks)
	if err != nil {
		return nil, fmt.Errorf("find the stacked results: %w", err)
	}
	m := &Merge{Commit: base, Changed: slices.Sorted(maps.Keys(changed))}
	for _, p := range m.Changed {
		if len(changed[p]) > 1 {
			m.Overlaps = append(m.Overlaps, Overlap{Path: p, Tasks: changed[p]})
		}
	}
	merged := map[string]string{} // task → commit, once merged
	for _, t := range tasks {
		if skip[t.ID] {
			// A later task's commit holds it: merged with that one.
			merged[t.ID] = t.Commit
			continue
		}
		tree, paths, err := mergeTree(ctx, dir, m.Commit, t.Commit)
		if err != nil {
			return nil, fmt.Errorf("merge %s: %w", t.ID, err)
		}
		msg := "Merge " + t.ID
		if len(paths) > 0 {
			msg += " (conflicts: " + textfence.Paths(paths) + ")"
		}
		commit, err := git(ctx, dir, nil, "commit-tree", "--no-gpg-sign", tree, "-p", m.Commit, "-p", t.Commit, "-m", msg)
		if err != nil {
			return nil, fmt.Errorf("record the merge of %s: %w", t.ID, err)
		}
		m.Commit = line(commit)
		pairs := map[string][]string{} // an earlier task's commit → the paths it conflicts on with t
		for _, p := range paths {
			m.Conflicts = append(m.Conflicts, Conflict{Path: p, Tasks: conflictTasks(ctx, dir, p, t, changed[p], merged, pairs)})
		}
		merged[t.ID] = t.Commit
	}
	return m, nil
}

// mergeTree merges b into a with git's 3-way merge (objects only) and
// returns the tree and the paths git could not merge.
func mergeTree(ctx context.Context, dir, a, b string) (string, []string, error) {
	out, err := git(ctx, dir, nil, "merge-tree", "--write-tree", "--name-only", "-z", a, b)
	conflicted := err != nil && exitCode(err) == 1
	if err != nil && !conflicted {
		return "", nil, err
	}
	fields := strings.Split(string(out), "\x00")
	if len(fields[0]) < 40 {
		return "", nil, errors.New("git merge-tree printed no tree")
	}
	var paths []string
	if conflicted {
		for _, p := range fields[1:] {
			if p == "" {
				break // the messages follow an empty field
			}
			if !slices.Contains(paths, p) {
				paths = append(paths, p)
			}
		}
	}
	return fields[0], paths, nil
}

// conflictTasks names the tasks of a conflict on path p met when merging
// t: the tasks merged before it whose own change of p conflicts with t's
// (a merge of the two alone), then t. When no single one does (only their
// sum conflicts), every earlier task that changed p is named. pairs keeps
// the merges of t with each earlier task, made once for all of t's paths.
func conflictTasks(ctx context.Context, dir, p string, t TaskBranch, changedBy []string, merged map[string]string, pairs map[string][]string) []string {
	var earlier, clashing []string
	for _, id := range changedBy {
		commit, ok := merged[id]
		if !ok {
			continue
		}
		earlier = append(earlier, id)
		paths, seen := pairs[commit]
		if !seen {
			_, paths, _ = mergeTree(ctx, dir, commit, t.Commit) // a failed merge names no one
			pairs[commit] = paths
		}
		if slices.Contains(paths, p) {
			clashing = append(clashing, id)
		}
	}
	if len(clashing) == 0 {
		clashing = earlier
	}
	return append(clashing, t.ID)
}

// SetRef points ref, which must be under refs/heads/dispatch/, at commit.
func SetRef(ctx context.Context, dir, ref, commit string) error {
	if !strings.HasPrefix(ref, RefPrefix) || strings.Contains(ref, "..") {
		return fmt.Errorf("refusing to set %q: dispatch writes refs under %s only", ref, RefPrefix)
	}
	if _, err := git(ctx, dir, nil, "check-ref-format", ref); err != nil {
		return fmt.Errorf("invalid ref %q: %w", ref, err)
	}
	_, err := git(ctx, dir, nil, "update-ref", "-m", "dispatch", ref, commit)
	return err
}

// Pack writes to w, as one stream, a pack of the objects reachable from
// want and not from any of have (commits the receiver already has): what
// a node lacks of a new base commit, or what a task added to its base.
// The pack is thin (objects may be deltas against objects of have): the
// receiver completes it with `index-pack --fix-thin`.
func Pack(ctx context.Context, dir, want string, have []string, w io.Writer) error {
	var revs bytes.Buffer
	revs.WriteString(want + "\n")
	for _, h := range have {
		revs.WriteString("^" + h + "\n")
	}
	cmd := exec.CommandContext(ctx, "git", "pack-objects", "--stdout", "--revs", "--thin", "--quiet")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_TERMINAL_PROMPT=0", "LC_ALL=C")
	cmd.Stdin = &revs
	cmd.Stdout = w
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Run(); err != nil {
		return &gitError{args: []string{"pack-objects", want}, msg: strings.TrimSpace(errb.String()), err: err}
	}
	return nil
}

// Import reads a pack (as Pack writes it) into the repository at dir,
// checks that commit is a commit descending from base, and points ref
// (under refs/heads/dispatch/) at it. Importing the same commit again is
// harmless. Only objects and that ref are written.
//
// The pack comes from a node, which may send anything. It is spooled and
// indexed in a quarantine of its own inside the repository's object
// directory, as git's receive-pack does: a pack cut off, corrupt, or not
// completing commit is refused whole and leaves nothing behind; only a
// pack that passed every check moves into the repository. A header that
// claims more objects than its bytes can hold is refused before git
// allocates for them, and one whose objects inflate to more than lim
// allows before git inflates any (checkInflation).
//
// The result must be what a wrapper makes (checkResult): one commit whose
// only parent is base, whose new objects are all in the pack, and whose
// tree is within lim; else the error is a *Problem of kind ErrForeign or
// ErrOverLimit.
func Import(ctx context.Context, dir string, r io.Reader, commit, base, ref string, lim Limits) error {
	if !strings.HasPrefix(ref, RefPrefix) {
		return fmt.Errorf("refusing to set %q: dispatch writes refs under %s only", ref, RefPrefix)
	}
	if !wire.IsCommitID(commit) {
		// A name ("main", "HEAD~1") would resolve in the operator's
		// repository, not in the pack.
		return fmt.Errorf("the task's result %q is not a commit id", truncate(commit, 80))
	}
	// The length of the repository's object ids is how the pack is read
	// (a ref-delta names its base by one): an id of the other length
	// would have the pack read one way here and another by git.
	format, err := git(ctx, dir, nil, "rev-parse", "--show-object-format")
	if err != nil {
		return err
	}
	hashLen := map[string]int{"sha1": 20, "sha256": 32}[line(format)]
	if hashLen == 0 || len(commit) != 2*hashLen {
		return fmt.Errorf("the task's result %q is not a commit id of this repository (object format %s)", truncate(commit, 80), line(format))
	}
	objects, err := git(ctx, dir, nil, "rev-parse", "--path-format=absolute", "--git-path", "objects")
	if err != nil {
		return err
	}
	objDir := line(objects)
	removeStaleQuarantines(objDir)
	q, err := os.MkdirTemp(objDir, quarantinePrefix)
	if err != nil {
		return err
	}
	defer os.RemoveAll(q)
	if err := os.Mkdir(filepath.Join(q, "pack"), 0o755); err != nil {
		return err
	}
	spool := filepath.Join(q, "incoming")
	count, err := spoolPack(r, spool)
	if err != nil {
		return err
	}
	if most := lim.maxObjects(); count > most {
		return &Problem{Kind: ErrOverLimit, Msg: fmt.Sprintf("the task's pack holds %d objects, more than a result of collect_max_files (%d) may (%d: its files, as many directories, its root and its commit): nothing of it was unpacked",
			count, lim.MaxFiles, most), Fix: quotaFix}
	}
	if err := checkInflation(spool, count, hashLen, lim.inflateLimit()); err != nil {
		return err
	}
	in, err := os.Open(spool)
	if err != nil {
		return err
	}
	defer in.Close()
	env := []string{"GIT_OBJECT_DIRECTORY=" + q, "GIT_ALTERNATE_OBJECT_DIRECTORIES=" + alternate(objDir)}
	cmd := exec.CommandContext(ctx, "git", "index-pack", "--stdin", "--fix-thin", "--strict")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), append([]string{"GIT_CONFIG_NOSYSTEM=1", "GIT_TERMINAL_PROMPT=0", "LC_ALL=C"}, env...)...)
	cmd.Stdin = in
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Run(); err != nil {
		return &gitError{args: []string{"index-pack"}, msg: strings.TrimSpace(errb.String()), err: err}
	}
	inQ := func(args ...string) ([]byte, error) { return gitEnv(ctx, dir, env, args...) }
	if t, err := inQ("cat-file", "-t", "--end-of-options", commit); err != nil || line(t) != "commit" {
		return fmt.Errorf("the task's result %q is not a commit of the pack", commit)
	}
	if _, err := inQ("merge-base", "--is-ancestor", base, commit); err != nil {
		return fmt.Errorf("the task's result %s does not descend from its base %s", commit, base)
	}
	fi, err := in.Stat()
	if err != nil {
		return err
	}
	end := fi.Size() - int64(hashLen) // the objects, before the pack's checksum
	if err := checkResult(ctx, dir, env, q, count, end, commit, base, lim); err != nil {
		return err
	}
	if err := migratePacks(filepath.Join(q, "pack"), filepath.Join(objDir, "pack")); err != nil {
		return err
	}
	return SetRef(ctx, dir, ref, commit)
}

// alternate is dir as one entry of GIT_ALTERNATE_OBJECT_DIRECTORIES, a
// list split at colons: a path holding a colon, a quote or a control
// character is given C-quoted, as git reads an entry that starts with a
// double quote.
func alternate(dir string) string {
	if !strings.ContainsFunc(dir, func(r rune) bool { return r == ':' || r == ';' || r == '"' || r == '\\' || r < 0x20 }) {
		return dir
	}
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(dir); i++ {
		switch c := dir[i]; {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20:
			fmt.Fprintf(&b, "\\%03o", c)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// quarantinePrefix names Import's quarantine directories in a
// repository's object directory.
const quarantinePrefix = "dispatch-incoming-"

// removeStaleQuarantines removes the quarantines an Import killed midway
// left (an hour old: no Import takes that long between its writes).
func removeStaleQuarantines(objDir string) {
	entries, _ := os.ReadDir(objDir) // not globbed: the path may hold [, * or \
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), quarantinePrefix) {
			continue
		}
		d := filepath.Join(objDir, e.Name())
		if fi, err := os.Lstat(d); err == nil && fi.IsDir() && time.Since(fi.ModTime()) > time.Hour {
			os.RemoveAll(d)
		}
	}
}

// spoolPack writes r to path and checks its header: a pack, version 2 or
// 3, with no more objects than its size can hold (each takes at least a
// few bytes). It returns the number of objects.
func spoolPack(r io.Reader, path string) (int64, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return 0, err
	}
	size, err := io.Copy(f, r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, fmt.Errorf("read the pack: %w", err)
	}
	hdr := make([]byte, 12)
	f, err = os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	if _, err := io.ReadFull(f, hdr); err != nil || string(hdr[:4]) != "PACK" {
		return 0, fmt.Errorf("not a git pack (%d bytes)", size)
	}
	version := binary.BigEndian.Uint32(hdr[4:8])
	count := int64(binary.BigEndian.Uint32(hdr[8:12]))
	if version != 2 && version != 3 {
		return 0, fmt.Errorf("a git pack of unknown version %d", version)
	}
	if count > (size-12)/minPackedObject {
		return 0, fmt.Errorf("the pack claims %d objects in %d bytes", count, size)
	}
	return count, nil
}

// minPackedObject is the fewest bytes an object takes in a pack: its
// header and a zlib stream's header, one block and checksum.
const minPackedObject = 9

// migratePacks moves the packs index-pack wrote into the repository's
// pack directory, each pack before its index (git reads a pack only
// through its index).
func migratePacks(from, to string) error {
	entries, err := os.ReadDir(from)
	if err != nil {
		return err
	}
	rank := func(name string) int {
		switch filepath.Ext(name) {
		case ".pack":
			return 0
		case ".idx":
			return 2
		}
		return 1
	}
	slices.SortFunc(entries, func(a, b os.DirEntry) int { return rank(a.Name()) - rank(b.Name()) })
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "pack-") {
			continue
		}
		dst := filepath.Join(to, e.Name())
		if _, err := os.Lstat(dst); err == nil {
			continue // the same pack is there already
		}
		if err := os.Rename(filepath.Join(from, e.Name()), dst); err != nil {
			return err
		}
	}
	return nil
}

// gitEnv is git with extra environment.
func gitEnv(ctx context.Context, dir string, env []string, args ...string) ([]byte, error) {
	return gitWith(ctx, dir, env, nil, args...)
}

// gitWith is git with extra environment and stdin (none when nil).
func gitWith(ctx context.Context, dir string, env []string, stdin io.Reader, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), append([]string{"GIT_CONFIG_NOSYSTEM=1", "GIT_TERMINAL_PROMPT=0", "LC_ALL=C"}, env...)...)
	cmd.Stdin = stdin
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.Bytes(), &gitError{args: args, msg: strings.TrimSpace(errb.String()), err: err}
	}
	return out.Bytes(), nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// Known returns the commits of ids that dir holds (others, or names that
// are not full commit ids, are left out): what a receiver says it has,
// checked before a pack leaves it out.
func Known(ctx context.Context, dir string, ids []string) []string {
	var in bytes.Buffer
	var cand []string
	for _, id := range ids {
		if wire.IsCommitID(id) {
			cand = append(cand, id)
			in.WriteString(id + "\n")
		}
	}
	if len(cand) == 0 {
		return nil
	}
	out, err := git(ctx, dir, in.Bytes(), "cat-file", "--batch-check=%(objectname) %(objecttype)")
	if err != nil {
		return nil
	}
	var known []string
	for _, l := range strings.Split(string(out), "\n") {
		if id, typ, ok := strings.Cut(l, " "); ok && typ == "commit" && slices.Contains(cand, id) {
			known = append(known, id)
		}
	}
	return known
}

// Change is a file a commit changed from its base: its size in the commit
// (-1 when the commit deletes it).
type Change struct {
	Path string
	Size int64
}

// Changes lists the files commit changed from base, and git's diffstat of
// them (`git diff --stat`), for the operator to read.
func Changes(ctx context.Context, dir, base, commit string) ([]Change, string, error) {
	// The raw diff names each changed file's new blob; only those are
	// sized, so the cost follows the change, not the repository.
	out, err := git(ctx, dir, nil, "diff-tree", "-r", "-z", "--no-renames", base, commit, "--")
	if err != nil {
		return nil, "", err
	}
	var changes []Change
	var blobs bytes.Buffer
	var sized []int // index in changes of each blob asked for
	fields := strings.Split(string(out), "\x00")
	for i := 0; i+1 < len(fields); i += 2 {
		// :<old mode> <new mode> <old id> <new id> <status>, then the path
		meta := strings.Fields(strings.TrimPrefix(fields[i], ":"))
		if len(meta) != 5 {
			break
		}
		c := Change{Path: fields[i+1], Size: -1}
		switch {
		case meta[4] == "D":
		case meta[1] == "160000":
			c.Size = 0 // a submodule's commit, not a file
		default:
			sized = append(sized, len(changes))
			blobs.WriteString(meta[3] + "\n")
		}
		changes = append(changes, c)
	}
	if len(sized) > 0 {
		out, err := git(ctx, dir, blobs.Bytes(), "cat-file", "--batch-check=%(objectsize)")
		if err != nil {
			return nil, "", err
		}
		for k, l := range strings.Fields(string(out)) {
			if k < len(sized) {
				fmt.Sscan(l, &changes[sized[k]].Size)
			}
		}
	}
	stat, err := git(ctx, dir, nil, "diff", "--stat=200", "--no-renames", base, commit, "--")
	if err != nil {
		return nil, "", err
	}
	return changes, string(stat), nil
}

// ReadFile returns the content of file p in commit, up to max bytes
// (ErrTooLarge past it), or an error wrapping fs.ErrNotExist when the
// commit has no such file.
func ReadFile(ctx context.Context, dir, commit, p string, max int64) ([]byte, error) {
	obj := commit + ":" + p
	sz, err := git(ctx, dir, nil, "cat-file", "-s", "--end-of-options", obj)
	if err != nil {
		return nil, fmt.Errorf("%s in %s: %w", p, commit[:min(12, len(commit))], fs.ErrNotExist)
	}
	var n int64
	fmt.Sscan(line(sz), &n)
	if n > max {
		return nil, ErrTooLarge
	}
	return git(ctx, dir, nil, "cat-file", "blob", "--end-of-options", obj)
}

// ErrTooLarge is ReadFile's error for a file past its limit.
var ErrTooLarge = errors.New("file too large")

// Export writes the tree of commit into dest (created; it must not exist)
// as plain files: the blobs as stored, read with `git cat-file --batch`,
// never through git's filters, attributes (a task's .gitattributes naming
// a filter= driver, export-subst, export-ignore) or hooks. Regular files
// keep their executable bit; symbolic links, submodules and anything under
// a .git directory are left out, so that nothing written goes through a
// link or makes dest a repository whose config git would run.
//
// The tree is held to lim (a *Problem of kind ErrOverLimit) and must fit
// in room bytes (ErrNoRoom) before anything is written.
func Export(ctx context.Context, dir, commit, dest string, lim Limits, room int64) error {
	entries, err := listTree(ctx, dir, nil, commit, lim, "the tree of "+short(commit))
	if err != nil {
		return err
	}
	if n := treeSize(entries); n > room {
		return &Problem{Kind: ErrNoRoom, Msg: fmt.Sprintf("the tree of %s holds %s in its files, more than the %s free under %s", short(commit), mib(n), mib(max(room, 0)), filepath.Dir(dest)),
			Fix: "free space on this machine's disk; it is tried again"}
	}
	var files []treeEntry
	for _, e := range entries {
		if e.typ == "blob" && strings.HasPrefix(e.mode, "100") && !underGit(e.path) {
			files = append(files, e)
		}
	}
	if err := os.Mkdir(dest, 0o755); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cmd := exec.CommandContext(ctx, "git", "cat-file", "--batch")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_TERMINAL_PROMPT=0", "LC_ALL=C")
	var errb bytes.Buffer
	cmd.Stderr = &errb
	in, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	// The feeder ends before this returns: a write fails once Wait has
	// closed the pipe.
	fed := make(chan struct{})
	defer func() { <-fed }()
	go func() {
		defer close(fed)
		w := bufio.NewWriter(in)
		for _, e := range files {
			if _, err := w.WriteString(e.id + "\n"); err != nil {
				break
			}
		}
		w.Flush()
		in.Close()
	}()
	rerr := writeBlobs(bufio.NewReader(out), files, dest)
	if rerr != nil {
		cancel()
	}
	werr := cmd.Wait()
	if rerr != nil {
		return rerr
	}
	if werr != nil {
		return &gitError{args: []string{"cat-file", "--batch"}, msg: strings.TrimSpace(errb.String()), err: werr}
	}
	return nil
}

// underGit reports whether p has a .git directory among its parts (git's
// own check ignores case).
func underGit(p string) bool {
	for _, part := range strings.Split(p, "/") {
		if strings.EqualFold(part, ".git") {
			return true
		}
	}
	return false
}

// writeBlobs writes the blobs `git cat-file --batch` prints, one for each
// of files in order, under dest, refusing any name that would leave it
// and any blob that is not the size the tree's listing gave.
func writeBlobs(br *bufio.Reader, files []treeEntry, dest string) error {
	for _, e := range files {
		hdr, err := br.ReadString('\n')
		if err != nil {
			return fmt.Errorf("git cat-file: %w", err)
		}
		if want := fmt.Sprintf("%s blob %d\n", e.id, e.size); hdr != want {
			return fmt.Errorf("git cat-file printed %q for %s, want %q", truncate(hdr, 80), e.path, want)
		}
		name := filepath.FromSlash(e.path)
		if path.Clean(e.path) != e.path || !filepath.IsLocal(name) {
			return fmt.Errorf("the tree names %q, outside it", e.path)
		}
		p := filepath.Join(dest, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		mode := os.FileMode(0o644)
		if e.mode == "100755" {
			mode = 0o755
		}
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
		if err != nil {
			return err
		}
		_, err = io.CopyN(f, br, e.size)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		if b, err := br.ReadByte(); err != nil || b != '\n' {
			return fmt.Errorf("git cat-file: no newline after %s", e.path)
		}
	}
	return nil
}

// Refs returns the refs under prefix (which must be under RefPrefix),
// each with the commit it points at.
func Refs(ctx context.Context, dir, prefix string) (map[string]string, error) {
	if !strings.HasPrefix(prefix, RefPrefix) {
		return nil, fmt.Errorf("refusing to read %q: dispatch reads refs under %s only", prefix, RefPrefix)
	}
	out, err := git(ctx, dir, nil, "for-each-ref", "--format=%(refname) %(objectname)", prefix)
	if err != nil {
		return nil, err
	}
	refs := map[string]string{}
	for _, l := range strings.Split(string(out), "\n") {
		if ref, commit, ok := strings.Cut(l, " "); ok {
			refs[ref] = commit
		}
	}
	return refs, nil
}

// DeleteRef deletes ref, which must be under RefPrefix, if it still
// points at commit: a ref moved since it was read is refused by git and
// stays.
func DeleteRef(ctx context.Context, dir, ref, commit string) error {
	if !strings.HasPrefix(ref, RefPrefix) || strings.Contains(ref, "..") {
		return fmt.Errorf("refusing to delete %q: dispatch writes refs under %s only", ref, RefPrefix)
	}
	if !wire.IsCommitID(commit) {
		return fmt.Errorf("refusing to delete %q: %q is not a commit id", ref, truncate(commit, 80))
	}
	_, err := git(ctx, dir, nil, "update-ref", "--no-deref", "-m", "dispatch prune", "-d", ref, commit)
	return err
}

// CheckedOut returns the branches (full ref names) checked out in the
// repository's worktrees, the main one included.
func CheckedOut(ctx context.Context, dir string) (map[string]bool, error) {
	out, err := git(ctx, dir, nil, "worktree", "list", "--porcelain")
	if err != nil {
		return nil, err
	}
	refs := map[string]bool{}
	for _, l := range strings.Split(string(out), "\n") {
		if ref, ok := strings.CutPrefix(l, "branch "); ok {
			refs[ref] = true
		}
	}
	return refs, nil
}
