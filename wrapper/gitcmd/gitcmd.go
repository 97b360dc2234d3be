package gitcmd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/dispatch-tool/dispatch/wrapper/subcmd"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/errkind"
	"github.com/dispatch-tool/dispatch/wrapper/gitresult"
)

// repoFlag checks --repo: absolute, clean, named repo.git.
func repoFlag(cmd, v string) (string, error) {
	dir, err := subcmd.DirFlag(cmd, v)
	if err != nil {
		return "", err
	}
	if dir != v || filepath.Base(dir) != "repo.git" {
		return "", errkind.Usagef("%s: --repo %q must be an absolute, clean path ending in repo.git", cmd, v)
	}
	return dir, nil
}

// Receive reads a pack of the base commit --commit, from the file
// --pack (removed afterwards) or else stdin, into --repo (created, bare and
// private, when missing) and records the commit.
func Receive(ctx context.Context, args []string, stdin io.Reader, stdout io.Writer) error {
	fs := subcmd.FlagSet("git-receive")
	repoArg := fs.String("repo", "", "the project's repository on the node (<work_dir>/<project>/repo.git)")
	commit := fs.String("commit", "", "the base commit the pack completes")
	packArg := fs.String("pack", "", "a file holding the pack (read, then removed); stdin when not given")
	if err := subcmd.Parse(fs, args); err != nil {
		return err
	}
	if *packArg != "" {
		p, err := subcmd.DirFlag("git-receive", *packArg)
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
	if err := gitresult.InitRepo(ctx, repo); err != nil {
		return errkind.IO(err)
	}
	// A pack cut off or corrupt is refused whole by index-pack; its
	// temporary file is removed.
	if _, err := gitresult.RunGit(ctx, repo, nil, stdin, "index-pack", "--stdin", "--fix-thin", "--strict"); err != nil {
		return errkind.IO(err)
	}
	if t, err := gitresult.RunGit(ctx, repo, nil, nil, "cat-file", "-t", *commit); err != nil || strings.TrimSpace(string(t)) != "commit" {
		return errkind.IO(fmt.Errorf("git-receive: the pack does not complete commit %s", *commit))
	}
	if _, err := gitresult.RunGit(ctx, repo, nil, nil, "update-ref", gitresult.BaseRefPrefix+*commit, *commit); err != nil {
		return errkind.IO(err)
	}
	return replyCommits(ctx, repo, stdout)
}

// Have replies the base commits --repo holds (none when it does not
// exist yet).
func Have(ctx context.Context, args []string, stdout io.Writer) error {
	fs := subcmd.FlagSet("git-have")
	repoArg := fs.String("repo", "", "the project's repository on the node")
	if err := subcmd.Parse(fs, args); err != nil {
		return err
	}
	repo, err := repoFlag("git-have", *repoArg)
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(repo, "objects")); errors.Is(err, os.ErrNotExist) {
		return subcmd.PrintJSON(stdout, wire.GitReply{Commits: []string{}})
	}
	return replyCommits(ctx, repo, stdout)
}

func replyCommits(ctx context.Context, repo string, stdout io.Writer) error {
	out, err := gitresult.RunGit(ctx, repo, nil, nil, "for-each-ref", "--format=%(objectname)", gitresult.BaseRefPrefix)
	if err != nil {
		return errkind.IO(err)
	}
	reply := wire.GitReply{Commits: []string{}}
	for _, l := range strings.Fields(string(out)) {
		reply.Commits = append(reply.Commits, l)
	}
	return subcmd.PrintJSON(stdout, reply)
}

// Spare makes one spare checkout of --base from --repo, unless --max
// are ready; the supervisor starts it in the background after a launch.
func Spare(ctx context.Context, args []string, stdout io.Writer) error {
	fs := subcmd.FlagSet("git-spare")
	repoArg := fs.String("repo", "", "the project's repository on the node")
	base := fs.String("base", "", "the base commit to check out")
	max := fs.Int("max", 1, "how many spares of the base may be ready")
	if err := subcmd.Parse(fs, args); err != nil {
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
	if err := gitresult.MakeSpare(ctx, repo, *base, *max); err != nil {
		return errkind.IO(err)
	}
	return subcmd.PrintJSON(stdout, struct{}{})
}

// Pack writes to --out a pack of the task's result recorded by
// gitresult.SnapshotWorkspace for --dir on --branch, less what --base holds, for the
// controller to fetch (one transfer, bounded by progress) and import into
// the operator's repository.
func Pack(ctx context.Context, args []string, stdout io.Writer) error {
	fs := subcmd.FlagSet("git-pack")
	dirFlag := fs.String("dir", "", "task directory")
	base := fs.String("base", "", "the task's base commit")
	branch := fs.String("branch", "", "the task's branch (dispatch/<project>/<ID>)")
	outFlag := fs.String("out", "", "where to write the pack")
	if err := subcmd.Parse(fs, args); err != nil {
		return err
	}
	dir, err := subcmd.DirFlag("git-pack", *dirFlag)
	if err != nil {
		return err
	}
	outPath, err := subcmd.DirFlag("git-pack", *outFlag)
	if err != nil {
		return err
	}
	if !wire.IsCommitID(*base) {
		return errkind.Usagef("git-pack: --base %q is not a full commit id", *base)
	}
	if !strings.HasPrefix(*branch, "dispatch/") || strings.Contains(*branch, "..") {
		return errkind.Usagef("git-pack: --branch %q is not a dispatch/ branch", *branch)
	}
	gitDir, err := gitresult.SnapshotDir(dir)
	if err != nil {
		return errkind.IO(err)
	}
	env := []string{"GIT_DIR=" + gitDir}
	c, err := gitresult.RunGit(ctx, "/", env, nil, "rev-parse", "--verify", "--quiet", "refs/heads/"+*branch+"^{commit}")
	if err != nil {
		return &errkind.Error{Kind: wire.KindNotFound, Err: fmt.Errorf("git-pack: no result recorded for %s in %s", *branch, dir)}
	}
	commit := strings.TrimSpace(string(c))
	if _, err := gitresult.RunGit(ctx, "/", env, nil, "merge-base", "--is-ancestor", *base, commit); err != nil {
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
	cmd.Env = append(gitresult.GitEnv(), env...)
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
	return subcmd.PrintJSON(stdout, wire.PackReply{Commit: commit, Bytes: fi.Size()})
}
