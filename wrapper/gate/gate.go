package gate

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/dispatch-tool/dispatch/internal/filetree"
	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/gitresult"
	"github.com/dispatch-tool/dispatch/wrapper/limits"
	"github.com/dispatch-tool/dispatch/wrapper/proc"
	"github.com/dispatch-tool/dispatch/wrapper/sandbox"
	"github.com/dispatch-tool/dispatch/wrapper/taskfiles"
	"github.com/dispatch-tool/dispatch/wrapper/tree"
)

// FileLog, in the task directory, is what the gate's setup and command
// printed (its directories are taskfiles.DirGate*).
const FileLog = "gate.log"

// exitNotFound is the shell's exit status for a command not found.
const exitNotFound = 127

// Attempt is what a gate run needs of its attempt, and all it touches.
type Attempt struct {
	Dir     string       // the task directory
	Launch  *wire.Launch // launch.json: its gate, setup, node and log limit
	Sandbox *sandbox.Spec
	Env     []string  // the tool's environment
	Log     io.Writer // task.log: the gate's progress lines
	Logger  *slog.Logger
	// Stopping reports whether the attempt is being stopped.
	Stopping func() bool
	// Start starts cmd as the attempt's child, under its limits and their
	// watchdog, with its output to out; tree.ErrStopped once a stop has
	// been asked for.
	Start func(cmd *exec.Cmd, out io.Writer) (*proc.Proc, error)
}

// Run runs launch.json's gate on the attempt's result, once the tool
// has ended well and its processes are gone: in a fresh copy of the
// result (the commit, git-native; output/ otherwise), the launch's setup
// first, then the command, each by /bin/sh -c under the attempt's sandbox
// and limits, within the gate's timeout. A tree already gated by the same
// command (launch.json's known results) is not gated again. The result
// goes to the supervisor's private record, where `status` reads it.
func Run(s *Attempt, out, commit string) *wire.GateResult {
	g := s.Launch.Gate
	dir := filepath.Join(s.Dir, taskfiles.DirGate)
	tree, err := s.checkout(out, commit, dir)
	if err != nil {
		return &wire.GateResult{Error: "the gate's copy of the result could not be made: " + err.Error()}
	}
	if r := Known(g.Known, tree); r != nil {
		fmt.Fprintf(s.Log, "dispatch-wrapper: gate: this tree (%s) was gated before: %s\n", tree, verdict(r))
		return r
	}
	if err := s.scratch(); err != nil {
		return &wire.GateResult{Tree: tree, Error: "the gate's HOME and TMPDIR could not be made: " + err.Error()}
	}
	glog, err := taskfiles.CreateTaskLog(filepath.Join(s.Dir, FileLog), s.Launch.LogLimitBytes)
	if err != nil {
		return &wire.GateResult{Tree: tree, Error: err.Error()}
	}
	defer glog.Close()
	fmt.Fprintf(s.Log, "dispatch-wrapper: gate: %s\n", g.Command)
	begun := time.Now()
	res := &wire.GateResult{Tree: tree}
	var timedOut atomic.Bool
	timeout := time.Duration(g.TimeoutSeconds * float64(time.Second))
	deadline := time.Now().Add(timeout)
	for _, step := range []struct{ what, command string }{{"setup", s.Launch.Setup}, {"gate", g.Command}} {
		if step.command == "" {
			continue
		}
		code, sig, err := s.step(dir, step.command, glog, time.Until(deadline), &timedOut)
		res.ExitCode = code
		res.Error, res.Missing = stepVerdict(stepEnd{What: step.what, Code: code, Sig: sig, Err: err,
			TimedOut: timedOut.Load(), Stopping: s.Stopping(), Timeout: timeout, Node: s.Launch.Node})
		if res.Error != "" {
			break
		}
	}
	res.Passed = res.Error == ""
	res.Seconds = time.Since(begun).Seconds()
	if tail, err := glog.ReadTail(wire.GateTailBytes); err == nil {
		res.OutputTail = lastLines(string(tail), wire.GateTailLines)
	}
	fmt.Fprintf(s.Log, "dispatch-wrapper: gate: %s in %.1fs\n", verdict(res), res.Seconds)
	return res
}

// statusGateTail is what status.json keeps of the gate's output: it must
// stay readable (taskfiles.MaxControlFile) whatever the gate printed; the whole tail
// is in the private record, which is what `status` reports.
const statusGateTail = 2 << 10

// Known is the result of tree in known (launch.json's gate results of
// trees gated before), marked reused; nil when tree was not gated.
func Known(known []wire.GateResult, tree string) *wire.GateResult {
	for _, k := range known {
		if k.Tree == tree {
			r := k
			r.Reused = true
			return &r
		}
	}
	return nil
}

// stepEnd is how one command of the gate (setup, then the gate command)
// ended.
type stepEnd struct {
	What     string // "setup" or "gate"
	Code     int
	Sig      syscall.Signal
	Err      error // it could not start
	TimedOut bool
	Stopping bool // the attempt is being stopped
	Timeout  time.Duration
	Node     string
}

// stepVerdict is what the gate result says of a step: "" when it passed;
// missing when the command was not found (a node to fix, not a result).
func stepVerdict(e stepEnd) (msg string, missing bool) {
	switch {
	case e.Err != nil:
		return fmt.Sprintf("%s could not start: %v", e.What, e.Err), false
	case e.TimedOut:
		return fmt.Sprintf("timed out after %s", e.Timeout), false
	case e.Stopping:
		return "stopped", false
	case e.What == "setup" && (e.Code != 0 || e.Sig != 0):
		return "setup failed in the gate's copy: " + proc.ExitError(e.Code, e.Sig), false
	case e.Code == exitNotFound && e.Sig == 0:
		return "the gate command was not found (exit 127): install it on node " + e.Node + " or fix gate: in project.yaml", true
	case e.Code != 0 || e.Sig != 0:
		return proc.ExitError(e.Code, e.Sig), false
	}
	return "", false
}

// ForStatus is r as status.json holds it: its output's tail cut short.
func ForStatus(r *wire.GateResult) *wire.GateResult {
	if r == nil {
		return nil
	}
	c := *r
	if len(c.OutputTail) > statusGateTail {
		c.OutputTail = c.OutputTail[len(c.OutputTail)-statusGateTail:]
	}
	return &c
}

// verdict is r in a few words, for task.log.
func verdict(r *wire.GateResult) string {
	if r.Passed {
		return "passed"
	}
	return "failed: " + r.Error
}

// step runs one command of the gate in dir with its output to log; a
// timer kills its process group when wait is over (timedOut set).
func (s *Attempt) step(dir, command string, log *taskfiles.TaskLog, wait time.Duration, timedOut *atomic.Bool) (int, syscall.Signal, error) {
	if wait <= 0 {
		timedOut.Store(true)
		return -1, 0, nil
	}
	cmd := &exec.Cmd{Path: "/bin/sh", Args: []string{"/bin/sh", "-c", command}, Env: s.env(), Dir: dir}
	if s.Sandbox != nil {
		cmd = s.sandboxed(cmd, dir)
	}
	p, err := s.Start(cmd, log)
	if errors.Is(err, tree.ErrStopped) {
		return -1, 0, nil
	}
	if err != nil {
		return -1, 0, err
	}
	timer := time.AfterFunc(wait, func() {
		timedOut.Store(true)
		if s.Sandbox != nil {
			limits.TermSandboxed(p.Pgid)
		}
		syscall.Kill(-p.Pgid, syscall.SIGKILL)
	})
	defer timer.Stop()
	<-p.Done
	code, sig := p.ExitInfo()
	return code, sig, nil
}

// scratch makes the gate's HOME and TMPDIR afresh, an earlier one
// moved aside (removed by the next attempt's removeOldTmps).
func (s *Attempt) scratch() error {
	for _, name := range []string{taskfiles.DirGateHome, taskfiles.DirGateTmp} {
		p := filepath.Join(s.Dir, name)
		if _, err := os.Lstat(p); err == nil {
			if err := os.Rename(p, fmt.Sprintf("%s%s%d.%d", p, taskfiles.OldTmpSuffix, os.Getpid(), time.Now().UnixNano())); err != nil {
				return err
			}
		}
		if err := os.Mkdir(p, 0o700); err != nil {
			return err
		}
	}
	if s.Sandbox != nil {
		ctx, cancel := context.WithTimeout(context.Background(), sandbox.ProbeTimeout)
		defer cancel()
		if err := sandbox.GitIdentity(ctx, filepath.Join(s.Dir, taskfiles.DirGateHome)); err != nil {
			s.Logger.Warn("no git identity in the gate's HOME", taskfiles.LogKeyErr, err)
		}
	}
	return nil
}

// env is the tool's environment but for the attempt's own TMPDIR
// and (sandboxed) HOME: the gate's.
func (s *Attempt) env() []string {
	env := slices.Clone(s.Env)
	for i, kv := range env {
		switch k, v, _ := strings.Cut(kv, "="); {
		case k == "TMPDIR" && s.Sandbox == nil && v == filepath.Join(s.Dir, taskfiles.DirTmp):
			env[i] = "TMPDIR=" + filepath.Join(s.Dir, taskfiles.DirGateTmp)
		case k == "HOME" && s.Sandbox != nil && v == filepath.Join(s.Dir, taskfiles.DirHome):
			env[i] = "HOME=" + filepath.Join(s.Dir, taskfiles.DirGateHome)
		}
	}
	return env
}

// sandboxed is the supervisor's sandboxed for a gate command: the gate's
// copy is its workspace (read-write) instead of output/, its HOME and /tmp
// its own (the sandbox_paths under ~ bound there as they are in the tool's).
func (s *Attempt) sandboxed(cmd *exec.Cmd, dir string) *exec.Cmd {
	sp := Spec(s.Sandbox, s.Dir, dir)
	argv := append([]string{cmd.Path}, cmd.Args[1:]...)
	return &exec.Cmd{Path: sp.Bwrap, Args: sp.Args(cmd.Dir, argv), Env: cmd.Env, Dir: cmd.Dir}
}

// Spec is the attempt's sandbox (of task directory taskDir) as a gate
// command in dir sees it.
func Spec(attempt *sandbox.Spec, taskDir, dir string) sandbox.Spec {
	sp := *attempt
	home, gateHome := filepath.Join(taskDir, taskfiles.DirHome), filepath.Join(taskDir, taskfiles.DirGateHome)
	sp.Rw = []string{dir, gateHome}
	sp.Tmp = filepath.Join(taskDir, taskfiles.DirGateTmp)
	sp.Paths = slices.Clone(sp.Paths)
	for i, b := range sp.Paths {
		if rest, ok := strings.CutPrefix(b.Dst, home+"/"); ok {
			sp.Paths[i].Dst = filepath.Join(gateHome, rest)
		}
	}
	return sp
}

// checkout makes dir a fresh copy of the attempt's result and returns
// what identifies its tree: a checkout of commit from the attempt's
// snapshot repository (git-native), or a copy of out.
func (s *Attempt) checkout(out, commit, dir string) (string, error) {
	if err := os.RemoveAll(dir); err != nil {
		return "", err
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return "", err
	}
	if s.Launch.Repo != nil {
		gitDir, err := gitresult.SnapshotDir(s.Dir)
		if err != nil {
			return "", err
		}
		ctx := context.Background()
		tree, err := gitresult.RunGit(ctx, "/", nil, nil, "--git-dir", gitDir, "rev-parse", "--verify", commit+"^{tree}")
		if err != nil {
			return "", err
		}
		index := []string{"GIT_INDEX_FILE=" + filepath.Join(s.Dir, taskfiles.DirTmp, ".gate-index")}
		defer os.Remove(filepath.Join(s.Dir, taskfiles.DirTmp, ".gate-index"))
		if _, err := gitresult.RunGit(ctx, "/", index, nil, "--git-dir", gitDir, "--work-tree", dir, "read-tree", commit); err != nil {
			return "", err
		}
		if _, err := gitresult.RunGit(ctx, "/", index, nil, "--git-dir", gitDir, "--work-tree", dir, "checkout-index", "-a", "-f"); err != nil {
			return "", err
		}
		return "git:" + strings.TrimSpace(string(tree)), nil
	}
	if err := tree.CopyTree(out, dir, s.Stopping, func(string) {}); err != nil {
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
