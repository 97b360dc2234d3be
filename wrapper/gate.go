package wrapper

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/dispatch-tool/dispatch/wrapper/sandbox"

	"github.com/dispatch-tool/dispatch/wrapper/limits"

	"github.com/dispatch-tool/dispatch/wrapper/taskfiles"

	"github.com/dispatch-tool/dispatch/wrapper/gitresult"

	"github.com/dispatch-tool/dispatch/wrapper/tree"

	"github.com/dispatch-tool/dispatch/wrapper/proc"

	"github.com/dispatch-tool/dispatch/internal/filetree"
	"github.com/dispatch-tool/dispatch/wire"
)

// Files of a gate run in the task directory (its directories are
// taskfiles.DirGate*).
const (
	// fileGateLog is what setup and the gate command printed.
	fileGateLog = "gate.log"
)

// gateExitNotFound is the shell's exit status for a command not found.
const gateExitNotFound = 127

// runGate runs launch.json's gate on the attempt's result, once the tool
// has ended well and its processes are gone: in a fresh copy of the
// result (the commit, git-native; output/ otherwise), the launch's setup
// first, then the command, each by /bin/sh -c under the attempt's sandbox
// and limits, within the gate's timeout. A tree already gated by the same
// command (launch.json's known results) is not gated again. The result
// goes to the supervisor's private record, where `status` reads it.
func (s *supervisor) runGate(out, commit string) *wire.GateResult {
	g := s.launch.Gate
	dir := filepath.Join(s.dir, taskfiles.DirGate)
	tree, err := s.gateCheckout(out, commit, dir)
	if err != nil {
		return &wire.GateResult{Error: "the gate's copy of the result could not be made: " + err.Error()}
	}
	for _, k := range g.Known {
		if k.Tree == tree {
			r := k
			r.Reused = true
			fmt.Fprintf(s.tlog, "dispatch-wrapper: gate: this tree (%s) was gated before: %s\n", tree, gateVerdict(&r))
			return &r
		}
	}
	if err := s.gateScratch(); err != nil {
		return &wire.GateResult{Tree: tree, Error: "the gate's HOME and TMPDIR could not be made: " + err.Error()}
	}
	glog, err := taskfiles.CreateTaskLog(filepath.Join(s.dir, fileGateLog), s.launch.LogLimitBytes)
	if err != nil {
		return &wire.GateResult{Tree: tree, Error: err.Error()}
	}
	defer glog.Close()
	fmt.Fprintf(s.tlog, "dispatch-wrapper: gate: %s\n", g.Command)
	begun := time.Now()
	res := &wire.GateResult{Tree: tree}
	var timedOut atomic.Bool
	deadline := time.Now().Add(seconds(g.TimeoutSeconds))
	for _, step := range []struct{ what, command string }{{"setup", s.launch.Setup}, {"gate", g.Command}} {
		if step.command == "" {
			continue
		}
		code, sig, err := s.gateStep(dir, step.command, glog, time.Until(deadline), &timedOut)
		res.ExitCode = code
		switch {
		case err != nil:
			res.Error = fmt.Sprintf("%s could not start: %v", step.what, err)
		case timedOut.Load():
			res.Error = fmt.Sprintf("timed out after %s", seconds(g.TimeoutSeconds))
		case s.stopping():
			res.Error = "stopped"
		case step.what == "setup" && (code != 0 || sig != 0):
			res.Error = "setup failed in the gate's copy: " + proc.ExitError(code, sig)
		case code == gateExitNotFound && sig == 0:
			res.Error, res.Missing = "the gate command was not found (exit 127): install it on node "+s.launch.Node+" or fix gate: in project.yaml", true
		case code != 0 || sig != 0:
			res.Error = proc.ExitError(code, sig)
		}
		if res.Error != "" {
			break
		}
	}
	res.Passed = res.Error == ""
	res.Seconds = time.Since(begun).Seconds()
	if tail, err := glog.ReadTail(wire.GateTailBytes); err == nil {
		res.OutputTail = lastLines(string(tail), wire.GateTailLines)
	}
	fmt.Fprintf(s.tlog, "dispatch-wrapper: gate: %s in %.1fs\n", gateVerdict(res), res.Seconds)
	return res
}

// statusGateTail is what status.json keeps of the gate's output: it must
// stay readable (taskfiles.MaxControlFile) whatever the gate printed; the whole tail
// is in the private record, which is what `status` reports.
const statusGateTail = 2 << 10

// statusGate is r as status.json holds it: its output's tail cut short.
func statusGate(r *wire.GateResult) *wire.GateResult {
	if r == nil {
		return nil
	}
	c := *r
	if len(c.OutputTail) > statusGateTail {
		c.OutputTail = c.OutputTail[len(c.OutputTail)-statusGateTail:]
	}
	return &c
}

func gateVerdict(r *wire.GateResult) string {
	if r.Passed {
		return "passed"
	}
	return "failed: " + r.Error
}

// gateStep runs one command of the gate in dir with its output to log; a
// timer kills its process group when wait is over (timedOut set).
func (s *supervisor) gateStep(dir, command string, log *taskfiles.TaskLog, wait time.Duration, timedOut *atomic.Bool) (int, syscall.Signal, error) {
	if wait <= 0 {
		timedOut.Store(true)
		return -1, 0, nil
	}
	cmd := &exec.Cmd{Path: "/bin/sh", Args: []string{"/bin/sh", "-c", command}, Env: s.gateEnv(), Dir: dir}
	if s.sandbox != nil {
		cmd = s.gateSandboxed(cmd, dir)
	}
	cmd, err := s.limited(cmd)
	if err != nil {
		return -1, 0, err
	}
	p, err := s.startChildTo(cmd, log)
	if errors.Is(err, tree.ErrStopped) {
		return -1, 0, nil
	}
	if err != nil {
		return -1, 0, err
	}
	s.background(func() { s.watchLimits(p) })
	s.setTool(p)
	timer := time.AfterFunc(wait, func() {
		timedOut.Store(true)
		if s.sandbox != nil {
			limits.TermSandboxed(p.Pgid)
		}
		syscall.Kill(-p.Pgid, syscall.SIGKILL)
	})
	defer timer.Stop()
	<-p.Done
	code, sig := p.ExitInfo()
	return code, sig, nil
}

// gateScratch makes the gate's HOME and TMPDIR afresh, an earlier one
// moved aside (removed by the next attempt's removeOldTmps).
func (s *supervisor) gateScratch() error {
	for _, name := range []string{taskfiles.DirGateHome, taskfiles.DirGateTmp} {
		p := filepath.Join(s.dir, name)
		if _, err := os.Lstat(p); err == nil {
			if err := os.Rename(p, fmt.Sprintf("%s%s%d.%d", p, taskfiles.OldTmpSuffix, os.Getpid(), time.Now().UnixNano())); err != nil {
				return err
			}
		}
		if err := os.Mkdir(p, 0o700); err != nil {
			return err
		}
	}
	if s.sandbox != nil {
		ctx, cancel := context.WithTimeout(context.Background(), sandbox.ProbeTimeout)
		defer cancel()
		if err := sandbox.GitIdentity(ctx, filepath.Join(s.dir, taskfiles.DirGateHome)); err != nil {
			s.logger.Warn("no git identity in the gate's HOME", taskfiles.LogKeyErr, err)
		}
	}
	return nil
}

// gateEnv is the tool's environment but for the attempt's own TMPDIR
// and (sandboxed) HOME: the gate's.
func (s *supervisor) gateEnv() []string {
	env := slices.Clone(s.env)
	for i, kv := range env {
		switch k, v, _ := strings.Cut(kv, "="); {
		case k == "TMPDIR" && s.sandbox == nil && v == filepath.Join(s.dir, taskfiles.DirTmp):
			env[i] = "TMPDIR=" + filepath.Join(s.dir, taskfiles.DirGateTmp)
		case k == "HOME" && s.sandbox != nil && v == filepath.Join(s.dir, taskfiles.DirHome):
			env[i] = "HOME=" + filepath.Join(s.dir, taskfiles.DirGateHome)
		}
	}
	return env
}

// gateSandboxed is sandboxed for a gate command: the gate's copy is its
// workspace (read-write) instead of output/, its HOME and /tmp its own
// (the sandbox_paths under ~ bound there as they are in the tool's).
func (s *supervisor) gateSandboxed(cmd *exec.Cmd, dir string) *exec.Cmd {
	sp := s.gateSpec(dir)
	argv := append([]string{cmd.Path}, cmd.Args[1:]...)
	return &exec.Cmd{Path: sp.Bwrap, Args: sp.Args(cmd.Dir, argv), Env: cmd.Env, Dir: cmd.Dir}
}

// gateSpec is the attempt's sandbox as a gate command in dir sees it.
func (s *supervisor) gateSpec(dir string) sandbox.Spec {
	sp := *s.sandbox
	home, gateHome := filepath.Join(s.dir, taskfiles.DirHome), filepath.Join(s.dir, taskfiles.DirGateHome)
	sp.Rw = []string{dir, gateHome}
	sp.Tmp = filepath.Join(s.dir, taskfiles.DirGateTmp)
	sp.Paths = slices.Clone(sp.Paths)
	for i, b := range sp.Paths {
		if rest, ok := strings.CutPrefix(b.Dst, home+"/"); ok {
			sp.Paths[i].Dst = filepath.Join(gateHome, rest)
		}
	}
	return sp
}

// gateCheckout makes dir a fresh copy of the attempt's result and returns
// what identifies its tree: a checkout of commit from the attempt's
// snapshot repository (git-native), or a copy of out.
func (s *supervisor) gateCheckout(out, commit, dir string) (string, error) {
	if err := os.RemoveAll(dir); err != nil {
		return "", err
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return "", err
	}
	if s.launch.Repo != nil {
		gitDir, err := gitresult.SnapshotDir(s.dir)
		if err != nil {
			return "", err
		}
		ctx := context.Background()
		tree, err := gitresult.RunGit(ctx, "/", nil, nil, "--git-dir", gitDir, "rev-parse", "--verify", commit+"^{tree}")
		if err != nil {
			return "", err
		}
		index := []string{"GIT_INDEX_FILE=" + filepath.Join(s.dir, taskfiles.DirTmp, ".gate-index")}
		defer os.Remove(filepath.Join(s.dir, taskfiles.DirTmp, ".gate-index"))
		if _, err := gitresult.RunGit(ctx, "/", index, nil, "--git-dir", gitDir, "--work-tree", dir, "read-tree", commit); err != nil {
			return "", err
		}
		if _, err := gitresult.RunGit(ctx, "/", index, nil, "--git-dir", gitDir, "--work-tree", dir, "checkout-index", "-a", "-f"); err != nil {
			return "", err
		}
		return "git:" + strings.TrimSpace(string(tree)), nil
	}
	if err := tree.CopyTree(out, dir, s.stopping, func(string) {}); err != nil {
		return "", err
	}
	return treeDigest(dir)
}

// treeDigest identifies the tree at dir: sha256 of every entry's path
// with, for a regular file, its permissions and content's sha256; for a
// link, its target's sha256; for a directory, its permissions. A link or
// a directory changes what the gate sees as a file does: two trees that
// differ only in one are not the same tree.
func treeDigest(dir string) (string, error) {
	h := sha256.New()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		switch t := d.Type(); {
		case t&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256([]byte(target))
			fmt.Fprintf(h, "%s\x00l\x00%s\n", rel, hex.EncodeToString(sum[:]))
		case t.IsDir():
			fi, err := d.Info()
			if err != nil {
				return err
			}
			fmt.Fprintf(h, "%s\x00d%o\x00\n", rel, fi.Mode().Perm())
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	err = filetree.WalkSums(dir, func(rel string, mode fs.FileMode, sum string) {
		fmt.Fprintf(h, "%s\x00%o\x00%s\n", rel, mode.Perm(), sum)
	})
	if err != nil {
		return "", err
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

// lastLines is the last n lines of s.
func lastLines(s string, n int) string {
	s = strings.TrimRight(s, "\n")
	i := len(s)
	for range n {
		j := strings.LastIndexByte(s[:i], '\n')
		if j < 0 {
			return s
		}
		i = j
	}
	return s[i+1:]
}
