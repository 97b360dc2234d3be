package controller

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/dispatch-tool/dispatch/store"
	"github.com/dispatch-tool/dispatch/wrapper"
)

// retryable lists the error classes that are retried (SPEC §7 step 4).
var retryable = map[string]bool{
	wrapper.ClassExit: true, wrapper.ClassCrash: true, wrapper.ClassTimeout: true,
	wrapper.ClassRateLimit: true, wrapper.ClassStart: true, store.Lost: true,
	wrapper.ClassHung: true, wrapper.ClassStalled: true,
}

// staleAttempt is a live attempt on a node that is not the task's current
// attempt there: left behind by a node that was lost and came back, or by a
// database that moved on. It is killed, and its status is never applied.
type staleAttempt struct {
	node, project, task, dir string
	attempt                  int
	// orphan is set when the attempt's wrapper is gone but its status says
	// running: what its tool left behind may still run.
	orphan bool
	// foreign is set when the node never ran the task (no run of it there
	// in the database): its node's word alone, which holds the node back
	// but never the task.
	foreign bool
}

// apply writes what the pulls found, in one transaction: node facts, status
// changes of current attempts (older attempts are fenced off and ignored),
// dead attempts, retries and blocked dependents. It returns the number of
// status changes and the stale attempts found on the nodes.
func (c *Controller) apply(ctx context.Context, projects []string, pulls map[string]*pull) (int, []staleAttempt, error) {
	known, err := c.st.Nodes(ctx)
	if err != nil {
		return 0, nil, err
	}
	prev := map[string]store.Node{}
	for _, n := range known {
		prev[n.Name] = n
	}
	var changed int
	var stale []staleAttempt
	c.killMu.Lock()
	announced := c.announced
	c.killMu.Unlock()
	err = c.st.Update(ctx, func(tx *store.Tx) error {
		changed, stale = 0, nil
		now := tx.Now()
		for name, p := range pulls {
			if p.skipped {
				continue
			}
			if err := tx.PutNode(ctx, c.nodeRecord(name, p, prev[name], now)); err != nil {
				return err
			}
		}
		a := &applier{c: c, tx: tx, now: now, pulls: pulls, prev: prev}
		current := map[string]*store.Task{}
		for _, project := range projects {
			tasks, err := tx.Tasks(ctx, project)
			if err != nil {
				return err
			}
			for i := range tasks {
				current[taskKey(project, tasks[i].ID)] = &tasks[i]
				if err := a.task(ctx, &tasks[i]); err != nil {
					return err
				}
			}
			// Re-read: the statuses above may have changed what is blocked,
			// and which attempts are current.
			if tasks, err = tx.Tasks(ctx, project); err != nil {
				return err
			}
			for i := range tasks {
				current[taskKey(project, tasks[i].ID)] = &tasks[i]
			}
			if err := a.blocked(ctx, tasks); err != nil {
				return err
			}
			if err := a.stopStarting(ctx, project, tasks); err != nil {
				return err
			}
		}
		stale = findStale(pulls, current)
		for i, sa := range stale {
			if !stale[i].foreign {
				ran, err := tx.RanOn(ctx, sa.project, sa.task, sa.node)
				if err != nil {
					return err
				}
				stale[i].foreign = !ran
			}
			if announced[killKey(sa)] {
				continue // said in an earlier tick; the kill goes on
			}
			ev := store.Event{Project: sa.project, Task: sa.task, Attempt: sa.attempt, Kind: "stale",
				Node: sa.node, Message: fmt.Sprintf("attempt %d still runs on %s but is not current; killing it", sa.attempt, sa.node)}
			if sa.orphan {
				ev.Kind = "orphan"
				ev.Message = fmt.Sprintf("the wrapper of attempt %d on %s is gone; killing what its tool left running before the task runs again", sa.attempt, sa.node)
			}
			if err := tx.Event(ctx, ev); err != nil {
				return err
			}
		}
		changed = a.changed
		return nil
	})
	if err == nil {
		now := map[string]bool{}
		for _, sa := range stale {
			now[killKey(sa)] = true
		}
		c.killMu.Lock()
		c.announced = now
		c.killMu.Unlock()
	}
	return changed, stale, err
}

// findStale lists the live attempts the pulls found that the database does
// not expect on that node.
// A reply naming one task many times gives one stale attempt (see killKey).
func findStale(pulls map[string]*pull, current map[string]*store.Task) []staleAttempt {
	var out []staleAttempt
	seen := map[string]bool{}
	for name, p := range pulls {
		if p.err != nil || p.status == nil {
			continue
		}
		for _, ts := range p.status.Tasks {
			if ts.Status == nil {
				continue
			}
			// A dead wrapper whose status says running may have left its
			// tool's group behind (an orphan): killed like a live attempt.
			orphan := !ts.Alive && ts.Status.Status == wrapper.StatusRunning
			if !ts.Alive && !orphan {
				continue
			}
			t := current[taskKey(ts.Project, ts.Task)]
			if t != nil && t.Node == name && t.Attempt == ts.Status.Attempt &&
				(t.Status == store.Claimed || t.Status == store.Running) {
				continue
			}
			sa := staleAttempt{node: name, project: ts.Project, task: ts.Task, dir: ts.Dir, attempt: ts.Status.Attempt, orphan: orphan, foreign: t == nil}
			if !seen[killKey(sa)] {
				seen[killKey(sa)] = true
				out = append(out, sa)
			}
		}
	}
	return out
}

// staleGrace is the grace a stale attempt gets when it is killed: its
// result is thrown away anyway.
const staleGrace = "2s"

// killStale kills stale attempts on their nodes, in the background lane of
// each node, so a slow kill never stalls the tick. Until a kill is
// confirmed, its node takes no launch or collection and its task is not
// launched anywhere (see unkilled): a retry never runs beside the attempt
// it replaces.
func (c *Controller) killStale(ctx context.Context, stale []staleAttempt) {
	byNode := map[string][]staleAttempt{}
	for _, sa := range stale {
		byNode[sa.node] = append(byNode[sa.node], sa)
	}
	names := make([]string, 0, len(byNode))
	for n := range byNode {
		names = append(names, n)
	}
	var mu sync.Mutex
	failed := map[staleAttempt]string{}
	tried := map[staleAttempt]bool{}
	c.onNodes(names, working, c.callTimeout(), func(n *nodeRuntime) {
		for _, sa := range byNode[n.cfg.Name] {
			// A frozen wrapper takes the grace, then twice the wrapper's
			// 5 s margin, before kill has it dead.
			inst := n.installed()
			if inst == nil {
				continue // not tried: the next pull checks the wrapper again
			}
			kctx, cancel := context.WithTimeout(ctx, c.callTimeout()+killSlack)
			res, err := n.tr.Exec(kctx, []string{inst.Path, "kill", "--dir", sa.dir, "--grace", staleGrace}, nil)
			cancel()
			mu.Lock()
			tried[sa] = true
			switch {
			case err != nil:
				failed[sa] = err.Error()
			case res.ExitCode != 0:
				failed[sa] = replyError(res, nil)
			}
			mu.Unlock()
			if failed[sa] != "" {
				c.log.Warn("kill stale attempt", keyNode, sa.node, keyProject, sa.project, keyTask, sa.task,
					keyAttempt, sa.attempt, "err", failed[sa])
			}
		}
	})
	mu.Lock()
	c.killMu.Lock()
	d := decideKills(c.killFailures, stale, tried, failed)
	c.killFailures, c.unkilledNodes, c.unkilledTasks = d.failures, d.holdNodes, d.holdTasks
	c.killMu.Unlock()
	mu.Unlock()
	if len(d.givenUp) == 0 {
		return
	}
	err := c.st.Update(ctx, func(tx *store.Tx) error {
		for _, sa := range d.givenUp {
			msg := fmt.Sprintf("attempt %d on %s could not be killed after %d tries (%s); its node and task no longer wait for it, and the kill is tried again every tick",
				sa.attempt, sa.node, maxKillFailures, d.lastError[sa])
			if err := tx.Event(ctx, store.Event{Project: sa.project, Task: sa.task, Attempt: sa.attempt, Kind: "stale", Node: sa.node, Message: msg}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		c.log.Warn("record stale attempts that could not be killed", "err", err)
	}
}

// maxKillFailures is how many failed kills of one stale attempt hold back
// its node (no launch, no collection) and its task (no retry anywhere).
// After that both go on, with an event: a wrapper that cannot be made to
// kill (one too old to have a process record, a node that refuses) must not
// take its node out of service for good. The kill is still tried every tick.
const maxKillFailures = 3

// killDecision is what one tick's kills leave behind.
type killDecision struct {
	// failures counts the consecutive failed kills of each stale attempt
	// still found (by killKey).
	failures             map[string]int
	holdNodes, holdTasks map[string]bool
	// givenUp lists the attempts that reached maxKillFailures in this tick,
	// with their last error in lastError.
	givenUp   []staleAttempt
	lastError map[staleAttempt]string
}

// decideKills folds one tick's kills into the failure counts: a stale
// attempt not killed in this tick (failed, or not tried because its node
// was busy or slow) holds its node and task back until it has failed
// maxKillFailures times. Attempts no longer stale are forgotten.
func decideKills(prev map[string]int, stale []staleAttempt, tried map[staleAttempt]bool, failed map[staleAttempt]string) killDecision {
	d := killDecision{failures: map[string]int{}, holdNodes: map[string]bool{}, holdTasks: map[string]bool{},
		lastError: map[staleAttempt]string{}}
	for _, sa := range stale {
		k := killKey(sa)
		n := prev[k]
		if tried[sa] && failed[sa] == "" {
			continue // killed
		}
		if failed[sa] != "" {
			n++
			if n == maxKillFailures {
				d.givenUp = append(d.givenUp, sa)
				d.lastError[sa] = failed[sa]
			}
		}
		d.failures[k] = n
		if n < maxKillFailures {
			d.holdNodes[sa.node] = true
			if !sa.foreign {
				d.holdTasks[taskKey(sa.project, sa.task)] = true
			}
		}
	}
	return d
}

// killSlack is what a kill may take beyond a call: staleGrace and the
// wrapper's margins for a supervisor that does not respond.
const killSlack = 15 * time.Second

// unkilled returns the nodes and tasks of the stale attempts whose kill
// was not confirmed in this tick.
func (c *Controller) unkilled() (nodes, tasks map[string]bool) {
	c.killMu.Lock()
	defer c.killMu.Unlock()
	return c.unkilledNodes, c.unkilledTasks
}

// killKey names a stale attempt across ticks: by node and task, since a
// node has one directory per task, so that a reply changing the attempt
// number or directory on every call does not restart the count of failed
// kills, nor announce the attempt again.
func killKey(sa staleAttempt) string {
	return sa.node + "\x00" + taskKey(sa.project, sa.task)
}

func (c *Controller) nodeRecord(name string, p *pull, prev store.Node, now time.Time) store.Node {
	n := store.Node{Name: name, LastSeen: prev.LastSeen, OS: prev.OS, Arch: prev.Arch,
		WrapperVersion: prev.WrapperVersion, MemAvailableBytes: prev.MemAvailableBytes,
		Load1: prev.Load1, DiskFreeBytes: prev.DiskFreeBytes, RTTMillis: prev.RTTMillis}
	if p.err != nil {
		n.State = store.NodeOffline
		n.LastError = p.err.Error()
		n.OfflineSince = prev.OfflineSince
		if prev.State != store.NodeOffline || n.OfflineSince.IsZero() {
			n.OfflineSince = now
		}
		return n
	}
	f := p.status.Facts
	n.State, n.LastSeen = store.NodeOnline, now
	if why := c.unusable[name]; why != "" {
		n.LastError = "takes no tasks: " + why
	}
	if diskFull(f.DiskFreeBytes) {
		n.LastError = fmt.Sprintf("disk nearly full: %d MiB free under the work_dir; no new tasks until there is %d MiB", f.DiskFreeBytes>>20, minDiskFree>>20)
	}
	n.OS, n.Arch, n.WrapperVersion = f.OS, f.Arch, p.status.WrapperVersion
	n.MemAvailableBytes, n.Load1, n.DiskFreeBytes = f.MemAvailableBytes, f.Load1, f.DiskFreeBytes
	n.RTTMillis = float64(p.rtt.Microseconds()) / 1000
	return n
}

type applier struct {
	c       *Controller
	tx      *store.Tx
	now     time.Time
	pulls   map[string]*pull
	prev    map[string]store.Node
	changed int
	// retryAfter is the reset time named by the rate limit being applied.
	retryAfter time.Duration
}

func (a *applier) transition(ctx context.Context, ch store.Change) error {
	if _, _, err := a.tx.Transition(ctx, ch); err != nil {
		return err
	}
	a.changed++
	return nil
}

func (a *applier) task(ctx context.Context, t *store.Task) error {
	if t.Status == store.Completed {
		return a.uncollectable(ctx, t)
	}
	if t.Status != store.Claimed && t.Status != store.Running {
		return nil
	}
	if _, configured := a.c.cfg.Node(t.Node); !configured {
		return a.lose(ctx, t, fmt.Sprintf("node %s is no longer in nodes.yaml", t.Node))
	}
	p := a.pulls[t.Node]
	if p == nil || p.skipped {
		return nil // a node this controller does not serve (--nodes), or still busy answering
	}
	if p.err != nil {
		since := a.prev[t.Node].OfflineSince
		if since.IsZero() {
			since = a.now
		}
		if since.Before(a.c.started) {
			since = a.c.started
		}
		if a.now.Sub(since) >= a.c.cfg.Controller.NodeOfflineTimeout {
			return a.lose(ctx, t, fmt.Sprintf("node %s offline since %s: %v", t.Node, since.Format(time.RFC3339), p.err))
		}
		return nil
	}
	ts := p.tasks[taskKey(t.Project, t.ID)]
	var st *wrapper.Status
	if ts != nil && ts.Status != nil && ts.Status.Attempt == t.Attempt {
		st = ts.Status
	}
	if st == nil {
		return a.noStatus(ctx, t, ts)
	}
	switch st.Status {
	case wrapper.StatusRunning:
		return a.running(ctx, t, ts, st)
	case wrapper.StatusCompleted, wrapper.StatusFailed, wrapper.StatusKilled:
		return a.finished(ctx, t, st)
	}
	return a.tx.Event(ctx, store.Event{Project: t.Project, Task: t.ID, Attempt: t.Attempt, Kind: "warning",
		Node: t.Node, Message: fmt.Sprintf("unknown status %q in status.json", st.Status)})
}

// noStatus handles a claimed or running attempt whose status.json on the
// node is missing, unreadable or belongs to another attempt.
func (a *applier) noStatus(ctx context.Context, t *store.Task, ts *wrapper.TaskStatus) error {
	if t.Status == store.Claimed {
		// The launch may still be in flight (or died with a controller):
		// wait a little, then requeue. A late `run` of this attempt is harmless:
		// its status belongs to an attempt that is no longer current.
		if ts != nil && ts.Alive {
			return nil
		}
		// A claim made by an earlier controller process has no launch in
		// flight any more: settle it soon after this controller starts.
		grace := claimGrace
		if t.HeartbeatAt.Before(a.c.started) {
			grace = min(grace, a.c.started.Add(restartGrace).Sub(t.HeartbeatAt))
		}
		if a.now.Sub(t.HeartbeatAt) < grace {
			return nil
		}
		if err := a.tx.SetRun(ctx, t.Project, t.ID, t.Attempt, store.Set{"status": store.Lost,
			"error": "the launch never started on the node"}); err != nil {
			return err
		}
		return a.transition(ctx, store.Change{Project: t.Project, Task: t.ID, From: store.Claimed, To: store.Pending,
			Kind: "requeue", Message: "no trace of attempt on " + t.Node + "; launching again"})
	}
	if ts != nil && ts.Alive {
		// Unreadable for now, but its supervisor lives: read it next tick,
		// and say what is wrong meanwhile.
		if w := "status.json: " + ts.StatusError; ts.StatusError != "" && t.Warning != w {
			return a.tx.SetTask(ctx, t.Project, t.ID, store.Set{"warning": w})
		}
		return nil
	}
	msg := "status.json of the attempt is missing on the node"
	if ts != nil && ts.StatusError != "" {
		msg = "status.json unreadable (" + ts.StatusError + ") and the wrapper is gone"
	}
	return a.fail(ctx, t, store.Running, wrapper.ClassCrash, msg, 0, store.Set{"status": store.Failed, "error_class": wrapper.ClassCrash, "error": msg})
}

func (a *applier) running(ctx context.Context, t *store.Task, ts *wrapper.TaskStatus, st *wrapper.Status) error {
	started := parseRemoteTime(st.StartedAt, a.now)
	if t.Status == store.Claimed {
		if err := a.transition(ctx, store.Change{Project: t.Project, Task: t.ID, From: store.Claimed, To: store.Running,
			Message: fmt.Sprintf("on %s (pid %d)", t.Node, st.PID), Set: store.Set{"started_at": started}}); err != nil {
			return err
		}
		if err := a.tx.SetRun(ctx, t.Project, t.ID, t.Attempt, store.Set{"status": store.Running, "pid": st.PID, "started_at": started}); err != nil {
			return err
		}
		t.Status = store.Running
	}
	if ts.Heartbeat != t.Heartbeat {
		t.HeartbeatAt = a.now
		set := store.Set{"heartbeat": ts.Heartbeat, "heartbeat_at": a.now}
		if t.Warning != "" {
			set["warning"] = ""
		}
		if err := a.tx.SetTask(ctx, t.Project, t.ID, set); err != nil {
			return err
		}
	}
	if !ts.Alive {
		msg := fmt.Sprintf("wrapper (pid %d) is gone while the attempt was running", st.PID)
		return a.fail(ctx, t, store.Running, wrapper.ClassCrash, msg, 0,
			store.Set{"status": store.Failed, "error_class": wrapper.ClassCrash, "error": msg, "completed_at": a.now})
	}
	// The wrapper lives but its heartbeat stopped (frozen, stopped, a hung
	// filesystem) for heartbeat_timeout, by the controller's own clock and
	// counted from no earlier than this controller's start: the attempt is
	// hung. It fails and is retried like a crash; being no longer current,
	// it is killed as stale before the retry may launch.
	since := t.HeartbeatAt
	if since.Before(a.c.started) {
		since = a.c.started
	}
	if stale := a.now.Sub(since); stale >= a.c.cfg.Controller.HeartbeatTimeout {
		msg := fmt.Sprintf("hung: heartbeat unchanged for %s while the wrapper (pid %d) is alive", stale.Round(time.Second), st.PID)
		return a.fail(ctx, t, store.Running, wrapper.ClassHung, msg, 0,
			store.Set{"status": store.Failed, "error_class": wrapper.ClassHung, "error": msg, "completed_at": a.now})
	}
	return nil
}

func (a *applier) finished(ctx context.Context, t *store.Task, st *wrapper.Status) error {
	completed := parseRemoteTime(st.CompletedAt, a.now)
	started := parseRemoteTime(st.StartedAt, completed)
	run := store.Set{"status": st.Status, "pid": st.PID, "exit_code": st.ExitCode, "signal": st.Signal,
		"error_class": st.ErrorClass, "error": st.Error, "started_at": started, "completed_at": completed,
		"log_bytes": st.LogBytes, "tokens_in": st.TokensIn, "tokens_out": st.TokensOut, "cost_usd": st.CostUSD,
		"session_id": st.SessionID}
	if st.Status == wrapper.StatusCompleted {
		if err := a.tx.SetRun(ctx, t.Project, t.ID, t.Attempt, run); err != nil {
			return err
		}
		return a.transition(ctx, store.Change{Project: t.Project, Task: t.ID, From: t.Status, To: store.Completed,
			Message: "on " + t.Node,
			Set:     store.Set{"exit_code": st.ExitCode, "error_class": "", "error": "", "started_at": started, "completed_at": completed}})
	}
	class := st.ErrorClass
	if class == "" {
		class = wrapper.ClassExit
	}
	run["status"] = store.Failed
	a.retryAfter = 0
	if class == wrapper.ClassRateLimit {
		// The limit is the account's: pause every launch on the api_mode
		// the attempt ran under until the reset the tool named, measured
		// from now on the controller's clock (the wrapper gives it in
		// seconds), or for the backoff when it named none. The pause, not
		// the task, does the waiting: the retry may run at once under a
		// fallback mode or on another node's account.
		a.retryAfter = time.Duration(st.RetryAfterSeconds * float64(time.Second))
		pause := a.retryAfter
		if pause <= 0 {
			// A limit is seldom over in less than a minute: a shorter
			// pause would spend the rate-limit retries on the same
			// account instead of letting a fallback take over.
			pause = max(a.c.backoff(t.RateLimitRetries+1), unknownResetPause)
		}
		mode, err := a.tx.RunMode(ctx, t.Project, t.ID, t.Attempt)
		if err != nil {
			return err
		}
		if mode == "" {
			mode = a.c.modeKey(t.Node)
		}
		why := "reset named by the tool"
		if a.retryAfter <= 0 {
			why = "the tool named no reset; backing off"
		}
		if err := a.tx.PutPause(ctx, store.Pause{APIMode: mode, Until: a.now.Add(pause),
			Reason: fmt.Sprintf("rate limit hit by %s/%s on %s (%s)", t.Project, t.ID, t.Node, why)}); err != nil {
			return err
		}
	}
	if st.ToolMissing {
		// The tool's executable is not on the node: a retry would fail the
		// same way (validate and start check for it before anything runs;
		// this is a node that changed since).
		t.RetriesUsed = t.MaxRetries
	}
	return a.fail(ctx, t, t.Status, class, st.Error, st.ExitCode, run)
}

// modeKey names what a rate limit pauses: the node's api_mode, or the node
// itself when it has none (its own login).
func (c *Controller) modeKey(node string) string {
	if n, ok := c.cfg.Node(node); ok && n.APIMode != "" {
		return n.APIMode
	}
	return "node:" + node
}

// unknownResetPause is the shortest pause of an api_mode after a rate limit
// whose reset the tool did not name (claude facing a long Retry-After,
// codex with an API key).
const unknownResetPause = time.Minute

// maxRateLimitRetries caps the retries after rate limits, which do not use
// up max_retries.
const maxRateLimitRetries = 10

// fail moves the current attempt to failed with its run record, then retries
// it after the backoff when its class is retryable and retries remain.
func (a *applier) fail(ctx context.Context, t *store.Task, from, class, msg string, exitCode int, run store.Set) error {
	if err := a.tx.SetRun(ctx, t.Project, t.ID, t.Attempt, run); err != nil {
		return err
	}
	if msg == "" {
		msg = class
	}
	if err := a.transition(ctx, store.Change{Project: t.Project, Task: t.ID, From: from, To: store.Failed,
		Message: fmt.Sprintf("attempt %d failed (%s): %s", t.Attempt, class, msg),
		Set:     store.Set{"exit_code": exitCode, "error_class": class, "error": msg, "completed_at": a.now}}); err != nil {
		return err
	}
	return a.retry(ctx, t, store.Failed, class)
}

// lose marks the current attempt lost (its node is gone) and requeues it.
func (a *applier) lose(ctx context.Context, t *store.Task, msg string) error {
	if err := a.tx.SetRun(ctx, t.Project, t.ID, t.Attempt, store.Set{"status": store.Lost, "error_class": store.Lost, "error": msg}); err != nil {
		return err
	}
	if err := a.transition(ctx, store.Change{Project: t.Project, Task: t.ID, From: t.Status, To: store.Lost,
		Message: msg, Set: store.Set{"error_class": store.Lost, "error": msg}}); err != nil {
		return err
	}
	return a.retry(ctx, t, store.Lost, store.Lost)
}

func (a *applier) retry(ctx context.Context, t *store.Task, from, class string) error {
	if class == wrapper.ClassRateLimit {
		if t.RateLimitRetries >= maxRateLimitRetries {
			return a.tx.Event(ctx, store.Event{Project: t.Project, Task: t.ID, Attempt: t.Attempt, Kind: "gave_up",
				Message: fmt.Sprintf("rate limited %d times; giving up", t.RateLimitRetries)})
		}
		n := t.RateLimitRetries + 1
		delay := a.c.backoff(n)
		return a.transition(ctx, store.Change{Project: t.Project, Task: t.ID, From: from, To: store.Pending, Kind: "retry",
			Message: fmt.Sprintf("rate limited: retry %d of %d once its api_mode's pause ends or under a fallback (does not use max_retries)", n, maxRateLimitRetries),
			Set:     store.Set{"rate_limit_retries": n, "not_before": a.now.Add(delay)}})
	}
	if !retryable[class] || t.RetriesUsed >= t.MaxRetries {
		if from == store.Lost {
			return a.transition(ctx, store.Change{Project: t.Project, Task: t.ID, From: store.Lost, To: store.Failed,
				Message: fmt.Sprintf("out of retries (%d used)", t.RetriesUsed)})
		}
		if retryable[class] {
			return a.tx.Event(ctx, store.Event{Project: t.Project, Task: t.ID, Attempt: t.Attempt, Kind: "gave_up",
				Message: fmt.Sprintf("out of retries (%d of %d used)", t.RetriesUsed, t.MaxRetries)})
		}
		return a.tx.Event(ctx, store.Event{Project: t.Project, Task: t.ID, Attempt: t.Attempt, Kind: "gave_up",
			Message: fmt.Sprintf("%s errors are not retried", class)})
	}
	n := t.RetriesUsed + 1
	delay := a.c.backoff(n)
	return a.transition(ctx, store.Change{Project: t.Project, Task: t.ID, From: from, To: store.Pending, Kind: "retry",
		Message: fmt.Sprintf("retry %d of %d in %s", n, t.MaxRetries, delay.Round(time.Millisecond)),
		Set:     store.Set{"retries_used": n, "not_before": a.now.Add(delay)}})
}

// backoff is the delay before retry n: min(retry_backoff_max,
// retry_backoff × 2^(n-1)) plus up to 20% jitter.
func (c *Controller) backoff(n int) time.Duration {
	base := c.cfg.Controller.RetryBackoff
	d := time.Duration(float64(base) * math.Pow(2, float64(n-1)))
	if limit := c.cfg.Controller.RetryBackoffMax; d > limit || d <= 0 {
		d = limit
	}
	return d + time.Duration(float64(d)*0.2*c.opts.Jitter())
}

// blocked moves pending tasks with a dependency that failed for good (or is
// blocked or canceled) to blocked, and back to pending when the operator
// retried that dependency.
func (a *applier) blocked(ctx context.Context, tasks []store.Task) error {
	byID := make(map[string]*store.Task, len(tasks))
	for i := range tasks {
		byID[tasks[i].ID] = &tasks[i]
	}
	dead := func(s string) bool { return s == store.Failed || s == store.Blocked || s == store.Canceled }
	// Blocking propagates along chains; repeat until nothing changes.
	for changed := true; changed; {
		changed = false
		for i := range tasks {
			t := &tasks[i]
			var culprit string
			for _, d := range t.DependsOn {
				if dep := byID[d]; dep != nil && dead(dep.Status) {
					culprit = d + " " + dep.Status
					break
				}
			}
			switch {
			case t.Status == store.Pending && culprit != "":
				if err := a.transition(ctx, store.Change{Project: t.Project, Task: t.ID, From: store.Pending, To: store.Blocked,
					Message: "dependency " + culprit}); err != nil {
					return err
				}
				t.Status, changed = store.Blocked, true
			case t.Status == store.Blocked && culprit == "":
				if err := a.transition(ctx, store.Change{Project: t.Project, Task: t.ID, From: store.Blocked, To: store.Pending,
					Message: "dependencies no longer failed"}); err != nil {
					return err
				}
				t.Status, changed = store.Pending, true
			}
		}
	}
	return nil
}

// depsCompleted reports whether every dependency of t is completed.
func depsCompleted(t *store.Task, byID map[string]*store.Task) bool {
	return !slices.ContainsFunc(t.DependsOn, func(d string) bool {
		dep := byID[d]
		return dep == nil || dep.Status != store.Completed
	})
}

// parseRemoteTime reads a time the wrapper wrote, for display only.
func parseRemoteTime(s string, fallback time.Time) time.Time {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t
	}
	return fallback
}

// uncollectable requeues a completed task whose outputs were never collected
// when its node has been offline for node_offline_timeout: its results would
// otherwise never reach the operator, and the project would never finish.
func (a *applier) uncollectable(ctx context.Context, t *store.Task) error {
	p := a.pulls[t.Node]
	if p == nil || p.err == nil || p.skipped {
		return nil
	}
	since := a.prev[t.Node].OfflineSince
	if since.IsZero() || since.Before(a.c.started) {
		since = a.c.started
	}
	if a.now.Sub(since) < a.c.cfg.Controller.NodeOfflineTimeout {
		return nil
	}
	collected, err := a.tx.RunCollected(ctx, t.Project, t.ID, t.Attempt)
	if err != nil || collected {
		return err
	}
	return a.transition(ctx, store.Change{Project: t.Project, Task: t.ID, From: store.Completed, To: store.Pending, Kind: "requeue",
		Message: fmt.Sprintf("outputs of attempt %d could not be collected: %s offline since %s", t.Attempt, t.Node, since.Format(time.RFC3339))})
}

// stopStarting cancels the tasks that have not started once halt: {fail: N}
// or the project's budget is reached (running ones finish and are
// collected), so the project ends.
func (a *applier) stopStarting(ctx context.Context, project string, tasks []store.Task) error {
	p, err := a.tx.Project(ctx, project)
	if err != nil {
		return err
	}
	opts, err := p.ParseOptions()
	if err != nil {
		return err
	}
	if why, ok := haltReached(opts, tasks); ok {
		return a.cancelPending(ctx, project, tasks, "halt", why, nil)
	}
	if opts.BudgetUSD <= 0 && opts.BudgetTokens <= 0 {
		return nil
	}
	usd, tokens, err := a.tx.Spent(ctx, project)
	if err != nil {
		return err
	}
	if why, ok := opts.BudgetReached(usd, tokens); ok {
		return a.cancelPending(ctx, project, tasks, "budget", why+"; nothing new starts", store.Set{"error": why})
	}
	return nil
}

// haltReached says whether halt: {fail: N} stops the project, and how.
func haltReached(opts store.ProjectOptions, tasks []store.Task) (string, bool) {
	if opts.HaltFail <= 0 {
		return "", false
	}
	failed := 0
	for _, t := range tasks {
		if t.Status == store.Failed {
			failed++
		}
	}
	return fmt.Sprintf("halted: %d task(s) failed (halt: {fail: %d})", failed, opts.HaltFail), failed >= opts.HaltFail
}

// cancelPending cancels the project's pending and blocked tasks.
func (a *applier) cancelPending(ctx context.Context, project string, tasks []store.Task, kind, why string, set store.Set) error {
	for _, t := range tasks {
		if t.Status != store.Pending && t.Status != store.Blocked {
			continue
		}
		if err := a.transition(ctx, store.Change{Project: project, Task: t.ID, From: t.Status, To: store.Canceled, Kind: kind,
			Message: why, Set: set}); err != nil {
			return err
		}
	}
	return nil
}
