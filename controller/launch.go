package controller

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path"
	"path/filepath"
	"sync"
	"time"

	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/store"
	"github.com/dispatch-tool/dispatch/wrapper"
)

// testHookAfterPush, set only by tests, runs between pushing a launch and
// running it: tests break the SSH session there.
var testHookAfterPush func(node, dir string)

// DefaultTimeout bounds a task that sets no timeout.
const DefaultTimeout = time.Hour

// DefaultStallTimeout stops a tool that writes nothing for this long, unless
// the task, project or node says otherwise.
const DefaultStallTimeout = 15 * time.Minute

// stallTimeout is the task's stall_timeout: its own (front matter, else
// project.yaml's), else the project's for a generated phase task, else the
// node's, else the default.
func stallTimeout(t store.Task, opts ProjectOptions, n nodes.Node) time.Duration {
	for _, d := range []time.Duration{t.Stall, opts.Stall, n.Stall} {
		if d > 0 {
			return d
		}
	}
	return DefaultStallTimeout
}

// launchOutcome is what one launch attempt found out.
type launchOutcome struct {
	claim claim
	reply *wrapper.RunReply
	// err is set when the attempt surely did not start; uncertain is set when
	// the transport failed and the next pull must decide.
	err       error
	noRetry   bool
	uncertain error
	// dangerous is set when the tool ran with permission-skipping flags.
	dangerous bool
	// resumed is the session of the attempt before that this one continues.
	resumed string
	// pushFailures lists the failed tries of pushing the task's files.
	pushFailures []string
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
		var wg sync.WaitGroup
		for _, i := range byNode[n.cfg.Name] {
			wg.Add(1)
			go func() {
				defer wg.Done()
				o := c.launch(ctx, claims[i])
				mu.Lock()
				results[i] = o
				mu.Unlock()
			}()
		}
		wg.Wait()
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
	started := 0
	err := c.st.Update(ctx, func(tx *store.Tx) error {
		started = 0
		a := &applier{c: c, tx: tx, now: tx.Now()}
		for _, o := range outcomes {
			t := o.claim.task
			for _, f := range o.pushFailures {
				if err := tx.Event(ctx, store.Event{Project: t.Project, Task: t.ID, Attempt: t.Attempt, Kind: "push_failed",
					Node: t.Node, Message: "pushing the task's files failed, " + f}); err != nil {
					return err
				}
			}
			switch {
			case o.reply != nil:
				started++
				if _, _, err := tx.Transition(ctx, store.Change{Project: t.Project, Task: t.ID, From: store.Claimed,
					To: store.Running, Message: fmt.Sprintf("on %s (pid %d)", t.Node, o.reply.PID),
					Set: store.Set{"started_at": tx.Now()}}); err != nil {
					return err
				}
				if err := tx.SetRun(ctx, t.Project, t.ID, t.Attempt, store.Set{"status": store.Running,
					"pid": o.reply.PID, "started_at": tx.Now(), "dangerous": o.dangerous}); err != nil {
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
				msg := o.err.Error()
				if err := a.fail(ctx, &t, store.Claimed, wrapper.ClassStart, msg, 0, store.Set{"status": store.Failed,
					"error_class": wrapper.ClassStart, "error": msg, "completed_at": tx.Now()}); err != nil {
					return err
				}
			default:
				if err := tx.Event(ctx, store.Event{Project: t.Project, Task: t.ID, Attempt: t.Attempt, Kind: "warning",
					Node: t.Node, Message: "launch interrupted, the next pull decides: " + o.uncertain.Error()}); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		c.log.Error("record launches", "err", err)
	}
	return started
}

// launch pushes spec.md and launch.json and runs the wrapper with the
// api_mode's environment on stdin. It is idempotent: the wrapper refuses a
// second live run of the attempt, and a broken session is settled by the
// next pull.
func (c *Controller) launch(ctx context.Context, cl claim) launchOutcome {
	out := launchOutcome{claim: cl}
	t, n := cl.task, cl.node
	log := c.log.With(keyNode, n.cfg.Name, keyProject, t.Project, keyTask, t.ID, keyAttempt, t.Attempt)
	env, err := c.modeEnv(cl.mode)
	if err != nil {
		out.err, out.noRetry = err, true
		return out
	}
	mode := c.cfg.APIModes[cl.mode]
	out.dangerous = n.cfg.Dangerous || mode.Dangerous
	session, err := c.resumable(ctx, cl)
	if err != nil {
		out.err = err
		return out
	}
	argv, stdin, toolEnv, err := toolCommand(c.cfg, toolFor(t.Tool, n.cfg), t.Model, out.dangerous, session)
	if err != nil {
		out.err, out.noRetry = err, true
		return out
	}
	timeout := t.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	p, err := c.st.Project(ctx, t.Project)
	if err != nil {
		out.err = fmt.Errorf("project %s: %w", t.Project, err)
		return out
	}
	opts, err := projectOptions(p)
	if err != nil {
		// Launching without its setup would run the tool in an
		// unprepared tree; nothing started, so it fails to start.
		out.err = err
		return out
	}
	tool := toolFor(t.Tool, n.cfg)
	launch := wrapper.Launch{Project: t.Project, Task: t.ID, Attempt: t.Attempt, Node: n.cfg.Name,
		Command: argv, Stdin: stdin, Env: toolEnv, TimeoutSeconds: timeout.Seconds(), Setup: opts.Setup,
		StallSeconds: stallTimeout(t, opts, n.cfg).Seconds()}
	if _, builtin := builtinTools[tool]; builtin {
		launch.Transcript = tool
	}
	if stdin == "resume" {
		launch.Resume, launch.ResumePrompt = true, resumePrompt
		out.resumed = session
	}
	// An empty tree needs no copy (and would leave no directory to copy).
	hasBase := t.BaseDir != "" && treeHasFiles(t.BaseDir)
	if hasBase {
		launch.Base = baseDirName
	}
	lj, err := json.MarshalIndent(launch, "", "  ")
	if err != nil {
		out.err = err
		return out
	}
	secrets, err := json.Marshal(env)
	if err != nil {
		out.err = err
		return out
	}
	inst := n.installed()
	if inst == nil {
		// A pull found the installation broken since this node was
		// picked: nothing was started, the next pull settles the claim.
		out.uncertain = fmt.Errorf("the wrapper on %s is being checked again", n.cfg.Name)
		return out
	}
	dir := taskDir(inst, t.Project, t.ID)
	snapshot, err := c.st.Snapshot(ctx, t.Project, t.ID)
	if err != nil {
		out.err = err
		return out
	}
	// Pushing is bounded by progress, not by a fixed deadline, and tried
	// maxPushTries times. Nothing has run on the node yet, so a push that
	// keeps failing surely did not start the attempt: it fails with
	// error_class start, which uses a retry.
	push := func() error {
		if hasBase {
			if err := c.pushTree(ctx, n, t.BaseDir, path.Join(dir, baseDirName)); err != nil {
				return fmt.Errorf("push the base tree: %w", err)
			}
		}
		if err := nodes.PutIdle(ctx, n.tr, path.Join(dir, "spec.md"), bytes.NewReader(snapshot), 0o444, c.transferIdle()); err != nil {
			return fmt.Errorf("push spec.md: %w", err)
		}
		if err := nodes.PutIdle(ctx, n.tr, path.Join(dir, "launch.json"), bytes.NewReader(lj), 0o644, c.transferIdle()); err != nil {
			return fmt.Errorf("push launch.json: %w", err)
		}
		return nil
	}
	for try := 1; ; try++ {
		err := push()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			out.uncertain = err // the controller is stopping
			return out
		}
		out.pushFailures = append(out.pushFailures, fmt.Sprintf("try %d of %d: %v", try, maxPushTries, err))
		log.Warn("push failed", "try", try, "err", err)
		if try == maxPushTries {
			out.err = fmt.Errorf("pushing the task's files to %s failed %d times; last: %w", n.cfg.Name, maxPushTries, err)
			return out
		}
	}
	if len(env) > 0 {
		// The secrets go to the wrapper on its stdin: check again that no
		// one else could have replaced it since the node was checked.
		cctx, cancel := context.WithTimeout(ctx, c.callTimeout())
		err := nodes.CheckWorkDir(cctx, n.tr, *inst)
		cancel()
		if err != nil {
			out.err = err
			return out
		}
	}
	crashPoint(CrashAfterPush)
	if testHookAfterPush != nil {
		testHookAfterPush(n.cfg.Name, dir)
	}
	// A transport failure of `run` (node unreachable, deadline) leaves the
	// launch uncertain, for the next pull to settle: the wrapper may have
	// started. Any other failure surely did not start the attempt and
	// fails it with error_class start, which uses a retry.
	rctx, cancel := context.WithTimeout(ctx, c.callTimeout())
	defer cancel()
	res, err := n.tr.Exec(rctx, []string{inst.Path, "run", "--dir", dir}, secrets)
	if err != nil {
		err = fmt.Errorf("run: %w", err)
		if errors.Is(err, nodes.ErrUnreachable) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			out.uncertain = err
		} else {
			out.err = err
		}
		return out
	}
	crashPoint(CrashAfterRun)
	var reply wrapper.RunReply
	if res.ExitCode == 0 && json.Unmarshal(res.Stdout, &reply) == nil && reply.PID > 0 {
		log.Info("launched", "pid", reply.PID)
		out.reply = &reply
		return out
	}
	var e wrapper.ErrorReply
	switch {
	case json.Unmarshal(res.Stdout, &e) == nil && e.Error != "" && e.Kind != wrapper.KindAlreadyRunning:
		// The wrapper answered that it did not start the attempt.
		out.err = fmt.Errorf("wrapper run: %s", e.Error)
	case e.Kind == wrapper.KindAlreadyRunning:
		// Another supervisor lives in the task directory: an earlier launch
		// of this attempt got through, or a stale attempt still runs there.
		out.uncertain = errors.New(e.Error)
	default:
		// No answer we understand (the wrapper killed, a broken reply): the
		// supervisor may have started; the next pull decides.
		out.uncertain = fmt.Errorf("wrapper run: %s", replyError(res, nil))
	}
	return out
}

// resumeClasses are the failures after which the next attempt continues
// the tool's session: the tool was stopped from outside, its work so far
// is sound.
var resumeClasses = map[string]bool{wrapper.ClassRateLimit: true, wrapper.ClassStalled: true}

// resumable returns the session the claimed attempt continues, or "": the
// attempt before it was stopped by a rate limit or a stall, named its
// session, and ran on the same node under the same api_mode (the session
// lives in the tool's home there, and its workspace in the task directory).
func (c *Controller) resumable(ctx context.Context, cl claim) (string, error) {
	t := cl.task
	if t.Attempt < 2 {
		return "", nil
	}
	runs, err := c.st.Runs(ctx, t.Project, t.ID)
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

// pushTree replaces dir on the node with the local tree src; each file is
// bounded by progress (transferIdle), not by the time the tree takes.
func (c *Controller) pushTree(ctx context.Context, n *nodeRuntime, src, dir string) error {
	rctx, cancel := context.WithTimeout(ctx, c.callTimeout())
	err := n.tr.Remove(rctx, dir)
	cancel()
	if err != nil {
		return err
	}
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		rel, _ := filepath.Rel(src, p)
		return nodes.PutIdle(ctx, n.tr, path.Join(dir, filepath.ToSlash(rel)), f, fi.Mode().Perm(), c.transferIdle())
	})
}

// modeEnv expands an api_mode's env from the controller's environment.
func (c *Controller) modeEnv(name string) (map[string]string, error) {
	env := map[string]string{}
	mode, ok := c.cfg.APIModes[name]
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
