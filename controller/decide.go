package controller

import (
	"context"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/notify"
	"github.com/dispatch-tool/dispatch/policy"
	"github.com/dispatch-tool/dispatch/store"
	"github.com/dispatch-tool/dispatch/wire"
)

// op is one typed change to the database, decided before anything is
// written: exactly one of its fields is set.
type op struct {
	change  *store.Change
	task    *taskPatch
	attempt *attemptPatch
	pause   *store.Pause
	event   *store.Event
	// cancel cancels every pending and blocked task of its project (see
	// store.Tx.CancelWaiting), each as the change says.
	cancel *store.Change
	// beats records new heartbeats of one project's tasks in one write.
	beats *beats
	// gate records an attempt's gate run.
	gate *store.GateRun
	// stop stops a project with a problem of its own (see projectStop).
	stop *projectStop
}

// projectStop stops a project, as projectTrouble does, with problem.
type projectStop struct {
	project, problem string
}

// beats are new heartbeats (task ID → heartbeat) of a project's tasks,
// seen at the tick's time, with the order they were decided in.
type beats struct {
	project string
	at      time.Time
	hb      map[string]string
	order   []string
}

type taskPatch struct {
	project, id string
	patch       store.TaskPatch
}

type attemptPatch struct {
	key   attemptKey
	patch store.AttemptPatch
}

// exec writes o in tx.
func (o op) exec(ctx context.Context, tx *store.Tx) error {
	switch {
	case o.change != nil:
		_, _, err := tx.Transition(ctx, *o.change)
		return err
	case o.task != nil:
		return tx.SetTask(ctx, o.task.project, o.task.id, o.task.patch)
	case o.attempt != nil:
		return tx.SetAttempt(ctx, o.attempt.key.project, o.attempt.key.task, o.attempt.key.attempt, o.attempt.patch)
	case o.pause != nil:
		return tx.PutPause(ctx, *o.pause)
	case o.event != nil:
		return tx.Event(ctx, *o.event)
	case o.cancel != nil:
		_, err := tx.CancelWaiting(ctx, *o.cancel)
		return err
	case o.beats != nil:
		return tx.Beats(ctx, o.beats.project, o.beats.hb, o.beats.at)
	case o.gate != nil:
		return tx.PutGateRun(ctx, *o.gate)
	case o.stop != nil:
		return tx.SetProject(ctx, o.stop.project, store.ProjectPatch{State: new(domain.ProjectStopped), Problem: new(o.stop.problem)},
			"stopped: "+o.stop.problem+"; fix it, then dispatch start "+o.stop.project+" resumes")
	}
	return fmt.Errorf("empty op")
}

// String describes o in one line, for tests and logs: "S01 running→failed
// (…)", "run S01#1 status=failed", "pause team", "event S01 gave_up: …".
func (o op) String() string {
	switch {
	case o.change != nil:
		c := o.change
		return fmt.Sprintf("%s %s→%s: %s", c.Task, c.From, c.To, c.Message)
	case o.task != nil:
		return fmt.Sprintf("task %s %s", o.task.id, patchString(o.task.patch))
	case o.attempt != nil:
		return fmt.Sprintf("run %s#%d %s", o.attempt.key.task, o.attempt.key.attempt, patchString(o.attempt.patch))
	case o.pause != nil:
		return "pause " + o.pause.APIMode
	case o.event != nil:
		return fmt.Sprintf("event %s %s: %s", o.event.Task, o.event.Kind, o.event.Message)
	case o.cancel != nil:
		return fmt.Sprintf("every waiting task →canceled: %s", o.cancel.Message)
	case o.gate != nil:
		return fmt.Sprintf("gate %s#%d passed=%v", o.gate.Task, o.gate.Attempt, o.gate.Passed)
	case o.stop != nil:
		return fmt.Sprintf("stop %s: %s", o.stop.project, o.stop.problem)
	case o.beats != nil:
		var lines []string
		for _, id := range o.beats.order {
			hb := o.beats.hb[id]
			lines = append(lines, fmt.Sprintf("task %s %s", id, patchString(store.TaskPatch{Heartbeat: &hb, HeartbeatAt: &o.beats.at})))
		}
		return strings.Join(lines, "; ")
	}
	return "empty op"
}

// patchString lists the set fields of a patch as name=value.
func patchString(p any) string {
	var parts []string
	for f, v := range patchFields(p) {
		parts = append(parts, f+"="+v)
	}
	slices.Sort(parts)
	return strings.Join(parts, " ")
}

// patchFields returns the set fields of a patch struct by name, with their
// values.
func patchFields(p any) map[string]string {
	out := map[string]string{}
	v := reflect.ValueOf(p)
	for i := range v.NumField() {
		if f := v.Field(i); !f.IsNil() {
			val := f.Elem().Interface()
			if t, ok := val.(time.Time); ok {
				val = t.UTC().Format(time.RFC3339)
			}
			out[v.Type().Field(i).Name] = fmt.Sprint(val)
		}
	}
	return out
}

// attemptKey names one attempt.
type attemptKey struct {
	project, task string
	attempt       int
}

// attemptFacts is what the decisions read of an attempt's row.
type attemptFacts struct {
	mode      string
	collected bool
	// gating: the attempt is recorded as running its gate.
	gating bool
}

// projectFacts is what the decisions read of a project.
type projectFacts struct {
	opts    domain.ProjectOptions
	optsErr error
	usd     float64
	tokens  int64
}

// applier decides what a tick's node statuses mean for the tasks. It is
// pure: it reads the snapshot it is given (the tasks, what the pulls found,
// the facts of the attempts and projects it needs) and the controller's
// configuration, and records every change as a typed op; the executor
// writes them in one transaction (see apply). A transition also moves the
// task in memory, so that later decisions of the same tick (blocked
// dependents, halt, stale attempts) see it.
type applier struct {
	c     *Controller
	now   time.Time
	pulls map[string]*pull
	prev  map[string]store.Node
	// attempts holds what the decisions need of attempts' rows (see
	// neededAttempts); projects each project's options and spending.
	attempts map[attemptKey]attemptFacts
	projects map[string]projectFacts
	// counts are each project's tasks by status, kept up to date with the
	// tick's transitions; depStatus the status of dependencies that are
	// not among the tasks read (see snapshot).
	counts    map[string]map[domain.Status]int
	depStatus map[string]map[string]domain.Status
	modes     map[string]map[string]string
	// beats are the heartbeat ops of the tick, by project.
	beats map[string]*beats
	// after collects what the changes mean for the claims (see afterApply).
	after   afterApply
	ops     []op
	changed int
	// notices are the messages the changes call for (see notices.go).
	notices []notice
	// retryAfter is the reset time named by the rate limit being applied.
	retryAfter time.Duration
	// wake is the earliest moment after now at which a decision of this
	// kind falls due without any node saying a word: a retry's backoff
	// ends, an offline node's tasks are lost, a claim's grace or a
	// heartbeat runs out. Run ticks then, not at the next poll.
	wake time.Time
	// unlisted is when each node first named each project unlisted (see
	// decideUnlisted).
	unlisted map[unlistedKey]time.Time
	// unseen is when each attempt was last not seen: its node unheard
	// (its pull failed or still out) or unable to list its project
	// (unlistedGone). Its supervisor may not have been able to beat then,
	// so its hung clock counts from no earlier (see unseen.go).
	unseen map[attemptKey]time.Time
}

func (a *applier) emit(o op) { a.ops = append(a.ops, o) }

// stopProject stops project with problem, once in a tick.
func (a *applier) stopProject(project, problem string) {
	for _, o := range a.ops {
		if o.stop != nil && o.stop.project == project {
			return
		}
	}
	a.emit(op{stop: &projectStop{project: project, problem: problem}})
}

// dueAt notes a moment at which a tick has something to decide.
func (a *applier) dueAt(t time.Time) { a.wake = earliest(a.wake, t, a.now) }

// earliest returns the earlier of wake and t, ignoring t unless it comes
// after now (the zero wake is "none").
func earliest(wake, t, now time.Time) time.Time {
	if !t.After(now) || (!wake.IsZero() && !t.Before(wake)) {
		return wake
	}
	return t
}

// transition records a status change of t and makes it in memory.
func (a *applier) transition(t *domain.Task, ch store.Change) {
	a.emit(op{change: &ch})
	if n := a.counts[t.Project]; n != nil {
		n[t.Status]--
		n[ch.To]++
	}
	if live(t.Status) && !live(ch.To) {
		a.after.freed[t.Node]++
		if mode := a.modes[t.Project][t.ID]; mode != "" {
			a.after.modesFreed[mode]++
		}
	}
	ch.Set.ApplyTo(t)
	t.Status = ch.To
	a.changed++
}

func (a *applier) setAttempt(t *domain.Task, p store.AttemptPatch) {
	a.emit(op{attempt: &attemptPatch{attemptKey{t.Project, t.ID, t.Attempt}, p}})
}

func (a *applier) setTask(t *domain.Task, p store.TaskPatch) {
	a.emit(op{task: &taskPatch{t.Project, t.ID, p}})
}

func (a *applier) event(e store.Event) { a.emit(op{event: &e}) }

// beat records a new heartbeat of t, with the others of its project in
// one op (written where the first of them was decided).
func (a *applier) beat(t *domain.Task, hb string) {
	b := a.beats[t.Project]
	if b == nil {
		b = &beats{project: t.Project, at: a.now, hb: map[string]string{}}
		if a.beats == nil {
			a.beats = map[string]*beats{}
		}
		a.beats[t.Project] = b
		a.emit(op{beats: b})
	}
	if _, ok := b.hb[t.ID]; !ok {
		b.order = append(b.order, t.ID)
	}
	b.hb[t.ID] = hb
}

// project decides over one project's tasks: their attempts' statuses, then
// the dependents blocked or unblocked by them, then whether the project
// stops starting tasks.
func (a *applier) project(name string, tasks []*domain.Task) {
	first := len(a.notices)
	for _, t := range tasks {
		if t.Status == domain.Pending {
			a.dueAt(t.NotBefore)
		}
		a.task(t)
	}
	a.blocked(tasks)
	for i := first; i < len(a.notices); i++ {
		if n := &a.notices[i]; n.event == notify.TaskFailed && n.project == name {
			n.blocked = blockedBy(n.task, tasks)
			if len(n.blocked) > 0 {
				n.message += "; it blocks " + strings.Join(n.blocked, ", ")
			}
		}
	}
	a.stopStarting(name, tasks)
}

// blockedBy lists the blocked tasks that wait, directly or through others,
// on task id, in the order of tasks.
func blockedBy(id string, tasks []*domain.Task) []string {
	hit := map[string]bool{id: true}
	for changed := true; changed; {
		changed = false
		for _, t := range tasks {
			if hit[t.ID] || t.Status != domain.Blocked {
				continue
			}
			if slices.ContainsFunc(t.DependsOn, func(d string) bool { return hit[d] }) {
				hit[t.ID], changed = true, true
			}
		}
	}
	var out []string
	for _, t := range tasks {
		if t.ID != id && hit[t.ID] {
			out = append(out, t.ID)
		}
	}
	return out
}

// failedForGood notes the notice of a task that failed with no retry
// left: sent with the tick's others, while its run goes on.
func (a *applier) failedForGood(t *domain.Task, why string) {
	a.notices = append(a.notices, notice{project: t.Project, event: notify.TaskFailed, task: t.ID, attempt: t.Attempt,
		node: t.Node, class: t.ErrorClass, err: t.Error, logTail: true,
		message: fmt.Sprintf("%s failed for good on %s (%s): %s", t.ID, t.Node, t.ErrorClass, why)})
}

func (a *applier) task(t *domain.Task) {
	if t.Status == domain.Completed {
		a.uncollectable(t)
		return
	}
	if t.Status != domain.Claimed && t.Status != domain.Running {
		return
	}
	// A node removed from nodes.yaml is kept while its attempts run (it
	// drains): only one this controller no longer has is gone.
	if _, configured := a.c.config().Node(t.Node); !configured && a.c.nodes[t.Node] == nil {
		a.lose(t, fmt.Sprintf("node %s is no longer in nodes.yaml", t.Node))
		return
	}
	p := a.pulls[t.Node]
	if p == nil {
		return // a node this controller does not serve (--nodes)
	}
	if p.skipped {
		a.notSeen(t) // still busy answering: unheard (see unseen.go)
		return
	}
	if p.err != nil {
		since := a.offlineSince(t.Node)
		if a.now.Sub(since) >= a.c.config().Controller.NodeOfflineTimeout {
			a.lose(t, fmt.Sprintf("node %s offline since %s: %v", t.Node, since.Format(time.RFC3339), p.err))
		} else {
			a.notSeen(t)
			a.dueAt(since.Add(a.c.config().Controller.NodeOfflineTimeout))
		}
		return
	}
	ts := p.tasks[taskKey(t.Project, t.ID)]
	var st *wire.Status
	if ts != nil && ts.Status != nil && ts.Status.Attempt == t.Attempt {
		st = ts.Status
	}
	if st == nil {
		if p.partial {
			// The stream said nothing of this attempt since the last
			// tick: nothing is known that the last tick did not know.
			return
		}
		if u, unlisted := p.unlisted[t.Project]; unlisted && ts == nil {
			// The node could not list the project's tasks (an unconfined
			// task chmodded them, see unlisted.go): the attempt is
			// unknown, neither gone nor crashed, for a while.
			a.unlistedGone(t, u)
			return
		}
		a.noStatus(t, ts)
		return
	}
	switch st.Status {
	case wire.StatusRunning:
		a.running(t, ts, st)
	case wire.StatusCompleted, wire.StatusFailed, wire.StatusKilled:
		a.finished(t, st)
	default:
		a.event(store.Event{Project: t.Project, Task: t.ID, Attempt: t.Attempt, Kind: "warning",
			Node: t.Node, Message: fmt.Sprintf("unknown status %q in status.json", st.Status)})
	}
}

// offlineSince is when node went offline by this controller's own clock
// (its last word, when the transport knows it, see pull.silent): never
// before this controller started, which never inherits offline time from
// a controller that stopped long ago.
func (a *applier) offlineSince(node string) time.Time {
	since := a.prev[node].OfflineSince
	if since.IsZero() {
		since = a.pulls[node].offlineFrom(a.now)
	}
	return later(since, a.c.started)
}

func later(t, u time.Time) time.Time {
	if t.Before(u) {
		return u
	}
	return t
}

// noStatus handles a claimed or running attempt whose status.json on the
// node is missing, unreadable or belongs to another attempt.
func (a *applier) noStatus(t *domain.Task, ts *wire.TaskStatus) {
	if ts != nil && ts.Again != "" && !ts.Alive {
		// Ended from outside before it started (its executor says): lost,
		// as with a node gone, so it runs again without using a retry.
		a.lose(t, ts.Again)
		return
	}
	if t.Status == domain.Claimed {
		// The launch may still be in flight (or died with a controller):
		// wait a little, then requeue. A late `run` of this attempt is harmless:
		// its status belongs to an attempt that is no longer current.
		if ts != nil && ts.Alive {
			// A launch in doubt whose supervisor lives: it is followed as an
			// acknowledged one is (hung after heartbeat_timeout without a
			// status), unless its batch job waits in a queue.
			if ts.Waiting == "" {
				a.awaitStatus(t, ts)
			} else {
				a.jobWaits(t, ts)
			}
			return
		}
		// A claim made by an earlier controller process has no launch in
		// flight any more: settle it soon after this controller starts.
		grace := claimGrace
		if t.HeartbeatAt.Before(a.c.started) {
			grace = min(grace, a.c.started.Add(restartGrace).Sub(t.HeartbeatAt))
		}
		if a.now.Sub(t.HeartbeatAt) < grace {
			a.dueAt(t.HeartbeatAt.Add(grace))
			return
		}
		a.setAttempt(t, store.AttemptPatch{Status: new(domain.Lost), Error: new("the launch never started on the node")})
		a.transition(t, store.Change{Project: t.Project, Task: t.ID, From: domain.Claimed, To: domain.Pending,
			Kind: "requeue", Message: "no trace of attempt on " + t.Node + "; launching again"})
		return
	}
	if ts != nil && ts.Alive {
		if ts.Waiting != "" {
			a.jobWaits(t, ts)
			return
		}
		a.awaitStatus(t, ts)
		return
	}
	msg := "status.json of the attempt is missing on the node"
	if ts != nil && ts.StatusError != "" {
		msg = "status.json unreadable (" + ts.StatusError + ") and the wrapper is gone"
	}
	a.fail(t, domain.Running, wire.ClassCrash, msg, 0,
		store.AttemptPatch{Status: new(domain.Failed), ErrorClass: new(wire.ClassCrash), Error: new(msg)})
}

// queued restarts the hung clock of an attempt whose batch job waits in
// its queue: heartbeat_timeout counts from when it stops waiting, not from
// its claim, so a job that waited long and then ends before it starts is
// run again (its executor's Again), never failed as hung.
func (a *applier) queued(t *domain.Task) {
	t.HeartbeatAt = a.now
	a.beat(t, t.Heartbeat)
}

// jobWaits handles an attempt whose batch job waits in its queue: no
// supervisor beats yet, and none is hung (the hung clock restarts, see
// queued); the task's warning and the attempt's waiting say why, and the
// attempt records its job (an adopted one too, migration 0030).
func (a *applier) jobWaits(t *domain.Task, ts *wire.TaskStatus) {
	if t.Warning != ts.Waiting {
		a.setTask(t, store.TaskPatch{Warning: new(ts.Waiting)})
		run := store.AttemptPatch{Waiting: new(ts.Waiting)}
		if ts.SlurmJob != "" {
			run.SlurmJob = new(ts.SlurmJob)
		}
		a.setAttempt(t, run)
	}
	a.queued(t)
}

// awaitStatus handles a running attempt whose supervisor holds the task's
// lock while status.json is not the attempt's: `run` replies as soon as
// the supervisor has the attempt, before it moves the earlier attempt
// aside and writes the first status (or while status.json is unreadable).
// It waits, with no claim grace: the node acknowledged the attempt. Its
// heartbeat is followed as a running attempt's is, and a supervisor that
// writes neither a status of the attempt nor a new heartbeat for
// heartbeat_timeout is hung. An unreadable status.json is said in a
// warning once the supervisor beats (before, it is starting).
func (a *applier) awaitStatus(t *domain.Task, ts *wire.TaskStatus) {
	if ts.Heartbeat != t.Heartbeat {
		t.HeartbeatAt = a.now
		w := ""
		if ts.StatusError != "" {
			w = "status.json: " + ts.StatusError
		}
		if w != t.Warning {
			a.setTask(t, store.TaskPatch{Heartbeat: new(ts.Heartbeat), HeartbeatAt: new(a.now), Warning: new(w)})
			t.Heartbeat, t.Warning = ts.Heartbeat, w
		} else {
			t.Heartbeat = ts.Heartbeat
			a.beat(t, ts.Heartbeat)
		}
	}
	since := a.hungSince(t)
	if stale := a.now.Sub(since); stale >= a.c.config().Controller.HeartbeatTimeout {
		msg := fmt.Sprintf("hung: no status of attempt %d and no heartbeat for %s while its supervisor holds the task's lock", t.Attempt, stale.Round(time.Second))
		if ts.StatusError != "" {
			msg += " (status.json: " + ts.StatusError + ")"
		}
		a.fail(t, t.Status, wire.ClassHung, msg, 0,
			store.AttemptPatch{Status: new(domain.Failed), ErrorClass: new(wire.ClassHung), Error: new(msg), CompletedAt: new(a.now)})
		return
	}
	a.dueAt(since.Add(a.c.config().Controller.HeartbeatTimeout))
}

func (a *applier) running(t *domain.Task, ts *wire.TaskStatus, st *wire.Status) {
	started := parseRemoteTime(st.StartedAt, a.now)
	if t.Status == domain.Claimed {
		a.transition(t, store.Change{Project: t.Project, Task: t.ID, From: domain.Claimed, To: domain.Running,
			Message: fmt.Sprintf("on %s (pid %d)", t.Node, st.PID), Set: store.TaskPatch{StartedAt: new(started)}})
		a.setAttempt(t, store.AttemptPatch{Status: new(domain.Running), PID: new(st.PID), StartedAt: new(started)})
	}
	if ts.Heartbeat != t.Heartbeat {
		t.HeartbeatAt = a.now
		if t.Warning != "" {
			a.setTask(t, store.TaskPatch{Heartbeat: new(ts.Heartbeat), HeartbeatAt: new(a.now), Warning: new("")})
			a.setAttempt(t, store.AttemptPatch{Waiting: new("")}) // its job waits no more
		} else {
			// Written without a new version: the task held is changed
			// here as the row is (see store.Tx.Beats).
			t.Heartbeat = ts.Heartbeat
			a.beat(t, ts.Heartbeat)
		}
	}
	if k := (attemptKey{t.Project, t.ID, t.Attempt}); st.Gating && ts.Alive && !a.attempts[k].gating {
		// The tool ended well; its result is being gated: status says so.
		a.setAttempt(t, store.AttemptPatch{Gating: new(true)})
		a.event(store.Event{Project: t.Project, Task: t.ID, Attempt: t.Attempt, Kind: "gate", Node: t.Node,
			Message: fmt.Sprintf("the tool ended; the gate runs on its result: %s", a.projects[t.Project].opts.GateFor(t.ID))})
	}
	if !ts.Alive {
		msg := fmt.Sprintf("wrapper (pid %d) is gone while the attempt was running", st.PID)
		a.fail(t, domain.Running, wire.ClassCrash, msg, 0,
			store.AttemptPatch{Status: new(domain.Failed), ErrorClass: new(wire.ClassCrash), Error: new(msg), CompletedAt: new(a.now)})
		return
	}
	// The wrapper lives but its heartbeat stopped (frozen, stopped, a hung
	// filesystem) for heartbeat_timeout, by the controller's own clock and
	// counted from no earlier than this controller's start: the attempt is
	// hung. It fails and is retried like a crash; being no longer current,
	// it is killed as stale before the retry may launch.
	since := a.hungSince(t)
	if stale := a.now.Sub(since); stale >= a.c.config().Controller.HeartbeatTimeout {
		msg := fmt.Sprintf("hung: heartbeat unchanged for %s while the wrapper (pid %d) is alive", stale.Round(time.Second), st.PID)
		a.fail(t, t.Status, wire.ClassHung, msg, 0,
			store.AttemptPatch{Status: new(domain.Failed), ErrorClass: new(wire.ClassHung), Error: new(msg), CompletedAt: new(a.now)})
		return
	}
	a.dueAt(since.Add(a.c.config().Controller.HeartbeatTimeout))
}

func (a *applier) finished(t *domain.Task, status *wire.Status) {
	// The figures are the tool's only when it is an agent CLI, and no
	// attempt costs more than its project's ceiling.
	tool := a.toolOf(t)
	st := *status
	ceiling := a.projects[t.Project].opts.AttemptCeiling()
	reported := st.CostUSD
	var over bool
	st.TokensIn, st.TokensOut, st.CostUSD, over = attemptUsage(tool, st, ceiling)
	if over {
		a.event(store.Event{Project: t.Project, Task: t.ID, Attempt: t.Attempt, Kind: "cost_ceiling", Node: t.Node,
			Message: fmt.Sprintf("attempt %d reported a cost of $%.2f, over budget.max_attempt_usd: counted as $%.2f", t.Attempt, reported, ceiling)})
	}
	a.spend(t.Project, &st)
	completed := parseRemoteTime(st.CompletedAt, a.now)
	started := parseRemoteTime(st.StartedAt, completed)
	run := store.AttemptPatch{Status: new(domain.Status(st.Status)), PID: new(st.PID), ExitCode: new(st.ExitCode), Signal: new(st.Signal),
		ErrorClass: new(st.ErrorClass), Error: new(st.Error), StartedAt: new(started), CompletedAt: new(completed),
		LogBytes: new(st.LogBytes), TokensIn: new(st.TokensIn), TokensOut: new(st.TokensOut), CostUSD: new(st.CostUSD),
		SessionID: new(st.SessionID), Sandbox: new(st.Sandbox)}
	if st.Commit != "" {
		run.Commit = new(st.Commit)
	}
	if wire.IsAgent(tool) && st.FinalMessage != "" {
		// A shell's status is the task's to forge: it says nothing to
		// its dependents' agents.
		run.FinalMessage = new(st.FinalMessage)
	}
	command := a.projects[t.Project].opts.GateFor(t.ID)
	if g := st.Gate; g != nil && command != "" {
		gr := gateRun(t, tool, command, g)
		a.emit(op{gate: &gr})
		if g.Missing {
			a.stopProject(t.Project, fmt.Sprintf("the gate command `%s` was not found on node %s (exit 127): install it there, or fix gate: in project.yaml", command, t.Node))
		}
		if !g.Passed {
			a.notices = append(a.notices, notice{project: t.Project, event: notify.GateFailed, task: t.ID, attempt: t.Attempt,
				node: t.Node, class: wire.ClassGate, err: gateWhy(gr), tail: g.OutputTail,
				message: fmt.Sprintf("the gate `%s` failed on %s attempt %d: %s", command, t.ID, t.Attempt, gateWhy(gr))})
		}
	}
	if st.Status == wire.StatusCompleted && command != "" && a.projects[t.Project].opts.GateDecides(t.ID) && (st.Gate == nil || !st.Gate.Passed) {
		// status.json is the task's to rewrite; the gate's result comes
		// from the supervisor's private record. A completion without a
		// passing gate there is not the supervisor's (the task wrote it
		// while its tool ran, or after): a failed gate.
		why := "its gate did not pass"
		if st.Gate == nil {
			why = "its gate did not run (the wrapper's record holds no gate result)"
		}
		st.Status, st.ErrorClass = wire.StatusFailed, wire.ClassGate
		st.Error = "status.json says completed, but " + why
		run.Status, run.ErrorClass, run.Error = new(domain.Failed), new(st.ErrorClass), new(st.Error)
	}
	if st.Status == wire.StatusCompleted {
		a.setAttempt(t, run)
		a.transition(t, store.Change{Project: t.Project, Task: t.ID, From: t.Status, To: domain.Completed,
			Message: "on " + t.Node,
			Set: store.TaskPatch{ExitCode: new(st.ExitCode), ErrorClass: new(""), Error: new(""), StartedAt: new(started),
				CompletedAt: new(completed)}})
		return
	}
	class := trustedClass(tool, st.ErrorClass)
	run.Status, run.ErrorClass = new(domain.Failed), new(class)
	a.retryAfter = 0
	if class == wire.ClassRateLimit {
		a.pauseMode(t, tool, &st)
	}
	if why := noRetry(t, class, command, &st); why != "" {
		a.failAttempt(t, t.Status, class, st.Error, st.ExitCode, run)
		a.event(store.Event{Project: t.Project, Task: t.ID, Attempt: t.Attempt, Kind: "gave_up", Message: why})
		a.failedForGood(t, why)
		return
	}
	a.fail(t, t.Status, class, st.Error, st.ExitCode, run)
}

// noRetry says why a failed attempt of t is not retried whatever its
// retries left, "" when its class decides: a retry would fail the same
// way. A gate command that is not on the node (the project is stopped
// with it, once), a tool's executable that is not (validate and start
// check for it before anything runs; this is a node that changed since),
// and any start failure the wrapper classes start_permanent (a tool the
// sandbox cannot run, a bad launch: its error names the fix).
// The advice is the stop's and the report's: `dispatch start`, which
// takes project.yaml's gate: anew (a retry keeps the one the run began
// with).
func noRetry(t *domain.Task, class, command string, st *wire.Status) string {
	switch {
	case class == wire.ClassGate && st.Gate != nil && st.Gate.Missing:
		return fmt.Sprintf("not retried (a retry would fail the same way): the gate command `%s` was not found on node %s; "+
			"install it there or fix gate: in project.yaml, then dispatch start %s", command, t.Node, t.Project)
	case st.ToolMissing:
		return fmt.Sprintf("not retried (a retry would fail the same way): its tool's executable is not on node %s; "+
			"install it there, then dispatch retry %s %s", t.Node, t.Project, t.ID)
	case class == wire.ClassStartPermanent:
		return fmt.Sprintf("not retried (a retry would fail the same way): %s; once fixed, dispatch retry %s %s",
			strings.TrimSuffix(st.Error, "."), t.Project, t.ID)
	}
	return ""
}

// spend adds what a finished attempt cost to its project's spending, so
// that the budget check of this same tick counts it (the snapshot's
// figures were read before the attempt's row is written). The
// wrapper's figures are clamped: never negative, the cost bounded.
func (a *applier) spend(project string, st *wire.Status) {
	f, ok := a.projects[project]
	if !ok {
		return
	}
	f.usd += st.CostUSD
	if tok := st.TokensIn + st.TokensOut; tok >= 0 && f.tokens < math.MaxInt64/2-tok {
		f.tokens += tok
	} else {
		f.tokens = math.MaxInt64 / 2
	}
	a.projects[project] = f
}

// pauseMode pauses every launch on the api_mode a rate-limited attempt ran
// under: the limit is the account's. The pause lasts until the reset the
// tool named, measured from now on the controller's clock (the wrapper
// gives it in seconds), when the tool is an agent CLI; else for the
// backoff, at most retry_backoff_max (see ratePause). The pause, not the
// task, does the waiting: the retry may run at once under a fallback mode
// or on another node's account.
func (a *applier) pauseMode(t *domain.Task, tool string, st *wire.Status) {
	a.retryAfter = trustedReset(tool, st.RetryAfterSeconds)
	pause := ratePause(a.retryAfter, a.c.backoff(t.RateLimitRetries+1), a.c.config().Controller.RetryBackoffMax)
	mode := a.attempts[attemptKey{t.Project, t.ID, t.Attempt}].mode
	if mode == "" {
		mode = a.c.modeKey(t.Node)
	}
	why := "reset named by the tool"
	switch {
	case a.retryAfter > 0:
	default:
		why = "the tool named no reset; backing off"
	}
	reason := fmt.Sprintf("rate limit hit by %s/%s on %s (%s)", t.Project, t.ID, t.Node, why)
	a.emit(op{pause: &store.Pause{APIMode: mode, Until: a.now.Add(pause), Reason: reason}})
	a.after.paused[mode] = later(a.after.paused[mode], a.now.Add(pause))
	said := "api_mode " + mode + " paused"
	for _, n := range a.notices {
		if n.project == t.Project && n.event == notify.ModePaused && strings.HasPrefix(n.message, said+" ") {
			return // one message per mode and project in a tick
		}
	}
	a.notices = append(a.notices, notice{project: t.Project, event: notify.ModePaused,
		message: fmt.Sprintf("%s until %s: %s", said, a.now.Add(pause).UTC().Format(time.RFC3339), reason)})
}

// toolOf is the tool an attempt of t runs, as its launch resolved it.
func (a *applier) toolOf(t *domain.Task) string {
	n, _ := a.c.config().Node(t.Node)
	return policy.ToolFor(t.Tool, n)
}

// modeKey names what a rate limit pauses: the node's api_mode, or the node
// itself when it has none (its own login).
func (c *Controller) modeKey(node string) string {
	if n, ok := c.config().Node(node); ok && n.APIMode != "" {
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

// maxLostRetries caps the requeues after attempts lost with their node,
// which do not use up max_retries either.
const maxLostRetries = 10

// fail moves the current attempt to failed with its run record, then retries
// it after the backoff when its class is retryable and retries remain.
func (a *applier) fail(t *domain.Task, from domain.Status, class, msg string, exitCode int, run store.AttemptPatch) {
	a.failAttempt(t, from, class, msg, exitCode, run)
	a.retry(t, domain.Failed, class)
}

// failAttempt moves the current attempt to failed with its run record.
func (a *applier) failAttempt(t *domain.Task, from domain.Status, class, msg string, exitCode int, run store.AttemptPatch) {
	a.setAttempt(t, run)
	if msg == "" {
		msg = class
	}
	a.transition(t, store.Change{Project: t.Project, Task: t.ID, From: from, To: domain.Failed,
		Message: fmt.Sprintf("attempt %d failed (%s): %s", t.Attempt, class, msg),
		Set:     store.TaskPatch{ExitCode: new(exitCode), ErrorClass: new(class), Error: new(msg), CompletedAt: new(a.now)}})
}

// The error classes the controller writes itself, each the same word as the
// attempt's status: an attempt lost with its node, or killed by the operator.
const (
	classLost   = string(domain.Lost)
	classKilled = string(domain.Killed)
)

// lose marks the current attempt lost (its node is gone) and requeues it.
func (a *applier) lose(t *domain.Task, msg string) {
	a.setAttempt(t, store.AttemptPatch{Status: new(domain.Lost), ErrorClass: new(classLost), Error: new(msg)})
	a.transition(t, store.Change{Project: t.Project, Task: t.ID, From: t.Status, To: domain.Lost,
		Message: msg, Set: store.TaskPatch{ErrorClass: new(classLost), Error: new(msg)}})
	a.retry(t, domain.Lost, classLost)
}

func (a *applier) retry(t *domain.Task, from domain.Status, class string) {
	change, gaveUp := decideRetry(*t, from, class, a.now, func(n int) time.Duration { return a.c.taskBackoff(t.RetryBackoff, n) })
	switch {
	case change != nil:
		a.transition(t, *change)
		if nb := change.Set.NotBefore; nb != nil {
			a.dueAt(*nb)
		}
		if change.To == domain.Failed {
			a.failedForGood(t, change.Message)
		}
	case gaveUp != "":
		a.event(store.Event{Project: t.Project, Task: t.ID, Attempt: t.Attempt, Kind: "gave_up", Message: gaveUp})
		a.failedForGood(t, gaveUp)
	}
}

// decideRetry is the retry policy for an attempt of t that just moved to
// from (failed or lost) with an error class: a transition back to pending
// with its not_before (or, for a lost attempt out of retries, to failed),
// or no transition and why the task gives up. backoff(n) is the delay
// before retry n. Rate limits have their own count and never use up
// max_retries.
func decideRetry(t domain.Task, from domain.Status, class string, now time.Time, backoff func(int) time.Duration) (change *store.Change, gaveUp string) {
	if class == wire.ClassRateLimit {
		if t.RateLimitRetries >= maxRateLimitRetries {
			return nil, fmt.Sprintf("rate limited %d times; giving up", t.RateLimitRetries)
		}
		n := t.RateLimitRetries + 1
		return &store.Change{Project: t.Project, Task: t.ID, From: from, To: domain.Pending, Kind: "retry",
			Message: fmt.Sprintf("rate limited: retry %d of %d once its api_mode's pause ends or under a fallback (does not use max_retries)", n, maxRateLimitRetries),
			Set:     store.TaskPatch{RateLimitRetries: new(n), NotBefore: new(now.Add(backoff(n)))}}, ""
	}
	if class == classLost {
		// The node was lost, not the task's doing: requeued at once, for
		// another node, without using max_retries; a task that takes its
		// node down every time still ends.
		if t.LostRetries >= maxLostRetries {
			return &store.Change{Project: t.Project, Task: t.ID, From: from, To: domain.Failed,
				Message: fmt.Sprintf("lost with its node %d times; giving up", t.LostRetries)}, ""
		}
		n := t.LostRetries + 1
		return &store.Change{Project: t.Project, Task: t.ID, From: from, To: domain.Pending, Kind: "retry",
			Message: fmt.Sprintf("lost with its node: requeued at once (%d of %d; does not use max_retries)", n, maxLostRetries),
			Set:     store.TaskPatch{LostRetries: new(n), NotBefore: new(now)}}, ""
	}
	if !retryable[class] || t.RetriesUsed >= t.MaxRetries {
		switch {
		case retryable[class]:
			return nil, fmt.Sprintf("out of retries (%d of %d used)", t.RetriesUsed, t.MaxRetries)
		case class == wire.ClassOOM || class == wire.ClassPids:
			// The same task would need the same again.
			return nil, fmt.Sprintf("killed for its %s limit: not retried; raise limits.%s and `dispatch retry`", limitName[class], limitName[class])
		}
		return nil, fmt.Sprintf("%s errors are not retried", class)
	}
	n := t.RetriesUsed + 1
	delay := backoff(n)
	return &store.Change{Project: t.Project, Task: t.ID, From: from, To: domain.Pending, Kind: "retry",
		Message: fmt.Sprintf("retry %d of %d in %s", n, t.MaxRetries, delay.Round(time.Millisecond)),
		Set:     store.TaskPatch{RetriesUsed: new(n), NotBefore: new(now.Add(delay))}}, ""
}

// backoff is the delay before retry n: min(retry_backoff_max,
// retry_backoff × 2^(n-1)) plus up to 20% jitter.
func (c *Controller) backoff(n int) time.Duration { return c.taskBackoff(0, n) }

// taskBackoff is backoff with a task's own retry_backoff as the base (0:
// the controller's); the cap is retry_backoff_max, or the task's base when
// that is larger.
func (c *Controller) taskBackoff(base time.Duration, n int) time.Duration {
	limit := c.config().Controller.RetryBackoffMax
	if base <= 0 {
		base = c.config().Controller.RetryBackoff
	}
	limit = max(limit, base)
	d := time.Duration(float64(base) * math.Pow(2, float64(n-1)))
	if d > limit || d <= 0 {
		d = limit
	}
	return d + time.Duration(float64(d)*0.2*c.opts.Jitter())
}

// blocked moves pending tasks with a dependency that failed for good (or is
// blocked or canceled) to blocked, and back to pending when the operator
// retried that dependency.
func (a *applier) blocked(tasks []*domain.Task) {
	byID := make(map[string]*domain.Task, len(tasks))
	for _, t := range tasks {
		byID[t.ID] = t
	}
	dead := func(s domain.Status) bool { return s == domain.Failed || s == domain.Blocked || s == domain.Canceled }
	// Blocking propagates along chains; repeat until nothing changes.
	for changed := true; changed; {
		changed = false
		for _, t := range tasks {
			if t.Status != domain.Pending && t.Status != domain.Blocked {
				continue
			}
			var culprit string
			for _, d := range t.DependsOn {
				st := a.depStatus[t.Project][d]
				if dep := byID[d]; dep != nil {
					st = dep.Status
				}
				if dead(st) {
					culprit = d + " " + string(st)
					break
				}
			}
			switch {
			case t.Status == domain.Pending && culprit != "":
				a.transition(t, store.Change{Project: t.Project, Task: t.ID, From: domain.Pending, To: domain.Blocked,
					Message: "dependency " + culprit})
				changed = true
			case t.Status == domain.Blocked && culprit == "":
				a.transition(t, store.Change{Project: t.Project, Task: t.ID, From: domain.Blocked, To: domain.Pending,
					Message: "dependencies no longer failed"})
				changed = true
			}
		}
	}
}

// depsCompleted reports whether every dependency of t is completed.
func depsCompleted(t *domain.Task, byID map[string]*domain.Task) bool {
	return !slices.ContainsFunc(t.DependsOn, func(d string) bool {
		dep := byID[d]
		return dep == nil || dep.Status != domain.Completed
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
func (a *applier) uncollectable(t *domain.Task) {
	p := a.pulls[t.Node]
	if p == nil || p.err == nil || p.skipped {
		return
	}
	// Offline since its first failed pull (a node online until this tick
	// has no OfflineSince yet: counting from the controller's start lost a
	// long-running controller's finished work to one failed pull).
	since := a.offlineSince(t.Node)
	if a.now.Sub(since) < a.c.config().Controller.NodeOfflineTimeout {
		if !a.attempts[attemptKey{t.Project, t.ID, t.Attempt}].collected {
			a.dueAt(since.Add(a.c.config().Controller.NodeOfflineTimeout))
		}
		return
	}
	if a.attempts[attemptKey{t.Project, t.ID, t.Attempt}].collected {
		return
	}
	a.transition(t, store.Change{Project: t.Project, Task: t.ID, From: domain.Completed, To: domain.Pending, Kind: "requeue",
		Message: fmt.Sprintf("outputs of attempt %d could not be collected: %s offline since %s", t.Attempt, t.Node, since.Format(time.RFC3339))})
}

// stopStarting cancels the tasks that have not started once halt: {fail: N}
// or the project's budget is reached (running ones finish and are
// collected), so the project ends.
func (a *applier) stopStarting(project string, tasks []*domain.Task) {
	f := a.projects[project]
	if f.optsErr != nil {
		return // reported where the project's options are used to launch
	}
	if why, ok := haltReached(f.opts, a.counts[project][domain.Failed]); ok {
		a.cancelPending(project, tasks, "halt", why, store.TaskPatch{})
		return
	}
	if why, ok := f.opts.BudgetReached(f.usd, f.tokens); ok {
		if a.cancelPending(project, tasks, "budget", why+"; nothing new starts", store.TaskPatch{Error: new(why)}) > 0 {
			a.notices = append(a.notices, notice{project: project, event: notify.BudgetStopped, message: why + "; nothing new starts"})
		}
	}
}

// haltReached says whether halt: {fail: N} stops the project with failed
// tasks failed, and how.
func haltReached(opts domain.ProjectOptions, failed int) (string, bool) {
	if opts.HaltFail <= 0 {
		return "", false
	}
	return fmt.Sprintf("halted: %d task(s) failed (halt: {fail: %d})", failed, opts.HaltFail), failed >= opts.HaltFail
}

// cancelPending cancels the project's pending and blocked tasks: those
// read one by one, the rest (counted, not read) with one op that cancels
// every task still waiting when it is written. It returns how many.
func (a *applier) cancelPending(project string, tasks []*domain.Task, kind, why string, set store.TaskPatch) int {
	counts := a.counts[project]
	waiting := counts[domain.Pending] + counts[domain.Blocked]
	n := 0
	for _, t := range tasks {
		if t.Status != domain.Pending && t.Status != domain.Blocked {
			continue
		}
		a.transition(t, store.Change{Project: project, Task: t.ID, From: t.Status, To: domain.Canceled, Kind: kind,
			Message: why, Set: set})
		n++
	}
	if rest := waiting - n; rest > 0 {
		a.emit(op{cancel: &store.Change{Project: project, Kind: kind, Message: why, Set: set}})
		a.after.canceledAll[project] = true
		counts[domain.Canceled] += rest
		counts[domain.Pending], counts[domain.Blocked] = 0, 0
		a.changed += rest
		n += rest
	}
	return n
}

// neededAttempts lists the attempts whose rows the decisions over tasks
// will read: the api_mode of an attempt that hit a rate limit, whether a
// completed attempt on an offline node was collected.
func neededAttempts(tasks []*domain.Task, pulls map[string]*pull) []attemptKey {
	var out []attemptKey
	for _, t := range tasks {
		p := pulls[t.Node]
		if p == nil || p.skipped {
			continue
		}
		switch {
		case t.Status == domain.Completed && p.err != nil:
		case (t.Status == domain.Claimed || t.Status == domain.Running) && p.err == nil:
			ts := p.tasks[taskKey(t.Project, t.ID)]
			if ts == nil || ts.Status == nil || ts.Status.Attempt != t.Attempt || ts.Status.ErrorClass != wire.ClassRateLimit && !ts.Status.Gating {
				continue
			}
		default:
			continue
		}
		out = append(out, attemptKey{t.Project, t.ID, t.Attempt})
	}
	return out
}
