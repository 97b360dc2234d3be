package plan

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/dispatch-tool/dispatch/control"
	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/policy"
	"github.com/dispatch-tool/dispatch/spec"
	"github.com/dispatch-tool/dispatch/store"
	"github.com/dispatch-tool/dispatch/wrapper"
)

// Row is how one task will be scheduled: its tool and the nodes that may
// take it.
type Row struct {
	Task *spec.Task
	// Type is the task's type; a phase task's is its phase's.
	Type string
	// Generated is set for a phase task the controller writes the spec of.
	Generated bool
	Tools     map[string]string // node → tool
	Nodes     []string
	// Git is set in a git-native project (repo:): its nodes need git.
	Git bool
}

// Error lists tasks that cannot run anywhere, or with a tool nobody
// knows; it is a configuration error (exit 2).
type Error struct {
	Problems []string
}

// BadInput marks a plan that cannot run as the operator's to fix (exit 2).
func (e *Error) BadInput() bool { return true }

func (e *Error) Error() string { return strings.Join(e.Problems, "\n") }

// Plan checks that every task of p — the author's and the phase tasks the
// controller will generate (S99, V01, F01, per project.yaml and so) — can
// run on at least one of the nodes (pin, tags, routes) with a known tool,
// and says where each may go. A phase task's type is its phase's, whether
// the author wrote its spec or not.
func Plan(cfg *nodes.Config, p *spec.Project, only []string, so control.StartOptions) ([]Row, error) {
	var rows []Row
	var problems []string
	opts := projectOptionsFor(cfg, p, so)
	place := func(row *Row, st store.Task) (reasons []string) {
		row.Tools = map[string]string{}
		for _, n := range cfg.Nodes {
			if len(only) > 0 && !slices.Contains(only, n.Name) {
				continue
			}
			if ok, why := policy.Eligible(cfg, &st, n); !ok {
				reasons = append(reasons, n.Name+": "+why)
				continue
			}
			if why := policy.ModeProblem(cfg, n, os.LookupEnv); why != "" {
				reasons = append(reasons, n.Name+": "+why)
				continue
			}
			tool := policy.ToolFor(st.Tool, n)
			if _, _, _, err := policy.ToolCommand(cfg, tool, st.Model, false, false, ""); err != nil {
				reasons = append(reasons, n.Name+": "+err.Error())
				continue
			}
			row.Nodes = append(row.Nodes, n.Name)
			row.Tools[n.Name] = tool
		}
		return reasons
	}
	for _, t := range p.Tasks {
		if t.Node != "" {
			if _, ok := cfg.Node(t.Node); !ok {
				problems = append(problems, fmt.Sprintf("%s: node %q is not in %s\n  fix: use one of %s", t.File, t.Node, cfg.File, strings.Join(nodeNames(cfg), ", ")))
				continue
			}
		}
		st := storeTask(p, t, cfg)
		row := Row{Task: t, Type: t.Type, Git: p.Config.Source != nil}
		if store.IsPhaseID(t.ID) {
			typ := phaseType(t.ID)
			if !phaseRuns(opts, typ) {
				continue // the phase is off: this spec never runs
			}
			st.Type, row.Type = typ, typ
		}
		if reasons := place(&row, st); len(row.Nodes) == 0 {
			problems = append(problems, fmt.Sprintf("%s: no node can run task %s (%s)\n  fix: adjust its tags/node/tool, or routes and node tags in %s",
				t.File, t.ID, strings.Join(reasons, "; "), cfg.File))
			continue
		}
		rows = append(rows, row)
	}
	for _, typ := range []string{"integration", "verification", "fix"} {
		id := map[string]string{"integration": store.IntegrationID, "verification": store.VerifyID(1), "fix": store.FixID(1)}[typ]
		if _, own := opts.Overrides[id]; own || !phaseRuns(opts, typ) {
			continue
		}
		row := Row{Task: &spec.Task{ID: id, Title: "(generated " + typ + " task)", Type: typ, Priority: 1,
			Sandbox: opts.Sandbox, Network: opts.Network, Limits: opts.Limits}, Type: typ, Generated: true, Git: p.Config.Source != nil}
		if reasons := place(&row, store.Task{ID: id, Type: typ, Tool: opts.PhaseTool, Sandbox: opts.Sandbox, Network: opts.Network}); len(row.Nodes) == 0 {
			problems = append(problems, fmt.Sprintf("%s: no node can run the generated %s task (%s: %s)\n  fix: route type %s to a tag some node has, or set integration: false in project.yaml",
				p.Dir, typ, id, strings.Join(reasons, "; "), typ))
			continue
		}
		if shell := shellNodes(cfg, row); len(shell) > 0 {
			problems = append(problems, fmt.Sprintf("%s: the generated %s task %s could run on %s with tool shell, which runs its spec as a shell script; "+
				"the spec dispatch writes for %s is a prompt for an agent\n"+
				"  fix: set `tool:` on %s to an agent (claude, codex, gemini) in %s, route type %s to nodes with one (routes:), write your own %s spec, or set %s in project.yaml",
				p.Dir, typ, id, strings.Join(shell, ", "), id, strings.Join(shell, ", "), cfg.File, typ, id, phaseOff(typ)))
			continue
		}
		rows = append(rows, row)
	}
	if len(problems) > 0 {
		return rows, &Error{Problems: problems}
	}
	return rows, nil
}

// shellNodes lists the nodes of a row that would run it with the built-in
// shell tool (/bin/sh on the spec).
func shellNodes(cfg *nodes.Config, row Row) []string {
	if _, own := cfg.Tools["shell"]; own {
		return nil // nodes.yaml's own "shell" tool, whatever it runs
	}
	var out []string
	for _, n := range row.Nodes {
		if row.Tools[n] == "shell" {
			out = append(out, n)
		}
	}
	return out
}

// phaseOff is the project.yaml setting that turns a phase's tasks off.
func phaseOff(typ string) string {
	switch typ {
	case "verification":
		return "verification: false"
	case "fix":
		return "max_fix_rounds: 0"
	}
	return "integration: false"
}

// phaseType is the task type of a phase task ID.
func phaseType(id string) string {
	switch store.PhaseOf(id) {
	case store.PhaseIntegration:
		return "integration"
	case store.PhaseVerification:
		return "verification"
	}
	return "fix"
}

// phaseRuns reports whether the phase tasks of type typ can run at all.
func phaseRuns(o store.ProjectOptions, typ string) bool {
	switch typ {
	case "integration":
		return o.Integration
	case "verification":
		return o.Integration && o.Verification
	}
	return o.Integration && o.Verification && o.MaxFixRounds > 0
}

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
	Sandbox *wrapper.SandboxReply
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
			case !ok || pr.Err != "":
				unchecked = append(unchecked, n)
			case !pr.Found[exe]:
				missing = append(missing, fmt.Sprintf("%s (tool %s: no %s in its PATH)", n, r.Tools[n], exe))
			case r.Git && !pr.Found["git"]:
				missing = append(missing, fmt.Sprintf("%s (no git in its PATH: the project's tasks work in git checkouts)", n))
			case claudeRefusesRoot(cfg, node, r.Tools[n], pr):
				asRoot = append(asRoot, n)
			case needsSandbox(r, node) && pr.Sandbox == nil:
				unchecked = append(unchecked, n)
			case needsSandbox(r, node) && pr.Sandbox.Sandbox != wrapper.SandboxBwrap:
				missing = append(missing, fmt.Sprintf("%s (sandbox: unavailable: %s; fix: %s)", n, pr.Sandbox.Error, pr.Sandbox.Fix))
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
			notes = append(notes, fmt.Sprintf("%s: could not check %s for its tool; it runs there only if the tool is installed", what, strings.Join(unchecked, ", ")))
		case len(asRoot) > 0 && len(missing) == 0:
			problems = append(problems, fmt.Sprintf("%s cannot run anywhere: on %s claude would run as root with --dangerously-skip-permissions (dangerous: true), which it refuses\n"+
				"  fix: log in to the node as another user, set dangerous: false on the node and its api_mode, or set IS_SANDBOX=1 in the api_mode's env if the node is a container or VM you can throw away", what, strings.Join(asRoot, ", ")))
		case len(missing) > 0:
			fix := "install the tool on one of these nodes, or set `tool:` in the spec or on a node (nodes.yaml) to a tool that is installed"
			if r.Git {
				fix = "install git on one of these nodes, or route the project's tasks to nodes that have it; " + fix
			}
			if strings.Contains(strings.Join(missing, ";"), "sandbox: unavailable") {
				fix = "make the sandbox work on one of these nodes (see its fix; `dispatch nodes check` shows it), set sandbox: off on those nodes' tasks that may run unconfined, or route the task to nodes with sandbox: on or auto; " + fix
			}
			if store.IsPhaseID(r.Task.ID) {
				fix = "install the tool on one of these nodes, set `tool:` on a node routed for " + r.Type + " (nodes.yaml), write your own " + r.Task.ID + " spec with a tool that is installed, or set `integration: false` in project.yaml"
			}
			problems = append(problems, fmt.Sprintf("%s cannot run anywhere: %s\n  fix: %s", what, strings.Join(missing, "; "), fix))
		}
	}
	return problems, notes
}

// needsSandbox reports whether the task of r must run sandboxed on node n.
func needsSandbox(r Row, n nodes.Node) bool {
	sb, _, _, _ := policy.TaskLaunch(r.Task.Sandbox, r.Task.Network, n)
	return sb == wrapper.SandboxBwrap
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
			return Probe{Err: err.Error()}
		}
		var reply wrapper.WhichReply
		if res.ExitCode != 0 || json.Unmarshal(res.Stdout, &reply) != nil {
			return Probe{Err: "which: " + policy.ReplyError(res, nil)}
		}
		pr := Probe{Found: map[string]bool{}, Sandbox: reply.Sandbox}
		for name := range reply.Found {
			pr.Found[name] = true
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
		return Probe{Err: err.Error()}
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

func nodeNames(cfg *nodes.Config) []string {
	var out []string
	for _, n := range cfg.Nodes {
		out = append(out, n.Name)
	}
	return out
}

func storeTask(p *spec.Project, t *spec.Task, cfg *nodes.Config) store.Task {
	maxRetries := cfg.Controller.MaxRetries
	if t.MaxRetries != nil {
		maxRetries = *t.MaxRetries
	}
	deps := t.DependsOn
	if deps == nil {
		deps = []string{}
	}
	return store.Task{Project: p.Name, ID: t.ID, Title: t.Title, Type: t.Type, Tool: t.Tool, Model: t.Model,
		Priority: t.Priority, DependsOn: deps, Tags: t.Tags, NodePin: t.Node, Timeout: t.Timeout, Stall: t.Stall,
		MaxRetries: maxRetries, SpecFile: t.File, SpecHash: t.Hash, Snapshot: t.Snapshot, Sandbox: t.Sandbox, Network: t.Network, Limits: t.Limits}
}

// SyncResult says what AddProject found.
type SyncResult struct {
	Added int
	// Changed lists tasks whose spec file changed after they ran; they keep
	// their snapshot until `dispatch retry`.
	Changed []string
	// Updated lists tasks that had not run yet and took the new spec.
	Updated []string
	// BaseMoved lists tasks that ran from an older commit of the
	// project's repository than repo:/ref: now name; they keep their
	// results until `dispatch retry`.
	BaseMoved []string
	// Finished is set when the project had finished and this start brought
	// no new work: it stays finished with its result.
	Finished bool
	// Run is the number of the run this start began (0: it resumed the
	// current one); PrevRun and PrevResult are the run that ended before.
	Run, PrevRun int
	PrevResult   string
	// Reused are the tasks whose result the new run reuses; Reasons say
	// why each other task runs again, in the specs' order.
	Reused  []string
	Reasons []taskReason
	// AllReused: nothing changed since a passed run, and the new run ended
	// at once with the same result.
	AllReused bool
}

// projectOptionsFor resolves a project's settings from project.yaml,
// nodes.yaml and the start switches.
func projectOptionsFor(cfg *nodes.Config, p *spec.Project, so control.StartOptions) store.ProjectOptions {
	o := store.ProjectOptions{HaltFail: p.Config.Halt.Fail, Setup: p.Config.Setup, Integration: true, Verification: true,
		Stall: p.Config.Stall, BudgetUSD: p.Config.Budget.USD, BudgetTokens: p.Config.Budget.Tokens,
		MaxAttemptUSD: p.Config.Budget.MaxAttemptUSD,
		MaxFixRounds:  cfg.Controller.MaxFixRounds, IntegratePartial: so.IntegratePartial, Overrides: map[string]store.PhaseSpec{}}
	if so.BudgetUSD > 0 {
		o.BudgetUSD = so.BudgetUSD
	}
	if src := p.Config.Source; src != nil {
		o.Repo = &store.RepoOptions{Dir: src.Dir, Ref: src.Ref, Commit: src.Commit}
	}
	o.Notify = p.Config.Notify
	o.Sandbox, o.Network, o.Limits = p.Config.Sandbox, p.Config.Network, p.Config.Limits
	o.Trigger = so.Trigger
	if o.Trigger == "" {
		o.Trigger = control.TriggerStart
	}
	if p.Config.Integration != nil {
		o.Integration = *p.Config.Integration
	}
	if p.Config.Verification != nil {
		o.Verification = *p.Config.Verification
	}
	if so.NoIntegrate {
		o.Integration = false
	}
	if p.Config.MaxFixRounds != nil {
		o.MaxFixRounds = *p.Config.MaxFixRounds
	}
	for _, t := range p.Tasks {
		if store.IsPhaseID(t.ID) {
			o.Overrides[t.ID] = store.PhaseSpec{Title: t.Title, File: t.File, Tool: t.Tool, Model: t.Model, Timeout: t.Timeout,
				Tags: t.Tags, Node: t.Node, Snapshot: t.Snapshot, Hash: t.Hash, Sandbox: t.Sandbox, Network: t.Network, Limits: t.Limits}
		}
	}
	if p.Config.IntegrationSpec != "" {
		file := filepath.Join(p.Dir, p.Config.IntegrationSpec)
		if b, err := os.ReadFile(file); err == nil {
			o.Overrides[store.IntegrationID] = store.PhaseSpec{Title: "Integrate the outputs", File: file, Tool: p.Config.Tool, Snapshot: b}
		}
	}
	return o
}

// AddProject records a project and its author tasks (new tasks are
// pending; tasks that have not started take a changed spec; started tasks
// keep their snapshot) and marks the project active. Phase tasks (S99, V*,
// F*) are created by the controller when their phase comes; author files
// for them replace the generated specs.
func AddProject(ctx context.Context, st *store.Store, cfg *nodes.Config, home string, p *spec.Project, so control.StartOptions) (SyncResult, error) {
	var res SyncResult
	opts := projectOptionsFor(cfg, p, so)
	ob, _ := json.Marshal(opts)
	var baseDir string
	if p.Config.Base != "" {
		baseDir = filepath.Join(p.Dir, p.Config.Base)
	}
	var authorTasks []*spec.Task
	for _, t := range p.Tasks {
		if !store.IsPhaseID(t.ID) {
			authorTasks = append(authorTasks, t)
		}
	}
	existing, err := st.Tasks(ctx, p.Name)
	if err != nil {
		return res, err
	}
	have := map[string]store.Task{}
	for _, t := range existing {
		have[t.ID] = t
	}
	if p.Config.Base != "" {
		// A task's result is reused only from the same base tree.
		if opts.BaseTree, err = treeHash(baseDir); err != nil {
			return res, fmt.Errorf("read the base tree of %s: %w", p.Name, err)
		}
		ob, _ = json.Marshal(opts)
	}
	// A finished project begins its next run; one that is going on (or
	// stopped) is resumed, its run still what began it (a schedule, say).
	if old, err := st.Project(ctx, p.Name); err == nil && old.State == store.ProjectDone {
		res, err := newRun(ctx, st, cfg, home, p, so, opts, string(ob), old, have)
		res.Finished = res.AllReused
		return res, err
	} else if err == nil {
		if oo, err := old.ParseOptions(); err == nil && oo.Trigger != "" {
			opts.Trigger = oo.Trigger
			ob, _ = json.Marshal(opts)
		}
	}
	err = st.Update(ctx, func(tx *store.Tx) error {
		res = SyncResult{}
		if err := tx.EnsureProject(ctx, p.Name, string(ob)); err != nil {
			return err
		}
		for _, t := range authorTasks {
			nt := storeTask(p, t, cfg)
			nt.BaseDir = baseDir
			if opts.Repo != nil {
				nt.BaseCommit = opts.Repo.Commit
			}
			old, ok := have[t.ID]
			if !ok {
				res.Added++
				if err := tx.InsertTask(ctx, nt); err != nil {
					return err
				}
				continue
			}
			if old.SpecHash == nt.SpecHash && sameSettings(old, nt) {
				continue
			}
			if old.Status != store.Pending && old.Status != store.Blocked {
				if old.SpecHash != nt.SpecHash {
					res.Changed = append(res.Changed, t.ID)
				}
				if old.BaseCommit != nt.BaseCommit && old.BaseCommit != "" {
					res.BaseMoved = append(res.BaseMoved, t.ID)
				}
				continue
			}
			res.Updated = append(res.Updated, t.ID)
			if err := tx.SetTask(ctx, p.Name, t.ID, store.TaskPatch{Title: new(nt.Title), Type: new(nt.Type), Tool: new(nt.Tool),
				Model: new(nt.Model), Priority: new(nt.Priority), DependsOn: new(nt.DependsOn), Tags: new(nt.Tags),
				NodePin: new(nt.NodePin), Timeout: new(nt.Timeout), Stall: new(nt.Stall), MaxRetries: new(nt.MaxRetries),
				SpecFile: new(nt.SpecFile), SpecHash: new(nt.SpecHash), Snapshot: new(nt.Snapshot), BaseDir: new(nt.BaseDir),
				BaseCommit: new(nt.BaseCommit), Limits: new(nt.Limits), Sandbox: new(nt.Sandbox), Network: new(nt.Network)}); err != nil {
				return err
			}
			msg := "spec changed before the task ran; using the new one"
			if old.SpecHash == nt.SpecHash && old.BaseCommit != nt.BaseCommit {
				msg = "the repository's ref moved before the task ran; it starts from " + nt.BaseCommit
			}
			if err := tx.Event(ctx, store.Event{Project: p.Name, Task: t.ID, Kind: "spec", Message: msg}); err != nil {
				return err
			}
		}
		return nil
	})
	return res, err
}

func sameSettings(a, b store.Task) bool {
	return a.Title == b.Title && a.Type == b.Type && a.Tool == b.Tool && a.Model == b.Model &&
		a.Priority == b.Priority && slices.Equal(a.DependsOn, b.DependsOn) && slices.Equal(a.Tags, b.Tags) &&
		a.NodePin == b.NodePin && a.Timeout == b.Timeout && a.Stall == b.Stall && a.MaxRetries == b.MaxRetries && a.BaseDir == b.BaseDir &&
		a.BaseCommit == b.BaseCommit && a.Limits == b.Limits && a.Sandbox == b.Sandbox && a.Network == b.Network
}
