package wrapper

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/dispatch-tool/dispatch/wrapper/errkind"

	"github.com/dispatch-tool/dispatch/wrapper/proc"

	"github.com/dispatch-tool/dispatch/wire"
)

// The node's side of git-native projects (issue 12).
//
// The controller ships a project's base commit once per node, as one pack
// stream, into the bare repository <work_dir>/<project>/repo.git
// (`git-receive`); `git-have` says which base commits it holds, so that
// only missing objects travel when the base moves. A task's workspace is a
// clone sharing repo.git's objects, on its own branch at the base
// (prepareRepoWorkspace): a launch costs the same whatever the
// repository's size once its objects are on the node.
//
// When the tool exits, the wrapper records what the workspace holds as one
// commit on the base (snapshotWorkspace). The task may have written
// anything in its workspace, its .git included: a config there can name
// programs (filters, fsmonitor, hooks) that git would run for the wrapper.
// So the snapshot never uses the workspace's .git: it uses a git directory
// of its own under the wrapper's private .ctl directory, whose config is
// the wrapper's, with no system or global config, and borrows repo.git's
// objects through alternates. The task's .gitignore is respected; its
// .gitattributes can name a filter driver, but drivers come only from a
// config, and none is configured.

// baseRefPrefix holds, in repo.git, one ref per base commit received.
const baseRefPrefix = "refs/dispatch/base/"

// gitEnv is the environment of every git the wrapper runs: no system or
// global config, no prompt, C locale, dispatch's identity.
func gitEnv() []string {
	env := []string{"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=" + os.DevNull, "GIT_TERMINAL_PROMPT=0",
		"LC_ALL=C", "GIT_OPTIONAL_LOCKS=0"}
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); k == "PATH" || k == "HOME" || k == "TMPDIR" {
			env = append(env, kv)
		}
	}
	return env
}

// runGit runs git with gitEnv (plus extra) in dir, stdin from in, and
// returns its stdout.
func runGit(ctx context.Context, dir string, extra []string, in io.Reader, args ...string) ([]byte, error) {
	// Hooks and fsmonitor off whatever a config says.
	args = append([]string{"-c", "core.hooksPath=" + os.DevNull, "-c", "core.fsmonitor=false"}, args...)
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	cmd.Env = append(gitEnv(), extra...)
	cmd.Stdin = in
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(errb.String())
		if len(msg) > 400 {
			msg = msg[:400] + "…"
		}
		return out.Bytes(), fmt.Errorf("git %s: %v: %s", gitCommandName(args), err, msg)
	}
	return out.Bytes(), nil
}

// gitCommandName is the git command in args, past the -c options.
func gitCommandName(args []string) string {
	for i := 0; i < len(args); i++ {
		if args[i] == "-c" {
			i++
			continue
		}
		return args[i]
	}
	return ""
}

// repoFlag checks --repo: absolute, clean, named repo.git.
func repoFlag(cmd, v string) (string, error) {
	dir, err := taskDirFlag(cmd, v)
	if err != nil {
		return "", err
	}
	if dir != v || filepath.Base(dir) != "repo.git" {
		return "", errkind.Usagef("%s: --repo %q must be an absolute, clean path ending in repo.git", cmd, v)
	}
	return dir, nil
}

// cmdGitReceive reads a pack of the base commit --commit, from the file
// --pack (removed afterwards) or else stdin, into --repo (created, bare and
// private, when missing) and records the commit.
func cmdGitReceive(ctx context.Context, args []string, stdin io.Reader, stdout io.Writer) error {
	fs := newFlagSet("git-receive")
	repoArg := fs.String("repo", "", "the project's repository on the node (<work_dir>/<project>/repo.git)")
	commit := fs.String("commit", "", "the base commit the pack completes")
	packArg := fs.String("pack", "", "a file holding the pack (read, then removed); stdin when not given")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *packArg != "" {
		p, err := taskDirFlag("git-receive", *packArg)
		if err != nil {
			return err
		}
		// The controller's upload: a link put in its place is not followed.
		f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
		if err != nil {
			return errkind.IO(fmt.Errorf("git-receive: %w", err))
		}
		defer os.Remove(p)
		defer f.Close()
		stdin = f
	}
	repo, err := repoFlag("git-receive", *repoArg)
	if err != nil {
		return err
	}
	if !wire.IsCommitID(*commit) {
		return errkind.Usagef("git-receive: --commit %q is not a full commit id", *commit)
	}
	if err := initRepo(ctx, repo); err != nil {
		return errkind.IO(err)
	}
	// A pack cut off or corrupt is refused whole by index-pack; its
	// temporary file is removed.
	if _, err := runGit(ctx, repo, nil, stdin, "index-pack", "--stdin", "--fix-thin", "--strict"); err != nil {
		return errkind.IO(err)
	}
	if t, err := runGit(ctx, repo, nil, nil, "cat-file", "-t", *commit); err != nil || strings.TrimSpace(string(t)) != "commit" {
		return errkind.IO(fmt.Errorf("git-receive: the pack does not complete commit %s", *commit))
	}
	if _, err := runGit(ctx, repo, nil, nil, "update-ref", baseRefPrefix+*commit, *commit); err != nil {
		return errkind.IO(err)
	}
	return replyCommits(ctx, repo, stdout)
}

// cmdGitHave replies the base commits --repo holds (none when it does not
// exist yet).
func cmdGitHave(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlagSet("git-have")
	repoArg := fs.String("repo", "", "the project's repository on the node")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	repo, err := repoFlag("git-have", *repoArg)
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(repo, "objects")); errors.Is(err, os.ErrNotExist) {
		return printJSON(stdout, wire.GitReply{Commits: []string{}})
	}
	return replyCommits(ctx, repo, stdout)
}

func replyCommits(ctx context.Context, repo string, stdout io.Writer) error {
	out, err := runGit(ctx, repo, nil, nil, "for-each-ref", "--format=%(objectname)", baseRefPrefix)
	if err != nil {
		return errkind.IO(err)
	}
	reply := wire.GitReply{Commits: []string{}}
	for _, l := range strings.Fields(string(out)) {
		reply.Commits = append(reply.Commits, l)
	}
	return printJSON(stdout, reply)
}

// initRepo creates repo as a private bare repository when it is missing.
func initRepo(ctx context.Context, repo string) error {
	if _, err := os.Stat(filepath.Join(repo, "objects")); err == nil {
		return nil
	}
	if err := os.MkdirAll(repo, 0o700); err != nil {
		return err
	}
	if _, err := runGit(ctx, repo, nil, nil, "init", "-q", "--bare", "."); err != nil {
		return err
	}
	return os.Chmod(repo, 0o700)
}

// prepareRepoWorkspace makes out (which must not exist) a working tree of
// repo on a new branch at base: a clone sharing repo's objects, so that
// the tools find the git repository they expect. With spares, a ready
// checkout of base (see makeSpare) is taken when there is one: a rename,
// instead of writing every file of the tree. It also makes the private
// git directory gitDir the result is recorded in (see snapshotWorkspace),
// with a copy of the fresh checkout's index: its file stats spare the
// recording from hashing every file of the tree again. It reports
// whether a spare was taken.
func prepareRepoWorkspace(ctx context.Context, repo, base, branch, out, gitDir string, spares bool) (bool, error) {
	if !wire.IsCommitID(base) {
		return false, fmt.Errorf("base %q is not a full commit id", base)
	}
	spare := spares && claimSpare(repo, base, out)
	if !spare {
		if _, err := runGit(ctx, "/", nil, nil, "clone", "-q", "--shared", "--no-checkout", "--", repo, out); err != nil {
			return false, err
		}
	}
	if _, err := runGit(ctx, out, nil, nil, "checkout", "-q", "-b", branch, base); err != nil {
		return spare, err
	}
	// Read before the tool starts: the task cannot have touched it yet.
	index, err := os.ReadFile(filepath.Join(out, ".git", "index"))
	if err != nil {
		index = nil // recorded the slow way
	}
	return spare, initSnapshotDir(ctx, repo, gitDir, index)
}

// Spares: ready checkouts of a base, made in the background after a
// launch (`git-spare`), so that the next launch of the project's tasks on
// the node renames one into place. They live in
// <work_dir>/<project>/spares/<base>/ready-*, built under tmp-* and renamed
// when whole; a rename is atomic, so two launches never take the same one.
const (
	sparesDirName = "spares"
	sparePrefix   = "ready-"
	spareTmp      = "tmp-"
	// spareStale is how long an unfinished spare, or the spares of a base
	// no launch has used, are left before the next git-spare removes them.
	spareStale = 10 * time.Minute
)

func spareDir(repo, base string) string {
	return filepath.Join(filepath.Dir(repo), sparesDirName, base)
}

// claimSpare moves a ready checkout of base into out.
func claimSpare(repo, base, out string) bool {
	dir := spareDir(repo, base)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	// The supervisor made out empty; os.Rename does not replace a
	// directory, and a non-empty one is not given up.
	if err := os.Remove(out); err != nil && !errors.Is(err, os.ErrNotExist) {
		return false
	}
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), sparePrefix) {
			continue
		}
		if os.Rename(filepath.Join(dir, e.Name()), out) == nil {
			now := time.Now()
			os.Chtimes(dir, now, now) // this base is in use
			return true
		}
	}
	return false
}

// makeSpare adds a ready checkout of base unless max are there already,
// and removes what is stale: unfinished spares, and the spares of other
// bases no launch used for spareStale.
func makeSpare(ctx context.Context, repo, base string, max int) error {
	root := filepath.Join(filepath.Dir(repo), sparesDirName)
	dir := spareDir(repo, base)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	stale := time.Now().Add(-spareStale)
	if others, err := os.ReadDir(root); err == nil {
		for _, o := range others {
			if fi, err := o.Info(); err == nil && o.Name() != base && fi.ModTime().Before(stale) {
				os.RemoveAll(filepath.Join(root, o.Name()))
			}
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	ready := 0
	for _, e := range entries {
		switch {
		case strings.HasPrefix(e.Name(), sparePrefix):
			ready++
		case strings.HasPrefix(e.Name(), spareTmp):
			if fi, err := e.Info(); err == nil && fi.ModTime().Before(stale) {
				os.RemoveAll(filepath.Join(dir, e.Name()))
			}
		}
	}
	if ready >= max {
		return nil
	}
	tmp, err := os.MkdirTemp(dir, spareTmp)
	if err != nil {
		return err
	}
	if _, err := runGit(ctx, "/", nil, nil, "clone", "-q", "--shared", "--no-checkout", "--", repo, tmp); err != nil {
		os.RemoveAll(tmp)
		return err
	}
	if _, err := runGit(ctx, tmp, nil, nil, "checkout", "-q", "--detach", base); err != nil {
		os.RemoveAll(tmp)
		return err
	}
	// Files written in the second the index was are "racily clean": git
	// would read them all again when the spare is taken. Rewritten a
	// second later, the index vouches for them.
	time.Sleep(time.Second)
	if _, err := runGit(ctx, tmp, nil, nil, "update-index", "-q", "--really-refresh"); err != nil {
		os.RemoveAll(tmp)
		return err
	}
	final := filepath.Join(dir, sparePrefix+strings.TrimPrefix(filepath.Base(tmp), spareTmp))
	if err := os.Rename(tmp, final); err != nil {
		os.RemoveAll(tmp)
		return err
	}
	return nil
}

// cmdGitSpare makes one spare checkout of --base from --repo, unless --max
// are ready; the supervisor starts it in the background after a launch.
func cmdGitSpare(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlagSet("git-spare")
	repoArg := fs.String("repo", "", "the project's repository on the node")
	base := fs.String("base", "", "the base commit to check out")
	max := fs.Int("max", 1, "how many spares of the base may be ready")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	repo, err := repoFlag("git-spare", *repoArg)
	if err != nil {
		return err
	}
	if !wire.IsCommitID(*base) {
		return errkind.Usagef("git-spare: --base %q is not a full commit id", *base)
	}
	if *max < 1 || *max > 64 {
		return errkind.Usagef("git-spare: --max %d: want 1 to 64", *max)
	}
	background() // a launch may be preparing beside it
	if err := makeSpare(ctx, repo, *base, *max); err != nil {
		return errkind.IO(err)
	}
	return printJSON(stdout, struct{}{})
}

// snapshotIndex is the index file in a snapshot git directory.
const snapshotIndex = "snapshot.index"

// initSnapshotDir makes gitDir afresh: a private bare repository borrowing
// repo's objects, holding index (when not nil) as its snapshot index.
func initSnapshotDir(ctx context.Context, repo, gitDir string, index []byte) error {
	if err := os.RemoveAll(gitDir); err != nil {
		return err
	}
	if err := initRepo(ctx, gitDir); err != nil {
		return err
	}
	alt := filepath.Join(repo, "objects") + "\n"
	if err := os.WriteFile(filepath.Join(gitDir, "objects", "info", "alternates"), []byte(alt), 0o600); err != nil {
		return err
	}
	if index != nil {
		return os.WriteFile(filepath.Join(gitDir, snapshotIndex), index, 0o600)
	}
	return nil
}

// SnapshotDirOf is where the wrapper at wrapperPath keeps task directory
// dir's private git directory (snapshotDir), for `dispatch cleanup` to
// remove with the task directory.
func SnapshotDirOf(wrapperPath, dir string) string {
	sum := sha256.Sum256([]byte(filepath.Clean(dir)))
	return filepath.Join(filepath.Dir(wrapperPath), proc.CtlDirName, hex.EncodeToString(sum[:])+".git")
}

// snapshotDir is the private git directory the wrapper records task dir's
// results in: <dir of the wrapper>/.ctl/<sha256 of dir>.git.
func snapshotDir(dir string) (string, error) {
	path, err := proc.RecordPath(dir)
	if err != nil {
		return "", err
	}
	return strings.TrimSuffix(path, ".json") + ".git", nil
}

// snapshotWorkspace records what out holds (its .gitignore respected) as
// one commit on base, with the given author and message, in the private
// git directory gitDir (created, borrowing repo's objects), under ref
// branch. It returns the commit; base itself when nothing changed.
func snapshotWorkspace(ctx context.Context, repo, gitDir, out, base, branch, author, message string) (string, error) {
	if !wire.IsCommitID(base) {
		return "", fmt.Errorf("base %q is not a full commit id", base)
	}
	if _, err := os.Stat(filepath.Join(gitDir, "objects", "info", "alternates")); err != nil {
		// Not prepared by prepareRepoWorkspace (an attempt that resumed
		// an earlier one's workspace): every file is hashed.
		if err := initSnapshotDir(ctx, repo, gitDir, nil); err != nil {
			return "", err
		}
	}
	env := []string{"GIT_DIR=" + gitDir, "GIT_WORK_TREE=" + out, "GIT_INDEX_FILE=" + filepath.Join(gitDir, snapshotIndex),
		"GIT_AUTHOR_NAME=" + author, "GIT_AUTHOR_EMAIL=dispatch@localhost",
		"GIT_COMMITTER_NAME=dispatch", "GIT_COMMITTER_EMAIL=dispatch@localhost"}
	core := []string{"-c", "core.bare=false", "-c", "core.excludesFile=" + os.DevNull, "-c", "core.attributesFile=" + os.DevNull}
	git := func(args ...string) ([]byte, error) {
		return runGit(ctx, out, env, nil, append(core, args...)...)
	}
	// -m keeps the stats of the entries the base holds as they are, so
	// that only files changed since the checkout are read.
	if _, err := git("read-tree", "-m", base); err != nil {
		return "", err
	}
	if _, err := git("add", "-A", "--", "."); err != nil {
		return "", err
	}
	tree, err := git("write-tree")
	if err != nil {
		return "", err
	}
	baseTree, err := git("rev-parse", base+"^{tree}")
	if err != nil {
		return "", err
	}
	commit := base
	if !bytes.Equal(bytes.TrimSpace(tree), bytes.TrimSpace(baseTree)) {
		c, err := git("commit-tree", "--no-gpg-sign", strings.TrimSpace(string(tree)), "-p", base, "-m", message)
		if err != nil {
			return "", err
		}
		commit = strings.TrimSpace(string(c))
	}
	if _, err := git("update-ref", "refs/heads/"+branch, commit); err != nil {
		return "", err
	}
	return commit, nil
}

// cmdGitPack writes to --out a pack of the task's result recorded by
// snapshotWorkspace for --dir on --branch, less what --base holds, for the
// controller to fetch (one transfer, bounded by progress) and import into
// the operator's repository.
func cmdGitPack(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlagSet("git-pack")
	dirFlag := fs.String("dir", "", "task directory")
	base := fs.String("base", "", "the task's base commit")
	branch := fs.String("branch", "", "the task's branch (dispatch/<project>/<ID>)")
	outFlag := fs.String("out", "", "where to write the pack")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	dir, err := taskDirFlag("git-pack", *dirFlag)
	if err != nil {
		return err
	}
	outPath, err := taskDirFlag("git-pack", *outFlag)
	if err != nil {
		return err
	}
	if !wire.IsCommitID(*base) {
		return errkind.Usagef("git-pack: --base %q is not a full commit id", *base)
	}
	if !strings.HasPrefix(*branch, "dispatch/") || strings.Contains(*branch, "..") {
		return errkind.Usagef("git-pack: --branch %q is not a dispatch/ branch", *branch)
	}
	gitDir, err := snapshotDir(dir)
	if err != nil {
		return errkind.IO(err)
	}
	env := []string{"GIT_DIR=" + gitDir}
	c, err := runGit(ctx, "/", env, nil, "rev-parse", "--verify", "--quiet", "refs/heads/"+*branch+"^{commit}")
	if err != nil {
		return &errkind.Error{Kind: wire.KindNotFound, Err: fmt.Errorf("git-pack: no result recorded for %s in %s", *branch, dir)}
	}
	commit := strings.TrimSpace(string(c))
	if _, err := runGit(ctx, "/", env, nil, "merge-base", "--is-ancestor", *base, commit); err != nil {
		return errkind.IO(fmt.Errorf("git-pack: the result %s does not descend from %s", commit, *base))
	}
	// The pack file is the wrapper's: a link or anything else at its name
	// is replaced, never followed.
	os.Remove(outPath)
	f, err := os.OpenFile(outPath, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return errkind.IO(err)
	}
	cmd := exec.CommandContext(ctx, "git", "pack-objects", "--stdout", "--revs", "--thin", "--quiet")
	cmd.Dir = "/"
	cmd.Env = append(gitEnv(), env...)
	cmd.Stdin = strings.NewReader(commit + "\n^" + *base + "\n")
	cmd.Stdout = f
	var errb bytes.Buffer
	cmd.Stderr = &errb
	err = cmd.Run()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(outPath)
		return errkind.IO(fmt.Errorf("git-pack: %v: %s", err, strings.TrimSpace(errb.String())))
	}
	fi, err := os.Stat(outPath)
	if err != nil {
		return errkind.IO(err)
	}
	return printJSON(stdout, wire.PackReply{Commit: commit, Bytes: fi.Size()})
}
