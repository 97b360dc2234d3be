package controller

import (
	"archive/tar"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"math"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/dispatch-tool/dispatch/controller/executor"
	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/home"
	"github.com/dispatch-tool/dispatch/internal/netallow"
	"github.com/dispatch-tool/dispatch/internal/yamlval"
	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/policy"
	"github.com/dispatch-tool/dispatch/store"
	"github.com/dispatch-tool/dispatch/wire"
)

// testHookBeforeLaunch, set only by tests, runs just before a node's
// launch call with its document: tests break the SSH session there.
var testHookBeforeLaunch func(node, wrapperPath string, doc []byte)

// stallTimeout is the task's stall_timeout (domain.StallTimeout) on node n.
func stallTimeout(t domain.Task, opts domain.ProjectOptions, n nodes.Node) time.Duration {
	return domain.StallTimeout(t, opts, n.Stall)
}

// launchOutcome is what one launch attempt found out.
type launchOutcome struct {
	claim claim
	reply *wire.RunReply
	// slurmJob is the id of the attempt's Slurm job (executor.Slurm).
	slurmJob string
	// err is set when the attempt surely did not start; uncertain is set when
	// the transport failed and the next pull must decide.
	err       error
	noRetry   bool
	uncertain error
	// class is err's error class when not start.
	class string
	// start is where a stacked task starts (stackLaunches), nil for its
	// task's base commit.
	start *stackStart
	// dangerous is set when the tool ran with permission-skipping flags
	// because the node or api_mode says dangerous: true; an attempt that
	// runs them only because it is sandboxed is not (it records sandbox).
	dangerous bool
	// resumed is the session of the attempt before that this one continues.
	resumed string
	// pushFailures lists the failed tries of pushing the task's files.
	pushFailures []string
	// inputsNote says where each dependency's output came from (copied on
	// the node, or sent from the controller and why), for an event.
	inputsNote string
}

// base is the commit a git-native attempt starts on.
func (o *launchOutcome) base() string {
	if o.start != nil {
		return o.start.commit
	}
	return o.claim.task.BaseCommit
}

// taskDir is the task's directory on its node.
func taskDir(inst *nodes.Installed, project, id string) string {
	return path.Join(inst.WorkDir, project, "tasks", id)
}

// launchAll launches this tick's claims in parallel (bounded by
// max_parallel_ssh) and records the outcomes in one transaction.
func (c *Controller) launchAll(ctx context.Context, claims []claim) int {
	if len(claims) == 0 {
		return 0
	}
	// Launch each node's claims in parallel; a node that does not finish in
	// time leaves its launches uncertain, for the next pull to settle.
	byNode := map[string][]int{}
	for i, cl := range claims {
		byNode[cl.node.cfg.Name] = append(byNode[cl.node.cfg.Name], i)
	}
	var mu sync.Mutex
	results := map[int]launchOutcome{}
	names := make([]string, 0, len(byNode))
	for name := range byNode {
		names = append(names, name)
	}
	// Every remote call of a launch has its own deadline and every push is
	// bounded by progress (transferIdle), so the tick waits for the
	// launches: a large base tree is not cut off for taking long.
	c.onNodes(names, working, time.Duration(math.MaxInt64), func(n *nodeRuntime) {
		idx := byNode[n.cfg.Name]
		mine := make([]claim, len(idx))
		for k, i := range idx {
			mine[k] = claims[i]
		}
		outs := c.launchNode(ctx, n, mine)
		mu.Lock()
		for k, i := range idx {
			results[i] = outs[k]
		}
		mu.Unlock()
	})
	outcomes := make([]launchOutcome, len(claims))
	mu.Lock()
	for i, cl := range claims {
		o, ok := results[i]
		if !ok {
			o = launchOutcome{claim: cl, uncertain: errors.New("node busy or no answer in time")}
		}
		outcomes[i] = o
	}
	mu.Unlock()
	return c.recordLaunches(ctx, outcomes)
}

// recordLaunches records the outcomes of a tick's launches in one
// transaction and returns how many started.
func (c *Controller) recordLaunches(ctx context.Context, outcomes []launchOutcome) int {
	started := 0
	var told []notice
	err := c.st.Update(ctx, func(tx *store.Tx) error {
		started, told = 0, nil
		a := &applier{c: c, now: tx.Now(), after: newAfterApply()}
		for _, o := range outcomes {
			t := o.claim.task
			for _, f := range o.pushFailures {
				if err := tx.Event(ctx, store.Event{Project: t.Project, Task: t.ID, Attempt: t.Attempt, Kind: "push_failed",
					Node: t.Node, Message: "pushing the task's files failed, " + f}); err != nil {
					return err
				}
			}
			if o.inputsNote != "" {
				if err := tx.Event(ctx, store.Event{Project: t.Project, Task: t.ID, Attempt: t.Attempt, Kind: eventInputs,
					Node: t.Node, Message: o.inputsNote}); err != nil {
					return err
				}
			}
			switch {
			case o.reply != nil:
				started++
				if _, _, err := tx.Transition(ctx, store.Change{Project: t.Project, Task: t.ID, From: domain.Claimed,
					To: domain.Running, Message: fmt.Sprintf("on %s (pid %d)", t.Node, o.reply.PID),
					Set: store.TaskPatch{StartedAt: new(tx.Now())}}); err != nil {
					return err
				}
				if err := tx.SetAttempt(ctx, t.Project, t.ID, t.Attempt, store.AttemptPatch{Status: new(domain.Running), PID: new(o.reply.PID), StartedAt: new(tx.Now()), Dangerous: new(o.dangerous), SlurmJob: new(o.slurmJob)}); err != nil {
					return err
				}
				if o.resumed != "" {
					if err := tx.Event(ctx, store.Event{Project: t.Project, Task: t.ID, Attempt: t.Attempt, Kind: "resume", Node: t.Node,
						Message: fmt.Sprintf("attempt %d continues the tool's session %s of attempt %d", t.Attempt, o.resumed, t.Attempt-1)}); err != nil {
						return err
					}
				}
			case o.err != nil:
				if o.noRetry {
					t.RetriesUsed = t.MaxRetries
				}
				msg, class := o.err.Error(), cmp.Or(o.class, wire.ClassStart)
				a.fail(&t, domain.Claimed, class, msg, 0, store.AttemptPatch{Status: new(domain.Failed),
					ErrorClass: new(class), Error: new(msg), CompletedAt: new(tx.Now())})
			default:
				if err := tx.Event(ctx, store.Event{Project: t.Project, Task: t.ID, Attempt: t.Attempt, Kind: "warning",
					Node: t.Node, Message: "launch interrupted, the next pull decides: " + o.uncertain.Error()}); err != nil {
					return err
				}
			}
		}
		for _, o := range a.ops {
			if err := o.exec(ctx, tx); err != nil {
				return err
			}
		}
		told = a.notices
		return nil
	})
	if err != nil {
		c.log.Error("record launches", "err", err)
	}
	for _, n := range told {
		c.addNotice(n) // a launch that failed for good, told at the end of the tick
	}
	return started
}

// launchNode starts one node's claims of this tick with one call of its
// executor (for a wrapper node, one round trip: `wrapper run` gets every
// attempt's spec, launch.json and api_mode environment as one document on
// stdin, secrets only in memory). Only a base tree, when a task has one,
// is pushed before. It is idempotent (see executor.Executor): an attempt
// already started is refused, and one in doubt is left for the next pull
// to settle.
func (c *Controller) launchNode(ctx context.Context, n *nodeRuntime, claims []claim) []launchOutcome {
	outs := make([]launchOutcome, len(claims))
	inst := n.installed()
	// Items are prepared side by side: each may push a base tree, and a
	// large one must not hold up the others (bounded by the node's lane).
	items := make([]*wire.LaunchItem, len(claims))
	for i, cl := range claims {
		outs[i] = launchOutcome{claim: cl}
	}
	if inst != nil {
		c.stackLaunches(ctx, outs)
		c.shipBases(ctx, n, inst, outs)
	}
	var wg sync.WaitGroup
	for i := range claims {
		if inst == nil {
			// A pull found the installation broken since this node was
			// picked: nothing was started, the next pull settles the claim.
			outs[i].uncertain = fmt.Errorf("the wrapper on %s is being checked again", n.cfg.Name)
			continue
		}
		if outs[i].err != nil || outs[i].uncertain != nil {
			continue // its repository could not be sent
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if item, ok := c.prepareLaunch(ctx, &outs[i], inst); ok {
				items[i] = &item
			}
		}()
	}
	wg.Wait()
	var pending []int // index in outs of each item to launch
	var batch []wire.LaunchItem
	for i, item := range items {
		if item != nil {
			pending = append(pending, i)
			batch = append(batch, *item)
		}
	}
	if len(pending) == 0 {
		return outs
	}
	for k, l := range launchedEach(n.exec.Launch(ctx, inst, batch), len(batch)) {
		o := &outs[pending[k]]
		o.reply, o.err, o.uncertain, o.slurmJob = l.Run, l.Err, l.Uncertain, l.SlurmJob
		if l.Run != nil {
			c.log.Info("launched", keyNode, n.cfg.Name, keyProject, o.claim.task.Project, keyTask, o.claim.task.ID,
				keyAttempt, o.claim.task.Attempt, "pid", l.Run.PID)
		}
	}
	return outs
}

// launchedEach returns one outcome for each of n items from an executor's
// Launch: an item it gave no outcome for, or not exactly one, is in doubt
// (the next pull decides), and outcomes past n are dropped.
func launchedEach(ls []executor.Launched, n int) []executor.Launched {
	out := make([]executor.Launched, n)
	for i := range out {
		var l executor.Launched
		if i < len(ls) {
			l = ls[i]
		}
		set := 0
		for _, ok := range []bool{l.Run != nil, l.Err != nil, l.Uncertain != nil} {
			if ok {
				set++
			}
		}
		if set != 1 {
			l = executor.Launched{Uncertain: fmt.Errorf("the node's executor gave %d outcomes for this launch", set)}
		}
		out[i] = l
	}
	return out
}

// claimOptions are the options of cl's project: as the tick that claimed
// it read them, else read now.
func (c *Controller) claimOptions(ctx context.Context, cl claim) (domain.ProjectOptions, error) {
	if cl.opts != nil {
		return *cl.opts, nil
	}
	p, err := c.st.Project(ctx, cl.task.Project)
	if err != nil {
		return domain.ProjectOptions{}, fmt.Errorf("project %s: %w", cl.task.Project, err)
	}
	return p.ParseOptions()
}

// prepareLaunch builds the batch item of one claim and pushes its base
// tree, if it has one. false means the outcome is decided (an error).
func (c *Controller) prepareLaunch(ctx context.Context, out *launchOutcome, inst *nodes.Installed) (wire.LaunchItem, bool) {
	t, n := out.claim.task, out.claim.node
	log := c.log.With(keyNode, n.cfg.Name, keyProject, t.Project, keyTask, t.ID, keyAttempt, t.Attempt)
	a, ok := c.composeLaunch(ctx, out, inst)
	if !ok {
		return wire.LaunchItem{}, false
	}
	snapshot, err := c.launchSpec(ctx, t, &a)
	if err != nil {
		out.err = err
		return wire.LaunchItem{}, false
	}
	dir := taskDir(inst, t.Project, t.ID)
	switch {
	case t.BaseCommit != "":
		// Its repository is on the node (shipBases).
		a.launch.Repo = &wire.LaunchRepo{Dir: nodeRepo(inst, t.Project), Base: out.base(),
			Branch: taskBranch(t.Project, t.ID), Message: fmt.Sprintf("%s: %s (attempt %d)", t.ID, t.Title, t.Attempt)}
		if out.start != nil {
			snapshot = append(snapshot, conflictSection(a.tool, out.start.conflicts)...)
		} else if a.opts.Repo != nil && t.BaseCommit == a.opts.Repo.Commit && !domain.IsPhaseID(t.ID) {
			// The author tasks share their base: a spare checkout made
			// after one launch saves the next the checkout of the tree.
			a.launch.Repo.Spares = n.cfg.Spares
		}
	default:
		if !c.pushTrees(ctx, out, inst, log, &a.launch, dir) {
			return wire.LaunchItem{}, false
		}
	}
	return wire.LaunchItem{Dir: dir, Spec: string(snapshot), Launch: a.launch, Env: a.env}, true
}

// composedLaunch is what composeLaunch makes of a claim: the attempt's
// launch.json without its spec and trees, the api_mode's environment, the
// tool and the project's options.
type composedLaunch struct {
	launch wire.Launch
	env    map[string]string
	tool   string
	opts   domain.ProjectOptions
}

// composeLaunch decides what the claim's attempt runs and how: its tool's
// command line, session to resume, timeouts, setup, sandbox, network and
// limits, and its environment. false means the outcome is decided (an
// error in out).
func (c *Controller) composeLaunch(ctx context.Context, out *launchOutcome, inst *nodes.Installed) (composedLaunch, bool) {
	cl := out.claim
	t, n := cl.task, cl.node
	var a composedLaunch
	env, err := c.modeEnv(cl.mode)
	if err != nil {
		out.err, out.noRetry = err, true
		return a, false
	}
	mode := c.config().APIModes[cl.mode]
	out.dangerous = n.cfg.Dangerous || mode.Dangerous
	session, err := c.resumable(ctx, cl)
	if err != nil {
		out.err = err
		return a, false
	}
	tool := policy.ToolFor(t.Tool, n.cfg)
	conf, ok, why := policy.TaskLaunch(t.Sandbox, t.Network, tool, n.cfg)
	if !ok {
		out.err, out.noRetry = fmt.Errorf("task %s cannot run on node %s: %s", t.ID, n.cfg.Name, why), true
		return a, false
	}
	var tl wire.Launch
	if err := toolLaunch(c.config(), tool, t.Model, out.dangerous, conf.Sandbox, session, &tl); err != nil {
		out.err, out.noRetry = err, true
		return a, false
	}
	timeout := t.Timeout
	if timeout <= 0 {
		timeout = domain.DefaultTimeout
	}
	opts, err := c.claimOptions(ctx, cl)
	if err != nil {
		// Launching without its setup would run the tool in an
		// unprepared tree; nothing started, so it fails to start.
		out.err = err
		return a, false
	}
	launch := wire.Launch{Project: t.Project, Task: t.ID, Attempt: t.Attempt, Node: n.cfg.Name, Priority: t.Priority,
		Command: tl.Command, Stdin: tl.Stdin, Env: tl.Env, SandboxCommand: tl.SandboxCommand, SandboxEnv: tl.SandboxEnv,
		TimeoutSeconds: timeout.Seconds(), Setup: opts.Setup, StallSeconds: stallTimeout(t, opts, n.cfg).Seconds()}
	if err := confineLaunch(&launch, t, n.cfg, inst.WorkDir, tool, conf, env); err != nil {
		out.err, out.noRetry = err, true
		return a, false
	}
	if err := c.addTaskEnv(env, t); err != nil {
		out.err, out.noRetry = err, true
		return a, false
	}
	if policy.IsBuiltinTool(tool) {
		launch.Transcript = tool
	}
	if wire.IsAgent(tool) {
		// Its usage and resets are read; a shell's or a custom tool's
		// output is the task's to forge.
		launch.Agent = tool
	}
	if tl.Stdin == "resume" {
		launch.Resume, launch.ResumePrompt = true, policy.ResumePrompt
		out.resumed = session
	}
	return composedLaunch{launch: launch, env: env, tool: tool, opts: opts}, true
}

// launchSpec is the spec text the attempt of t reads: its snapshot, with
// its gate's section (which also sets a.launch.Gate) and the note on its
// dependencies' outputs.
func (c *Controller) launchSpec(ctx context.Context, t domain.Task, a *composedLaunch) ([]byte, error) {
	snapshot, err := c.st.Snapshot(ctx, t.Project, t.ID)
	if err != nil {
		return nil, err
	}
	if a.launch.Gate, snapshot, err = c.gateLaunch(ctx, t, a.tool, a.opts, snapshot, &a.launch); err != nil {
		return nil, err
	}
	note, err := c.toldNote(ctx, t, a.tool)
	if err != nil {
		return nil, err
	}
	return append(snapshot, note...), nil
}

// confineLaunch sets what confines the attempt of t on node n in l: the
// sandbox (from policy.TaskLaunch) with the node's work_dir and
// sandbox_paths, the network (none, or the allow list with what tool and
// the api_mode's env need) and the limits.
func confineLaunch(l *wire.Launch, t domain.Task, n nodes.Node, workDir, tool string, conf policy.Confinement, env map[string]string) error {
	if conf.Sandbox != "" {
		l.Sandbox, l.WorkDir = conf.Sandbox, workDir
		l.SandboxPaths = sandboxPaths(n.SandboxPaths)
	}
	switch network := conf.Network; {
	case network == yamlval.NetworkNone:
		// The wrapper refuses it unsandboxed (sb is bwrap here).
		l.Network = wire.NetworkNone
	case netallow.IsAllow(network):
		allow, err := policy.NetworkAllow(network, tool, env)
		if err != nil {
			return fmt.Errorf("task %s: network: %w", t.ID, err)
		}
		l.Network, l.NetworkAllow, l.NetworkDefault = wire.NetworkAllow, allow, conf.Default
	}
	l.Limits = launchLimits(t.Limits, n.Limits)
	return nil
}

// sandboxPaths is launch.json's sandbox_paths for a node's: nil for none.
// The paths go as nodes.yaml writes them; the wrapper expands ~/ on the
// node.
func sandboxPaths(p nodes.SandboxPaths) *wire.SandboxPaths {
	if len(p.RO) == 0 && len(p.RW) == 0 {
		return nil
	}
	return &wire.SandboxPaths{RO: p.RO, RW: p.RW}
}

// toolLaunch sets l's command, stdin and tool settings for tool under the
// sandbox value sb of launch.json (policy.TaskLaunch). With "bwrap" the
// attempt runs under bwrap or not at all: an agent CLI runs autonomously
// (policy.ToolCommand's sandboxed). With "auto" only the wrapper knows whether it
// will: l.Command is the unconfined command, and SandboxCommand and
// SandboxEnv, where they differ, what the wrapper runs instead under bwrap.
func toolLaunch(cfg *nodes.Config, tool, model string, dangerous bool, sb, session string, l *wire.Launch) error {
	argv, stdin, env, err := policy.ToolCommand(cfg, tool, model, dangerous, sb == wire.SandboxBwrap, session)
	if err != nil {
		return err
	}
	l.Command, l.Stdin, l.Env = argv, stdin, env
	if sb != wire.SandboxAuto {
		return nil
	}
	sbArgv, _, sbEnv, err := policy.ToolCommand(cfg, tool, model, dangerous, true, session)
	if err != nil {
		return err
	}
	if !slices.Equal(sbArgv, argv) {
		l.SandboxCommand = sbArgv
	}
	for k, v := range sbEnv {
		if w, ok := env[k]; !ok || w != v {
			if l.SandboxEnv == nil {
				l.SandboxEnv = map[string]string{}
			}
			l.SandboxEnv[k] = v
		}
	}
	return nil
}

// tryPush runs push, a transfer to n that outs need before they launch,
// up to maxPushTries times. Pushing is bounded by progress, not by a fixed
// deadline. Nothing has run on the node yet, so a push that keeps failing
// surely did not start the attempts: they fail with error_class start,
// which uses a retry. false means it failed, recorded in outs.
func (c *Controller) tryPush(ctx context.Context, n *nodeRuntime, log *slog.Logger, outs []*launchOutcome, what string, push func() error) bool {
	for try := 1; ; try++ {
		err := push()
		if err == nil {
			return true
		}
		err = fmt.Errorf("%s: %w", what, err)
		for _, out := range outs {
			switch {
			case ctx.Err() != nil:
				out.uncertain = err // the controller is stopping
			default:
				out.pushFailures = append(out.pushFailures, fmt.Sprintf("try %d of %d: %v", try, maxPushTries, err))
				if try == maxPushTries {
					out.err = fmt.Errorf("pushing the task's files to %s failed %d times; last: %w", n.cfg.Name, maxPushTries, err)
				}
			}
		}
		if ctx.Err() != nil || try == maxPushTries {
			return false
		}
		log.Warn("push failed", "try", try, "err", err)
	}
}

// shipBases sends each git-native project's base commits that outs need
// to n, once per project and commit, before the launches are prepared.
func (c *Controller) shipBases(ctx context.Context, n *nodeRuntime, inst *nodes.Installed, outs []launchOutcome) {
	type need struct{ project, commit string }
	byNeed := map[need][]*launchOutcome{}
	var order []need
	for i := range outs {
		t := outs[i].claim.task
		if t.BaseCommit == "" || outs[i].err != nil {
			continue
		}
		k := need{t.Project, outs[i].base()}
		if byNeed[k] == nil {
			order = append(order, k)
		}
		byNeed[k] = append(byNeed[k], &outs[i])
	}
	for _, k := range order {
		waiting := byNeed[k]
		p, err := c.st.Project(ctx, k.project)
		var opts domain.ProjectOptions
		if err == nil {
			opts, err = p.ParseOptions()
		}
		if err == nil && opts.Repo == nil {
			err = fmt.Errorf("project %s has no repository recorded; start it again", k.project)
		}
		if err != nil {
			for _, o := range waiting {
				o.err = err
			}
			continue
		}
		log := c.log.With(keyNode, n.cfg.Name, keyProject, k.project)
		c.tryPush(ctx, n, log, waiting, "send the repository", func() error {
			return c.shipBase(ctx, n, inst, k.project, opts.Repo.Dir, k.commit)
		})
	}
}

// resumeClasses are the failures after which the next attempt continues
// the tool's session: the tool was stopped from outside (a rate limit, a
// stall, a more urgent task), its work so far is sound.
var resumeClasses = map[string]bool{wire.ClassRateLimit: true, wire.ClassStalled: true, classPreempted: true}

// resumable returns the session the claimed attempt continues, or "": the
// attempt before it was stopped by a rate limit, a stall or a preemption, named its
// session, and ran on the same node under the same api_mode (the session
// lives in the tool's home there, and its workspace in the task directory).
func (c *Controller) resumable(ctx context.Context, cl claim) (string, error) {
	t := cl.task
	if t.Attempt < 2 {
		return "", nil
	}
	runs, err := c.st.Attempts(ctx, t.Project, t.ID)
	if err != nil {
		return "", err
	}
	for _, r := range runs {
		if r.Attempt == t.Attempt-1 && resumeClasses[r.ErrorClass] && r.SessionID != "" &&
			r.Node == cl.node.cfg.Name && r.APIMode == cl.mode {
			return r.SessionID, nil
		}
	}
	return "", nil
}

// baseDirName is the directory in a task directory that holds the tree the
// wrapper copies into output/ before the tool starts.
const baseDirName = "base"

// treeHasFiles reports whether dir holds at least one regular file.
func treeHasFiles(dir string) bool {
	found := errors.New("found")
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			return found
		}
		return err
	})
	return err == found
}

// tree is what a push sends: the regular files under each of Dirs (at
// its Prefix, a directory even when empty), and Files (name in the tree →
// file on the controller). A name is sent once: Files first, then Dirs in
// order, the first to give a name keeps it.
type tree struct {
	Dirs  []treeDir
	Files map[string]string
	// ReadOnly sends every file without its write bits (inputs/).
	ReadOnly bool
}

// treeDir is a directory of the controller sent at Prefix ("": the top).
type treeDir struct{ Dir, Prefix string }

// empty reports whether the tree has nothing to send (an empty tree needs
// no copy, and would leave no directory to copy).
func (tr tree) empty() bool {
	for _, d := range tr.Dirs {
		if d.Prefix != "" || treeHasFiles(d.Dir) {
			return false
		}
	}
	return len(tr.Files) == 0
}

// launchTrees decides what a task's launch receives besides its spec: base
// is copied into output/ before the tool starts (its base directory, its
// files: at their path in the spec directory and, with start_from:
// dependencies, its dependencies' outputs, a later dependency's file over
// an earlier one's); inputs is its task directory's inputs/, one directory
// per dependency (the default for a plain task with dependencies). runs is
// the project's runs directory, where the collected outputs are. A
// git-native or integration-phase task gets neither.
func launchTrees(t domain.Task, runs string) (base, inputs tree) {
	for _, f := range t.Files {
		if base.Files == nil {
			base.Files = map[string]string{}
		}
		base.Files[f] = filepath.Join(filepath.Dir(t.SpecFile), filepath.FromSlash(f))
	}
	switch {
	case !receivesOutputs(t):
	case t.StartFrom == domain.StartDependencies:
		for _, d := range slices.Backward(t.DependsOn) {
			base.Dirs = append(base.Dirs, treeDir{Dir: filepath.Join(runs, d, "output")})
		}
	default:
		for _, d := range t.DependsOn {
			inputs.Dirs = append(inputs.Dirs, treeDir{Dir: filepath.Join(runs, d, "output"), Prefix: d})
		}
	}
	if t.BaseDir != "" {
		base.Dirs = append(base.Dirs, treeDir{Dir: t.BaseDir})
	}
	return base, inputs
}

// receivesOutputs reports whether t's launch receives its dependencies'
// collected outputs: a plain project's author task with dependencies,
// unless start_from: base. It waits for their collection, not only for
// their completion.
func receivesOutputs(t domain.Task) bool {
	return t.BaseCommit == "" && !domain.IsPhaseID(t.ID) && len(t.DependsOn) > 0 && t.StartFrom != domain.StartBase
}

// treeSize is the bytes of the regular files tr would send (links are
// never followed); missing directories count nothing.
func treeSize(tr tree) (int64, error) {
	var total int64
	for _, f := range tr.Files {
		if fi, err := os.Lstat(f); err == nil {
			total += fi.Size()
		}
	}
	for _, d := range tr.Dirs {
		err := filepath.WalkDir(d.Dir, func(p string, e fs.DirEntry, err error) error {
			if errors.Is(err, fs.ErrNotExist) && p == d.Dir {
				return nil
			}
			if err != nil || !e.Type().IsRegular() {
				return err
			}
			fi, err := e.Info()
			if err == nil {
				total += fi.Size()
			}
			return err
		})
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// pushTrees pushes what launchTrees decides for out's task into its task
// directory dir on the node and says so in launch; false means the outcome
// is decided (an error).
func (c *Controller) pushTrees(ctx context.Context, out *launchOutcome, inst *nodes.Installed, log *slog.Logger, launch *wire.Launch, dir string) bool {
	t, n := out.claim.task, out.claim.node
	base, inputs := launchTrees(t, home.RunsDir(c.opts.Home, t.Project))
	if err := checkFiles(t); err != nil {
		out.err, out.noRetry = err, true
		return false
	}
	if err := c.checkReceived(t, base, inputs); err != nil {
		out.err, out.noRetry = err, true
		return false
	}
	if !base.empty() {
		launch.Base = baseDirName
		if !c.tryPush(ctx, n, log, []*launchOutcome{out}, "push the base tree", func() error {
			return c.pushTree(ctx, n, inst, base, path.Join(dir, baseDirName), false)
		}) {
			return false
		}
	}
	if len(inputs.Dirs) > 0 {
		launch.Inputs = true
		return c.sendInputs(ctx, out, inst, log, inputs, path.Join(dir, wire.InputsDir))
	}
	return true
}

// checkReceived refuses a task whose dependencies' outputs exceed
// collect_max_bytes: the bound of what a task sends back bounds what it
// receives too.
func (c *Controller) checkReceived(t domain.Task, base, inputs tree) error {
	limit := c.config().Controller.CollectMaxBytes
	if limit <= 0 || len(t.DependsOn) == 0 {
		return nil
	}
	var total int64
	for _, tr := range []tree{base, inputs} {
		n, err := treeSize(tr)
		if err != nil {
			return fmt.Errorf("task %s: read its dependencies' outputs: %w", t.ID, err)
		}
		total += n
	}
	if total > limit {
		return fmt.Errorf("task %s would receive %d MiB of its dependencies' outputs, over controller.collect_max_bytes (%d MiB): raise collect_max_bytes in nodes.yaml, or make the dependencies leave less in output/, then run dispatch retry %s %s",
			t.ID, total>>20, limit>>20, t.Project, t.ID)
	}
	return nil
}

// checkFiles refuses a task whose files: changed since validation into
// something that is not a regular file: a launch would fail again.
func checkFiles(t domain.Task) error {
	base, _ := launchTrees(t, "")
	for name, p := range base.Files {
		fi, err := os.Lstat(p)
		switch {
		case err != nil:
			return fmt.Errorf("task %s, files: %s: %w (restore it, or remove it from files: and run dispatch retry)", t.ID, name, err)
		case !fi.Mode().IsRegular():
			return fmt.Errorf("task %s, files: %s is not a regular file (give a file inside the spec directory, then run dispatch retry)", t.ID, name)
		}
	}
	return nil
}

// pushTree replaces dir on n with the files of src, as one tar stream over
// one transfer (bounded by progress, not by a fixed deadline) that the
// wrapper unpacks: a tree of thousands of files costs one transfer, not one
// per file. With merge, only dir's entries that src's top level names are
// replaced.
func (c *Controller) pushTree(ctx context.Context, n *nodeRuntime, inst *nodes.Installed, src tree, dir string, merge bool) error {
	if ef, ok := n.tr.(nodes.ExecFromer); ok {
		return c.streamTree(ctx, ef, inst, src, dir, merge)
	}
	archive := dir + ".tar"
	pr, pw := io.Pipe()
	var size int64
	written := make(chan struct{})
	go func() {
		defer close(written)
		var err error
		size, err = writeTree(pw, src)
		pw.CloseWithError(err)
	}()
	err := nodes.PutIdle(ctx, n.tr, archive, pr, 0o600, c.transferIdle())
	pr.CloseWithError(err) // ends writeTree if the transfer failed first
	<-written
	if err != nil {
		return err
	}
	// Unpacking is local to the node: its deadline grows with the tree.
	uctx, cancel := context.WithTimeout(ctx, c.callTimeout()+time.Duration(size/(4<<20))*time.Second)
	defer cancel()
	argv := []string{inst.Path, "untar", "--archive", archive, "--dir", dir}
	if merge {
		argv = append(argv, "--merge")
	}
	res, err := n.tr.Exec(uctx, argv, nil)
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return errors.New(policy.ReplyError(res, nil))
	}
	return nil
}

// streamTree is pushTree in one call: the archive is written straight into
// `wrapper untar --archive -` on the node, which unpacks it as it comes, so
// the tree is neither stored whole on the node first nor written there
// twice. The call is bounded by progress (transfer_idle), not by size. A
// stream that breaks fails the push, whatever untar made of it; the next
// push replaces that tree.
func (c *Controller) streamTree(ctx context.Context, tr nodes.ExecFromer, inst *nodes.Installed, src tree, dir string, merge bool) error {
	pr, pw := io.Pipe()
	var werr error
	written := make(chan struct{})
	go func() {
		defer close(written)
		_, werr = writeTree(pw, src)
		pw.CloseWithError(werr)
	}()
	argv := []string{inst.Path, "untar", "--archive", "-", "--dir", dir}
	if merge {
		argv = append(argv, "--merge")
	}
	res, err := nodes.ExecFromIdle(ctx, tr, argv, pr, c.transferIdle())
	pr.CloseWithError(errUntarEnded) // ends writeTree if untar stopped reading
	<-written
	switch {
	case werr != nil && !errors.Is(werr, errUntarEnded):
		return werr // the tree could not be read here: whatever the node made of it is not used
	case err != nil:
		return err
	case res.ExitCode != 0:
		return errors.New(policy.ReplyError(res, nil))
	case werr != nil:
		return fmt.Errorf("the node's untar ended before it read the whole tree: %s", policy.ReplyError(res, nil))
	}
	return nil
}

// errUntarEnded is what writeTree meets when the node's untar stopped
// reading its stream.
var errUntarEnded = errors.New("the node's untar ended")

// writeTree writes the files of src to w as a tar archive, with their
// permissions, and returns the bytes of content written. Links and other
// special files under src.Dirs are left out, as the tasks' trees always
// left them; a file of src.Files must be a regular file (not a link).
func writeTree(w io.Writer, src tree) (int64, error) {
	tw := tar.NewWriter(w)
	var total int64
	sent := map[string]bool{}
	for _, name := range slices.Sorted(maps.Keys(src.Files)) {
		n, err := addTarFile(tw, name, src.Files[name], true, src.ReadOnly)
		total += n
		if err != nil {
			return total, err
		}
		sent[name] = true
	}
	for _, d := range src.Dirs {
		if d.Prefix != "" {
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d.Prefix + "/", Mode: 0o755, Format: tar.FormatPAX}); err != nil {
				return total, err
			}
		}
		err := filepath.WalkDir(d.Dir, func(p string, e fs.DirEntry, err error) error {
			if errors.Is(err, fs.ErrNotExist) && p == d.Dir {
				return nil // a dependency that left no output
			}
			if err != nil || !e.Type().IsRegular() {
				return err
			}
			rel, _ := filepath.Rel(d.Dir, p)
			name := path.Join(d.Prefix, filepath.ToSlash(rel))
			if sent[name] {
				return nil
			}
			sent[name] = true
			n, err := addTarFile(tw, name, p, false, src.ReadOnly)
			total += n
			return err
		})
		if err != nil {
			return total, err
		}
	}
	return total, tw.Close()
}

// addTarFile writes the file at p to tw as name, without its write bits
// when readOnly. A file that is not regular when opened is skipped, or
// refused when required.
func addTarFile(tw *tar.Writer, name, p string, required, readOnly bool) (int64, error) {
	// A link put in a file's place since it was listed is not followed.
	if fi, err := os.Lstat(p); err == nil && !fi.Mode().IsRegular() {
		if required {
			return 0, fmt.Errorf("files: %s is not a regular file (give a file inside the spec directory)", name)
		}
		return 0, nil
	}
	f, err := os.Open(p)
	if err != nil {
		if required {
			return 0, fmt.Errorf("files: %s: %w (restore it, or remove it from files:)", name, err)
		}
		return 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	if !fi.Mode().IsRegular() {
		if required {
			return 0, fmt.Errorf("files: %s is not a regular file (give a file inside the spec directory)", name)
		}
		return 0, nil // replaced since the walk saw it
	}
	mode := fi.Mode().Perm()
	if readOnly {
		mode &^= 0o222
	}
	h := &tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: int64(mode),
		Size: fi.Size(), ModTime: fi.ModTime(), Format: tar.FormatPAX}
	if err := tw.WriteHeader(h); err != nil {
		return 0, err
	}
	// A file that grows while it is read is cut at the size in its
	// header; one that shrinks fails the push, which is tried again.
	return io.Copy(tw, io.LimitReader(f, fi.Size()))
}

// addTaskEnv adds the task's own env (front matter env:) to env, over the
// api_mode's, each ${VAR} expanded from the controller's environment. The
// values go where the api_mode's do: on the wrapper's stdin, never in argv,
// launch.json, a log or the database.
func (c *Controller) addTaskEnv(env map[string]string, t domain.Task) error {
	for k, v := range t.Env {
		val, err := nodes.ExpandEnv(v, c.opts.LookupEnv)
		if err != nil {
			return fmt.Errorf("task %s, env %s: %w (export it in the controller's environment)", t.ID, k, err)
		}
		env[k] = val
	}
	return nil
}

// modeEnv expands an api_mode's env from the controller's environment.
func (c *Controller) modeEnv(name string) (map[string]string, error) {
	env := map[string]string{}
	mode, ok := c.config().APIModes[name]
	if !ok {
		return env, nil
	}
	for k, v := range mode.Env {
		val, err := nodes.ExpandEnv(v, c.opts.LookupEnv)
		if err != nil {
			return nil, fmt.Errorf("api_mode %s, %s: %w (export it in the controller's environment)", name, k, err)
		}
		env[k] = val
	}
	return env, nil
}

// launchLimits is launch.json's limits: each of the task's (front matter,
// else project.yaml), else the node's; nil when none is set.
func launchLimits(task, node yamlval.Limits) *wire.Limits {
	l := task.Over(node)
	if l.Zero() {
		return nil
	}
	return &wire.Limits{MemoryBytes: l.Memory, CPU: l.CPU, Pids: l.Pids, FileSizeBytes: l.FileSize}
}
