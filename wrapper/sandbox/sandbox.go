package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/egress"
	"github.com/dispatch-tool/dispatch/wrapper/taskfiles"
)

// The sandbox (issue 20): on Linux, a task's setup and tool run under
// bubblewrap (bwrap), which sees
//
//   - the whole file system read-only (--ro-bind / /), with a fresh /dev
//     and a /proc of its own pid namespace: no other process is visible
//     or can be signalled, the supervisor included;
//   - the node user's home and the node's work_dir hidden under empty
//     tmpfs, and the wrapper's directory (.bin, with the private .ctl
//     records) too, except the directories holding the tool's executable
//     and its installation, bound read-only;
//   - of the work_dir only its own task's output/ (read-write), spec.md
//     (read-only), a private HOME (<task>/home) and, in a git-native
//     project, the node's repo.git (read-only: the checkout borrows its
//     objects);
//   - a private /tmp: the attempt's <task>/tmp bound at /tmp.
//
// It runs with no capabilities (--cap-drop ALL: as root, bwrap would
// otherwise keep them and the task could remount / read-write), in a new
// session (--new-session) and dies with the supervisor (--die-with-parent).
// The environment reaches the tool through bwrap's own environment, never
// its argv. Limits (memory, pids, file size) apply with or without the
// sandbox (see package limits). With launch.json's network "none" it runs in a
// network namespace of its own (--unshare-net): a loopback of its own and
// nothing else; with "allow", the same namespace and a filtering proxy
// (see package egress).

// bwrapBaseArgs are the flags of every bwrap the wrapper runs, the probe's
// included, so that the probe tries what the tasks will need.
var bwrapBaseArgs = []string{"--unshare-pid", "--die-with-parent", "--new-session", "--cap-drop", "ALL"}

// ProbeTimeout bounds the trial run of bwrap.
const ProbeTimeout = 10 * time.Second

var (
	probeOnce  sync.Once
	probeReply wire.SandboxReply
)

// Probe reports, once per process, whether bwrap works here: found
// in the PATH (or /usr/bin) and able to run `true` in a sandbox like the
// tasks' (which needs user namespaces when the node user is not root). A
// recent answer kept beside the wrapper serves (see probecache.go).
func Probe(version string) wire.SandboxReply {
	probeOnce.Do(func() { probeReply = ProbeWithCache(context.Background(), version, false) })
	return probeReply
}

// bwrapPath is where an executable bwrap is: in the PATH, else
// /usr/bin; "" for nowhere.
func bwrapPath() string {
	if path, err := exec.LookPath("bwrap"); err == nil {
		return path
	}
	if fi, err := os.Stat("/usr/bin/bwrap"); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
		return "/usr/bin/bwrap"
	}
	return ""
}

func ProbeBwrap(ctx context.Context) wire.SandboxReply {
	if r := noSandboxOn(runtime.GOOS); r != nil {
		return *r
	}
	path := bwrapPath()
	if path == "" {
		return wire.SandboxReply{Error: "bwrap is not installed", Fix: "apt install bubblewrap (or dnf install bubblewrap)"}
	}
	ctx, cancel := context.WithTimeout(ctx, ProbeTimeout)
	defer cancel()
	args := append([]string{"--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"}, bwrapBaseArgs...)
	cmd := exec.CommandContext(ctx, path, append(args, "--", "true")...)
	cmd.Dir = "/"
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(errb.String())
		if len(msg) > 300 {
			msg = msg[:300] + "…"
		}
		if msg == "" {
			msg = err.Error()
		}
		return wire.SandboxReply{Path: path, Error: "bwrap cannot make a sandbox: " + msg,
			Fix: "allow unprivileged user namespaces: sysctl kernel.unprivileged_userns_clone=1 (Debian), or kernel.apparmor_restrict_unprivileged_userns=0 (Ubuntu 24.04)"}
	}
	return wire.SandboxReply{Sandbox: wire.SandboxBwrap, Path: path}
}

// Spec is what one attempt's sandbox shows of the node.
type Spec struct {
	Bwrap string
	// Tmp is bound at /tmp; hide are covered by empty tmpfs (parents
	// first); ro are bound read-only over them; rw are bound read-write
	// (the workspace, HOME); roFiles read-only (spec.md).
	Tmp  string
	hide []string
	Ro   []string
	Rw   []string
	// Paths are the node's sandbox_paths, bound last with --ro-bind-try
	// or --bind-try (bwrap skips a missing source).
	Paths []pathBind
	// NoNetwork runs it in a network namespace of its own (--unshare-net).
	NoNetwork bool
	// Net, with a network allow list, is how net-init runs first.
	Net *Net
}

// Net is the sandbox's side of a network allow list: dir
// (<task>/net, holding the proxy's socket) bound read-only, exe (this
// binary) bound at dir/init, which runs net-init with port and forwards.
type Net struct {
	Dir, Exe string
	Port     int
	Forwards []string
}

// pathBind binds src at dst, read-write when rw. name is the path as
// sandbox_paths gives it, on the bind at its own place; missing is set
// when src is not on the node (bwrap skips it).
type pathBind struct {
	src, Dst string
	rw       bool
	name     string
	missing  bool
}

// Args is bwrap's argv (without the program) running argv in dir.
func (sp *Spec) Args(dir string, argv []string) []string {
	a := []string{sp.Bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--bind", sp.Tmp, "/tmp"}
	for _, h := range sp.hide {
		a = append(a, "--tmpfs", h)
	}
	for _, p := range sp.Ro {
		a = append(a, "--ro-bind", p, p)
	}
	for _, p := range sp.Rw {
		a = append(a, "--bind", p, p)
	}
	for _, b := range sp.Paths {
		flag := "--ro-bind-try"
		if b.rw {
			flag = "--bind-try"
		}
		a = append(a, flag, b.src, b.Dst)
	}
	if n := sp.Net; n != nil {
		init := filepath.Join(n.Dir, egress.FileNetInit)
		a = append(a, "--ro-bind", n.Dir, n.Dir, "--ro-bind", n.Exe, init)
		argv = egress.NetInitArgs(init, filepath.Join(n.Dir, egress.FileNetSock), n.Port, n.Forwards, argv)
	}
	a = append(a, bwrapBaseArgs...)
	if sp.NoNetwork {
		a = append(a, "--unshare-net")
	}
	a = append(a, "--chdir", dir, "--")
	return append(a, argv...)
}

// Under reports whether p is root or lies below it.
func Under(p, root string) bool {
	return p == root || strings.HasPrefix(p, strings.TrimSuffix(root, "/")+"/")
}

// NewSpec lays out the sandbox of the attempt in TaskDir. WorkDir
// is the node's work_dir, homes the node user's home directories, exeDir
// the wrapper's directory (hidden when it is the installed .bin), repo a
// git-native project's repo.git ("" for none).
func NewSpec(bwrap, taskDir, workDir string, homes []string, exeDir, repo string) *Spec {
	sp := &Spec{Bwrap: bwrap, Tmp: filepath.Join(taskDir, taskfiles.DirTmp)}
	roots := append([]string{workDir}, homes...)
	if filepath.Base(exeDir) == ".bin" {
		roots = append(roots, exeDir)
	}
	sort.Slice(roots, func(i, j int) bool { return len(roots[i]) < len(roots[j]) })
	for _, r := range roots {
		if r == "" || r == "/" || !filepath.IsAbs(r) || Under(r, "/tmp") {
			continue // under /tmp: hidden by the attempt's own /tmp already
		}
		covered := false
		for _, h := range sp.hide {
			covered = covered || Under(r, h)
		}
		if !covered {
			sp.hide = append(sp.hide, r)
		}
	}
	if repo != "" {
		sp.Ro = append(sp.Ro, repo)
	}
	sp.Ro = append(sp.Ro, filepath.Join(taskDir, taskfiles.FileSpec))
	sp.Rw = []string{filepath.Join(taskDir, taskfiles.DirOutput), filepath.Join(taskDir, taskfiles.DirHome)}
	return sp
}

// OpenPaths adds the node's sandbox_paths, ~/ expanded with home: each
// at its own place and, when under the home, at the same place in the
// private HOME (where the tools look, $HOME being that one). A path that
// is, holds or lies in the work_dir, or holds a hidden root, is refused;
// missing are the paths that do not exist (bwrap skips them).
func (sp *Spec) OpenPaths(paths *wire.SandboxPaths, home, taskDir, workDir string) (missing []string, err error) {
	if paths == nil {
		return nil, nil
	}
	add := func(list []string, rw bool) error {
		for _, p := range list {
			src, dst := p, ""
			if rest, ok := strings.CutPrefix(p, "~/"); ok {
				if home == "" {
					return fmt.Errorf("sandbox_paths: %s: the node user has no home", p)
				}
				src, dst = filepath.Join(home, rest), filepath.Join(taskDir, taskfiles.DirHome, rest)
			}
			if Under(src, workDir) || Under(workDir, src) {
				return fmt.Errorf("sandbox_paths: %s (%s) overlaps the work_dir %s", p, src, workDir)
			}
			for _, h := range sp.hide {
				if Under(h, src) {
					return fmt.Errorf("sandbox_paths: %s (%s) would open all of %s, which the sandbox hides", p, src, h)
				}
			}
			_, err := os.Stat(src)
			if err != nil {
				missing = append(missing, src)
			}
			sp.Paths = append(sp.Paths, pathBind{src: src, Dst: src, rw: rw, name: p, missing: err != nil})
			if dst != "" {
				sp.Paths = append(sp.Paths, pathBind{src: src, Dst: dst, rw: rw})
			}
		}
		return nil
	}
	if err := add(paths.RO, false); err != nil {
		return nil, err
	}
	return missing, add(paths.RW, true)
}

// hidden reports whether p is out of the sandbox's sight.
func (sp *Spec) hidden(p string) bool {
	if Under(p, "/tmp") {
		return true
	}
	for _, h := range sp.hide {
		if Under(p, h) {
			return true
		}
	}
	return false
}

// ExposeTool binds read-only the directories holding the tool's
// executable path: the directory of the name found in the PATH and that
// of the file it links to or, for an npm package
// (<prefix>/lib/node_modules/...), the whole prefix (its bin/ holds node,
// its lib/ the package), or of a local one (<dir>/node_modules/...) the
// whole node_modules. A directory that is itself a hidden root (the
// home) or holds the work_dir is never exposed: the tool must be
// installed elsewhere.
func (sp *Spec) ExposeTool(path, workDir string) error {
	if !sp.hidden(path) {
		if real, err := filepath.EvalSymlinks(path); err == nil && sp.hidden(real) {
			return sp.expose(filepath.Dir(real), workDir)
		}
		return nil
	}
	dirs := []string{filepath.Dir(path)}
	if real, err := filepath.EvalSymlinks(path); err == nil && real != path {
		if i := strings.Index(real, "/lib/node_modules/"); i > 0 {
			dirs = append(dirs, real[:i])
		} else if i := strings.Index(real, "/node_modules/"); i > 0 {
			// A local install (<dir>/node_modules/.bin): the whole
			// node_modules, which holds the package's dependencies
			// (codex's native binary is one).
			dirs = append(dirs, real[:i+len("/node_modules")])
		} else {
			dirs = append(dirs, filepath.Dir(real))
		}
	}
	for _, d := range dirs {
		if err := sp.expose(d, workDir); err != nil {
			return err
		}
	}
	return nil
}

func (sp *Spec) expose(dir, workDir string) error {
	for _, v := range append(append([]string(nil), sp.Rw...), sp.Ro...) {
		if Under(dir, v) {
			return nil // bound in already: the workspace, the private HOME
		}
	}
	if Under(dir, "/tmp") {
		return fmt.Errorf("the tool lies in %s, under /tmp, which the sandbox replaces with the attempt's own; install it elsewhere (e.g. /usr/local/bin, ~/.local/bin), or set sandbox: off for the task or the node", dir)
	}
	if !sp.hidden(dir) {
		return nil
	}
	for _, h := range sp.hide {
		if dir == h {
			return fmt.Errorf("the tool lies directly in %s, which the sandbox hides; install it in a directory of its own (e.g. ~/.local/bin)", dir)
		}
	}
	if Under(workDir, dir) {
		return fmt.Errorf("the tool's directory %s holds the work_dir %s, which the sandbox hides", dir, workDir)
	}
	for _, r := range sp.Ro {
		if Under(dir, r) {
			return nil
		}
	}
	sp.Ro = append([]string{dir}, sp.Ro...)
	return nil
}

// NodeHomes are the node user's home directories: $HOME and the password
// file's, when they differ. One that does not exist (a service user made
// without a home, like `useradd -M`) holds nothing to hide, and bwrap
// could not make its mount point on a read-only /.
func NodeHomes() []string {
	var out []string
	if h := os.Getenv("HOME"); h != "" && filepath.IsAbs(h) {
		out = append(out, filepath.Clean(h))
	}
	if u, err := user.Current(); err == nil && u.HomeDir != "" && filepath.IsAbs(u.HomeDir) {
		if h := filepath.Clean(u.HomeDir); len(out) == 0 || out[0] != h {
			out = append(out, h)
		}
	}
	return slices.DeleteFunc(out, func(h string) bool {
		_, err := os.Lstat(h)
		return errors.Is(err, fs.ErrNotExist)
	})
}

// Env is the tool's environment in the sandbox: its HOME is the
// attempt's own, its TMPDIR the private /tmp; the variables of unset are
// unset (an agent CLI's directory variable: it reads the copies of its
// files in its private HOME).
func Env(env []string, taskDir string, unset ...string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		if k, _, _ := strings.Cut(kv, "="); k == "HOME" || k == "TMPDIR" || slices.Contains(unset, k) {
			continue
		}
		out = append(out, kv)
	}
	return append(out, "HOME="+filepath.Join(taskDir, taskfiles.DirHome), "TMPDIR=/tmp")
}

// RefusedNote is what a failed attempt's error adds when the allow list
// refused destinations: a tool that could not reach what it needed fails
// in its own words (an auth error for a 403, a timeout), and this says
// why, with the line that lets it (issue 32): the whole setting when the
// list was an agent's default (byDefault), else the entries to add. The
// list is the supervisor's own, not read from the task's output.
func RefusedNote(refused []string, byDefault bool) string {
	if len(refused) == 0 {
		return ""
	}
	const show = 3
	list := strings.Join(refused[:min(show, len(refused))], ", ")
	if len(refused) > show {
		list += fmt.Sprintf(" and %d more", len(refused)-show)
	}
	var quoted []string
	for _, r := range refused {
		if r != egress.RefusedMalformed && len(quoted) < egress.MaxRefusalsNamed {
			quoted = append(quoted, strconv.Quote(r))
		}
	}
	if len(quoted) == 0 {
		return "; the network allow list refused " + list + " (see task.log)"
	}
	entries := strings.Join(quoted, ", ")
	if byDefault {
		return "; the sandbox's network refused " + list + " (under the sandbox an agent reaches only its provider's API unless told otherwise; see task.log); " +
			"to allow it, add this line to project.yaml, the spec's front matter or the node in nodes.yaml: network: {allow: [" + entries + "]}"
	}
	return "; the network allow list refused " + list + " (see task.log); to allow it, add to the task's network: {allow: [...]} the entries " + entries
}
