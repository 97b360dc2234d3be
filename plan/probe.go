package plan

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/internal/termtext"
	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/policy"
	"github.com/dispatch-tool/dispatch/wire"
)

// executable is the program a tool runs (its command's first word).
func executable(cfg *nodes.Config, tool string) (string, error) {
	argv, _, _, err := policy.ToolCommand(cfg, tool, "", false, false, "")
	if err != nil {
		return "", err
	}
	return argv[0], nil
}

// NeededExecutables lists, per node, the executables the plan's tasks run
// there.
func NeededExecutables(cfg *nodes.Config, rows []Row) map[string][]string {
	need := map[string][]string{}
	for _, r := range rows {
		for _, n := range r.Nodes {
			if exe, err := executable(cfg, r.Tools[n]); err == nil && !slices.Contains(need[n], exe) {
				need[n] = append(need[n], exe)
			}
			if r.Git && !slices.Contains(need[n], "git") {
				need[n] = append(need[n], "git")
			}
		}
	}
	return need
}

// Probe is what a node said of the executables asked for: Found by
// name, or Err when it could not be asked (unreachable, unknown host key).
type Probe struct {
	Found map[string]bool
	Err   string
	// Root is set when the node's user is root (asked only of nodes
	// where claude would run with its dangerous flag, which it refuses
	// as root).
	Root bool
	// Sandbox is what the node's wrapper said of its sandbox; nil when
	// it was not asked (no wrapper of this controller installed there).
	Sandbox *wire.SandboxReply
	// SandboxRefused says, by executable, why the node's sandbox cannot
	// run it (a tool under /tmp): the wrapper's answer, where it was
	// asked and the sandbox works there.
	SandboxRefused map[string]string
}

// claudeRefusesRoot reports whether claude on node n would run with
// --dangerously-skip-permissions as root, which it refuses, unless the
// api_mode says the node is a sandbox (IS_SANDBOX=1). On a sandbox: on
// node every attempt runs under bwrap, where dispatch sets IS_SANDBOX=1.
func claudeRefusesRoot(cfg *nodes.Config, n nodes.Node, tool string, pr Probe) bool {
	mode := cfg.APIModes[n.APIMode]
	if tool != "claude" || !pr.Root || !(n.Dangerous || mode.Dangerous) || n.Sandbox == nodes.SandboxOn {
		return false
	}
	return mode.Env["IS_SANDBOX"] != "1"
}

// CheckExecutables decides, over what the nodes said, whether every task
// of the plan has a node where its tool's executable is in the PATH. A task
// none of whose nodes has it is a problem (exit 2); a task whose nodes
// could not all be asked, and none of those asked has it, gets a note.
func CheckExecutables(cfg *nodes.Config, rows []Row, probes map[string]Probe) (problems, notes []string) {
	for _, r := range rows {
		var missing, unchecked, asRoot []string
		found := false
		for _, n := range r.Nodes {
			exe, err := executable(cfg, r.Tools[n])
			if err != nil {
				continue
			}
			pr, ok := probes[n]
			node, _ := cfg.Node(n)
			switch {
			case !ok:
				unchecked = append(unchecked, n+" (not asked)")
			case pr.Err != "":
				unchecked = append(unchecked, n+" ("+strings.TrimPrefix(probeReason(pr.Err), "node "+n+" ")+")")
			case !pr.Found[exe]:
				missing = append(missing, fmt.Sprintf("%s (tool %s: no %s in its PATH)", n, r.Tools[n], exe))
			case r.Git && !pr.Found["git"]:
				missing = append(missing, fmt.Sprintf("%s (no git in its PATH: the project's tasks work in git checkouts)", n))
			case claudeRefusesRoot(cfg, node, r.Tools[n], pr):
				asRoot = append(asRoot, n)
			case needsSandbox(r, node) && pr.Sandbox == nil:
				unchecked = append(unchecked, n+" (its sandbox was not asked: no wrapper of this dispatch is installed there yet)")
			case needsSandbox(r, node) && pr.Sandbox.Sandbox != wire.SandboxBwrap:
				missing = append(missing, fmt.Sprintf("%s (sandbox: unavailable: %s; fix: %s)", n, pr.Sandbox.Error, pr.Sandbox.Fix))
			case runsSandboxed(r, node, pr) && pr.SandboxRefused[exe] != "":
				missing = append(missing, fmt.Sprintf("%s (tool %s: %s %s: %s)", n, r.Tools[n], exe, refusedBySandbox, pr.SandboxRefused[exe]))
			default:
				found = true
			}
		}
		what := "task " + r.Task.ID
		if r.Generated {
			what = "the generated " + r.Type + " task " + r.Task.ID
		}
		switch {
		case found:
		case len(unchecked) > 0:
			notes = append(notes, fmt.Sprintf("%s: could not check %s for its tool; it runs there only if the tool is installed", what, strings.Join(unchecked, "; ")))
		case len(asRoot) > 0 && len(missing) == 0:
			problems = append(problems, fmt.Sprintf("%s cannot run anywhere: on %s claude would run as root with --dangerously-skip-permissions (dangerous: true), which it refuses\n"+
				"  fix: log in to the node as another user, set dangerous: false on the node and its api_mode, or set IS_SANDBOX=1 in the api_mode's env if the node is a container or VM you can throw away", what, strings.Join(asRoot, ", ")))
		case len(missing) > 0:
			fix := "install the tool on one of these nodes, or set `tool:` in the spec or on a node (nodes.yaml) to a tool that is installed"
			if r.Git {
				fix = "install git on one of these nodes, or route the project's tasks to nodes that have it; " + fix
			}
			if strings.Contains(strings.Join(missing, ";"), refusedBySandbox) {
				fix = "install the tool outside /tmp, in a directory of its own (e.g. /usr/local/bin, ~/.local/bin), " +
					"set sandbox: off in the spec's front matter or project.yaml (on a node whose sandbox is auto) or on the node, " +
					"or route the task to another node; " + fix
			}
			if strings.Contains(strings.Join(missing, ";"), "sandbox: unavailable") {
				fix = "make the sandbox work on one of these nodes (see its fix; `dispatch nodes check` shows it), set sandbox: off on those nodes' tasks that may run unconfined, or route the task to nodes with sandbox: on or auto; " + fix
			}
			if domain.IsPhaseID(r.Task.ID) {
				fix = "install the tool on one of these nodes, set `tool:` on a node routed for " + r.Type + " (nodes.yaml), write your own " + r.Task.ID + " spec with a tool that is installed, or set `integration: false` in project.yaml"
			}
			problems = append(problems, fmt.Sprintf("%s cannot run anywhere: %s\n  fix: %s", what, strings.Join(missing, "; "), fix))
		}
	}
	return problems, notes
}

// probeReason is why a node could not be asked, on one line: its error
// without the fix it may name (`dispatch nodes check` gives that).
func probeReason(err string) string {
	msg, _, _ := strings.Cut(err, "\n  fix: ")
	return strings.Join(strings.Fields(msg), " ")
}

// refusedBySandbox marks a problem of a tool the node's sandbox cannot run.
const refusedBySandbox = "cannot run in the node's sandbox"

// runsSandboxed reports whether the task of r runs sandboxed on node n as
// far as pr knows: it must, or it may (sandbox: auto) and the sandbox
// works there.
func runsSandboxed(r Row, n nodes.Node, pr Probe) bool {
	c, _, _ := policy.TaskLaunch(r.Task.Sandbox, r.Task.Network, policy.ToolFor(r.Task.Tool, n), n)
	return c.Sandbox == wire.SandboxBwrap ||
		c.Sandbox == wire.SandboxAuto && pr.Sandbox != nil && pr.Sandbox.Sandbox == wire.SandboxBwrap
}

// needsSandbox reports whether the task of r must run sandboxed on node n.
func needsSandbox(r Row, n nodes.Node) bool {
	c, _, _ := policy.TaskLaunch(r.Task.Sandbox, r.Task.Network, policy.ToolFor(r.Task.Tool, n), n)
	return c.Sandbox == wire.SandboxBwrap
}

// ProbeExecutables asks each node in need which of the executables are in
// the PATH a tool gets there: the node user's, or the one the node's
// api_mode sets. It writes nothing on the nodes: the installed wrapper's
// `which` answers where this controller's wrapper is installed (and its
// work_dir is safe), else the node's POSIX shell (`command -v`) does. Nodes
// are asked in parallel, each within timeout.
func ProbeExecutables(ctx context.Context, cfg *nodes.Config, transports map[string]nodes.Transport, w *nodes.Wrappers,
	need map[string][]string, timeout time.Duration) map[string]Probe {
	var mu sync.Mutex
	out := map[string]Probe{}
	var wg sync.WaitGroup
	for name, names := range need {
		n, ok := cfg.Node(name)
		tr := transports[name]
		if !ok || tr == nil || len(names) == 0 {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			pr := probeNode(ctx, cfg, n, tr, w, names, timeout)
			if pr.Err == "" && slices.Contains(names, "claude") && (n.Dangerous || cfg.APIModes[n.APIMode].Dangerous) {
				uctx, cancel := context.WithTimeout(ctx, timeout)
				uid, err := tr.UID(uctx)
				cancel()
				if err != nil {
					pr.Err = "ask for the node user's id: " + err.Error()
				}
				pr.Root = err == nil && uid == 0
			}
			mu.Lock()
			out[name] = pr
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}

// maxRefusal bounds a node's reason for a tool its sandbox cannot run.
const maxRefusal = 500

// clipRunes is s cut to at most n bytes, on a rune boundary.
func clipRunes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = strings.ToValidUTF8(s[:n], "")
	return s + "…"
}

func probeNode(ctx context.Context, cfg *nodes.Config, n nodes.Node, tr nodes.Transport, w *nodes.Wrappers, names []string, timeout time.Duration) Probe {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// Only PATH matters here: no secret leaves the controller for a probe.
	path, setPath := "", false
	if v, ok := cfg.APIModes[n.APIMode].Env["PATH"]; ok {
		if p, err := nodes.ExpandEnv(v, os.LookupEnv); err == nil {
			path, setPath = p, true
		}
	}
	if inst, ok := installedWrapper(ctx, tr, n, w); ok {
		var stdin []byte
		if setPath {
			stdin, _ = json.Marshal(map[string]string{"PATH": path})
		}
		res, err := tr.Exec(ctx, append([]string{inst.Path, "which"}, names...), stdin)
		if err != nil {
			return Probe{Err: nodes.CauseFirst(err).Error()}
		}
		var reply wire.WhichReply
		if res.ExitCode != 0 || json.Unmarshal(res.Stdout, &reply) != nil {
			return Probe{Err: "which: " + policy.ReplyError(res, nil)}
		}
		pr := Probe{Found: map[string]bool{}, Sandbox: reply.Sandbox}
		for name := range reply.Found {
			pr.Found[name] = true
		}
		for name, why := range reply.SandboxRefused {
			if pr.Found[name] && why != "" {
				if pr.SandboxRefused == nil {
					pr.SandboxRefused = map[string]string{}
				}
				// The node's words, printed on a terminal.
				pr.SandboxRefused[name] = termtext.Clean(clipRunes(why, maxRefusal))
			}
		}
		return pr
	}
	// `command -v` prints a path for an executable found in PATH (and a
	// bare word for a builtin or function, which a tool cannot be).
	argv := []string{"/bin/sh", "-c", `for n do p=$(command -v "$n") && case $p in /*) [ -x "$p" ] && [ ! -d "$p" ] && printf '%s\n' "$n";; esac; done; exit 0`, "sh"}
	if setPath {
		argv = append([]string{"/usr/bin/env", "PATH=" + path}, argv...)
	}
	res, err := tr.Exec(ctx, append(argv, names...), nil)
	if err != nil {
		return Probe{Err: nodes.CauseFirst(err).Error()}
	}
	if res.ExitCode != 0 {
		return Probe{Err: "look for the tools: " + policy.ReplyError(res, nil)}
	}
	pr := Probe{Found: map[string]bool{}}
	for _, line := range strings.Split(string(res.Stdout), "\n") {
		if slices.Contains(names, line) {
			pr.Found[line] = true
		}
	}
	return pr
}

// installedWrapper returns this controller's wrapper on node n when it is
// installed there in a safe work_dir, without installing or writing
// anything.
func installedWrapper(ctx context.Context, tr nodes.Transport, n nodes.Node, w *nodes.Wrappers) (nodes.Installed, bool) {
	wd, err := nodes.ExpandHome(ctx, tr, n.WorkDir)
	if err != nil {
		return nodes.Installed{}, false
	}
	version, err := w.Version()
	if err != nil {
		return nodes.Installed{}, false
	}
	inst := nodes.Installed{WorkDir: wd, Path: path.Join(wd, ".bin", "dispatch-wrapper-"+version), Version: version}
	if st, err := tr.Lstat(ctx, inst.Path); err != nil || !st.Mode.IsRegular() {
		return inst, false
	}
	if nodes.CheckWorkDir(ctx, tr, inst) != nil {
		return inst, false
	}
	return inst, true
}
