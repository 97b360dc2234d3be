package gitresult

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
	"time"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/proc"
)

// The node's side of git-native projects (issue 12).
//
// The controller ships a project's base commit once per node, as one pack
// stream, into the bare repository <work_dir>/<project>/repo.git
// (`git-receive`); `git-have` says which base commits it holds, so that
// only missing objects travel when the base moves. A task's workspace is a
// clone sharing repo.git's objects, on its own branch at the base
// (PrepareRepoWorkspace): a launch costs the same whatever the
// repository's size once its objects are on the node.
//
// When the tool exits, the wrapper records what the workspace holds as one
// commit on the base (SnapshotWorkspace). The task may have written
// anything in its workspace, its .git included: a config there can name
// programs (filters, fsmonitor, hooks) that git would run for the wrapper.
// So the snapshot never uses the workspace's .git: it uses a git directory
// of its own under the wrapper's private .ctl directory, whose config is
// the wrapper's, with no system or global config, and borrows repo.git's
// objects through alternates. The task's .gitignore is respected; its
// .gitattributes can name a filter driver, but drivers come only from a
// config, and none is configured.

// BaseRefPrefix holds, in repo.git, one ref per base commit received.
const BaseRefPrefix = "refs/dispatch/base/"

// GitEnv is the environment of every git the wrapper runs: no system or
// global config, no prompt, C locale, dispatch's identity.
func GitEnv() []string {
	env := []string{"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=" + os.DevNull, "GIT_TERMINAL_PROMPT=0",
		"LC_ALL=C", "GIT_OPTIONAL_LOCKS=0"}
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); k == "PATH" || k == "HOME" || k == "TMPDIR" {
			env = append(env, kv)
		}
	}
	return env
}

// RunGit runs git with GitEnv (plus extra) in dir, stdin from in, and
// returns its stdout.
func RunGit(ctx context.Context, dir string, extra []string, in io.Reader, args ...string) ([]byte, error) {
	// Hooks and fsmonitor off whatever a config says.
	args = append([]string{"-c", "core.hooksPath=" + os.DevNull, "-c", "core.fsmonitor=false"}, args...)
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	cmd.Env = append(GitEnv(), extra...)
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

// InitRepo creates repo as a private bare repository when it is missing.
func InitRepo(ctx context.Context, repo string) error {
	if _, err := os.Stat(filepath.Join(repo, "objects")); err == nil {
		return nil
	}
	if err := os.MkdirAll(repo, 0o700); err != nil {
		return err
	}
	if _, err := RunGit(ctx, repo, nil, nil, "init", "-q", "--bare", "."); err != nil {
		return err
	}
	return os.Chmod(repo, 0o700)
}

// PrepareRepoWorkspace makes out (which must not exist) a working tree of
// repo on a new branch at base: a clone sharing repo's objects, so that
// the tools find the git repository they expect. With spares, a ready
// checkout of base (see MakeSpare) is taken when there is one: a rename,
// instead of writing every file of the tree. It also makes the private
// git directory gitDir the result is recorded in (see SnapshotWorkspace),
// with a copy of the fresh checkout's index: its file stats spare the
// recording from hashing every file of the tree again. A checkout that
// writes the tree waits for one of places' (nil: no bound). It reports
// whether a spare was taken.
func PrepareRepoWorkspace(ctx context.Context, repo, base, branch, out, gitDir string, spares bool, places *Checkouts) (bool, error) {
	if !wire.IsCommitID(base) {
		return false, fmt.Errorf("base %q is not a full commit id", base)
	}
	spare, err := checkout(ctx, repo, base, branch, out, spares, places)
	if err != nil {
		return spare, err
	}
	// Read before the tool starts: the task cannot have touched it yet.
	index, err := os.ReadFile(filepath.Join(out, ".git", "index"))
	if err != nil {
		index = nil // recorded the slow way
	}
	return spare, initSnapshotDir(ctx, repo, gitDir, index)
}

// checkout makes out a clone of repo on branch at base: a spare renamed
// into place when spares allows and there is one, else a checkout of its
// own, which holds a place of places while it writes the tree.
func checkout(ctx context.Context, repo, base, branch, out string, spares bool, places *Checkouts) (bool, error) {
	spare := spares && claimSpare(repo, base, out)
	if !spare {
		release, err := places.hold()
		if err != nil {
			return false, err
		}
		defer release()
		// A spare made while this one waited saves the checkout.
		spare = spares && claimSpare(repo, base, out)
	}
	if !spare {
		if _, err := RunGit(ctx, "/", nil, nil, "clone", "-q", "--shared", "--no-checkout", "--", repo, out); err != nil {
			return false, err
		}
	}
	_, err := RunGit(ctx, out, nil, nil, "checkout", "-q", "-b", branch, base)
	return spare, err
}

// Spares: ready checkouts of a base, made in the background after a
// launch (`git-spare`), so that the next launch of the project's tasks on
// the node renames one into place. They live in
// <work_dir>/<project>/spares/<base>/ready-*, built under tmp-* and renamed
// when whole; a rename is atomic, so two launches never take the same one.
const (
	sparesDirName = "spares"
	SparePrefix   = "ready-"
	SpareTmp      = "tmp-"
	// SpareStale is how long an unfinished spare, or the spares of a base
	// no launch has used, are left before the next git-spare removes them.
	SpareStale = 10 * time.Minute
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
		if !strings.HasPrefix(e.Name(), SparePrefix) {
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

// MakeSpare adds a ready checkout of base unless max are there already,
// and removes what is stale: unfinished spares, and the spares of other
// bases no launch used for SpareStale.
func MakeSpare(ctx context.Context, repo, base string, max int) error {
	root := filepath.Join(filepath.Dir(repo), sparesDirName)
	dir := spareDir(repo, base)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	stale := time.Now().Add(-SpareStale)
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
		case strings.HasPrefix(e.Name(), SparePrefix):
			ready++
		case strings.HasPrefix(e.Name(), SpareTmp):
			if fi, err := e.Info(); err == nil && fi.ModTime().Before(stale) {
				os.RemoveAll(filepath.Join(dir, e.Name()))
			}
		}
	}
	if ready >= max {
		return nil
	}
	tmp, err := os.MkdirTemp(dir, SpareTmp)
	if err != nil {
		return err
	}
	if _, err := RunGit(ctx, "/", nil, nil, "clone", "-q", "--shared", "--no-checkout", "--", repo, tmp); err != nil {
		os.RemoveAll(tmp)
		return err
	}
	if _, err := RunGit(ctx, tmp, nil, nil, "checkout", "-q", "--detach", base); err != nil {
		os.RemoveAll(tmp)
		return err
	}
	// Files written in the second the index was are "racily clean": git
	// would read them all again when the spare is taken. Rewritten a
	// second later, the index vouches for them.
	time.Sleep(time.Second)
	if _, err := RunGit(ctx, tmp, nil, nil, "update-index", "-q", "--really-refresh"); err != nil {
		os.RemoveAll(tmp)
		return err
	}
	final := filepath.Join(dir, SparePrefix+strings.TrimPrefix(filepath.Base(tmp), SpareTmp))
	if err := os.Rename(tmp, final); err != nil {
		os.RemoveAll(tmp)
		return err
	}
	return nil
}

// SnapshotIndex is the index file in a snapshot git directory.
const SnapshotIndex = "snapshot.index"

// initSnapshotDir makes gitDir afresh: a private bare repository borrowing
// repo's objects, holding index (when not nil) as its snapshot index.
func initSnapshotDir(ctx context.Context, repo, gitDir string, index []byte) error {
	if err := os.RemoveAll(gitDir); err != nil {
		return err
	}
	if err := InitRepo(ctx, gitDir); err != nil {
		return err
	}
	alt := filepath.Join(repo, "objects") + "\n"
	if err := os.WriteFile(filepath.Join(gitDir, "objects", "info", "alternates"), []byte(alt), 0o600); err != nil {
		return err
	}
	if index != nil {
		return os.WriteFile(filepath.Join(gitDir, SnapshotIndex), index, 0o600)
	}
	return nil
}

// SnapshotDirOf is where the wrapper at wrapperPath keeps task directory
// dir's private git directory (SnapshotDir), for `dispatch cleanup` to
// remove with the task directory.
func SnapshotDirOf(wrapperPath, dir string) string {
	sum := sha256.Sum256([]byte(filepath.Clean(dir)))
	return filepath.Join(filepath.Dir(wrapperPath), proc.CtlDirName, hex.EncodeToString(sum[:])+".git")
}

// SnapshotDir is the private git directory the wrapper records task dir's
// results in: <dir of the wrapper>/.ctl/<sha256 of dir>.git.
func SnapshotDir(dir string) (string, error) {
	path, err := proc.RecordPath(dir)
	if err != nil {
		return "", err
	}
	return strings.TrimSuffix(path, ".json") + ".git", nil
}

// SnapshotWorkspace records what out holds (its .gitignore respected) as
// one commit on base, with the given author and message, in the private
// git directory gitDir (created, borrowing repo's objects), under ref
// branch. It returns the commit; base itself when nothing changed.
func SnapshotWorkspace(ctx context.Context, repo, gitDir, out, base, branch, author, message string) (string, error) {
	if !wire.IsCommitID(base) {
		return "", fmt.Errorf("base %q is not a full commit id", base)
	}
	if _, err := os.Stat(filepath.Join(gitDir, "objects", "info", "alternates")); err != nil {
		// Not prepared by PrepareRepoWorkspace (an attempt that resumed
		// an earlier one's workspace): every file is hashed.
		if err := initSnapshotDir(ctx, repo, gitDir, nil); err != nil {
			return "", err
		}
	}
	env := []string{"GIT_DIR=" + gitDir, "GIT_WORK_TREE=" + out, "GIT_INDEX_FILE=" + filepath.Join(gitDir, SnapshotIndex),
		"GIT_AUTHOR_NAME=" + author, "GIT_AUTHOR_EMAIL=dispatch@localhost",
		"GIT_COMMITTER_NAME=dispatch", "GIT_COMMITTER_EMAIL=dispatch@localhost"}
	core := []string{"-c", "core.bare=false", "-c", "core.excludesFile=" + os.DevNull, "-c", "core.attributesFile=" + os.DevNull}
	git := func(args ...string) ([]byte, error) {
		return RunGit(ctx, out, env, nil, append(core, args...)...)
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
