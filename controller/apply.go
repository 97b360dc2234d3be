package controller

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/dispatch-tool/dispatch/controller/executor"
	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/notify"
	"github.com/dispatch-tool/dispatch/store"
	"github.com/dispatch-tool/dispatch/wire"
)

// limitName is the limit behind each class of a task killed for a limit
// (not retried: it would need the same again).
var limitName = map[string]string{wire.ClassOOM: "memory", wire.ClassPids: "pids"}

// retryable lists the error classes that are retried (SPEC §7 step 4).
var retryable = map[string]bool{
	wire.ClassExit: true, wire.ClassCrash: true, wire.ClassTimeout: true,
	wire.ClassRateLimit: true, wire.ClassStart: true, classLost: true,
	wire.ClassHung: true, wire.ClassStalled: true, wire.ClassGate: true,
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
	// grace is the time between SIGTERM and SIGKILL (0: staleGrace), and
	// preempted is set for an attempt a more urgent task stopped (see
	// preempt.go): its kill's reply is recorded.
	grace     time.Duration
	preempted bool
}

// snapshot is what one tick's decisions read from the database.
type snapshot struct {
	// projects lists the served projects in order, with the tasks a
	// decision of the tick may move (see store.TickRead): not every task
	// of the project, so that a steady tick costs what is live.
	projects []string
	tasks    map[string][]*domain.Task
	// depStatus holds, by project, the status of the dependencies of the
	// pending and blocked tasks read; counts the project's tasks by
	// status; nextDue the earliest backoff among its pending tasks.
	depStatus map[string]map[string]domain.Status
	counts    map[string]map[domain.Status]int
	nextDue   map[string]time.Time
	// modes holds, by project and task, the api_mode of each live
	// attempt (for the slots and modes the tick's changes free).
	modes    map[string]map[string]string
	facts    map[string]projectFacts
	attempts map[attemptKey]attemptFacts
	// damaged holds the served projects left out of projects, each with
	// the error that a row of theirs gave (store.ErrDamaged).
	damaged map[string]error
	// current indexes tasks by taskKey (currentTasks), once per tick.
	current map[string]*domain.Task
}

// readSnapshot reads, in tx, what the tick decides over in each served
// project (its live tasks, those the pulls name live, those a failure
// may block, counts; see store.TickRead), its options and spending, and
// the attempt facts the decisions will need.
func readSnapshot(ctx context.Context, tx *store.Tx, projects []string, pulls map[string]*pull, cache *taskCache) (*snapshot, error) {
	s := &snapshot{tasks: map[string][]*domain.Task{}, depStatus: map[string]map[string]domain.Status{}, counts: map[string]map[domain.Status]int{},
		nextDue: map[string]time.Time{}, modes: map[string]map[string]string{}, facts: map[string]projectFacts{}, attempts: map[attemptKey]attemptFacts{},
		damaged: map[string]error{}}
	named := namedLive(pulls)
	now := tx.Now()
	for _, name := range projects {
		slices.Sort(named[name]) // the tick's own slice, kept sorted by the cache
		read, ok, err := cache.reuse(ctx, tx, name, named[name], now)
		if err == nil && !ok {
			read, err = tx.TickTasks(ctx, name, named[name], now, cache.known(name))
		}
		if errors.Is(err, store.ErrDamaged) {
			// That project's trouble, not the tick's.
			s.damaged[name] = err
			continue
		}
		if err != nil {
			return nil, err
		}
		cache.keep(name, read, named[name])
		s.projects = append(s.projects, name)
		s.tasks[name], s.depStatus[name], s.counts[name], s.nextDue[name] = read.Tasks, read.DepStatus, read.Counts, read.NextDue
		s.modes[name] = read.Modes
		p, err := tx.Project(ctx, name)
		if err != nil {
			return nil, err
		}
		var f projectFacts
		f.opts, f.optsErr = p.ParseOptions()
		if f.optsErr == nil && f.opts.HasBudget() {
			if f.usd, f.tokens, err = tx.Spent(ctx, name); err != nil {
				return nil, err
			}
		}
		s.facts[name] = f
		for _, k := range neededAttempts(read.Tasks, pulls) {
			mode, collected, gating, err := tx.AttemptFacts(ctx, k.project, k.task, k.attempt)
			if err != nil {
				return nil, err
			}
			s.attempts[k] = attemptFacts{mode: mode, collected: collected, gating: gating}
		}
	}
	return s, nil
}

// namedLive lists, by project, the tasks the pulls report with a live
// attempt (or one whose wrapper died while it ran): the tasks findStale
// must know to tell the current attempt from a stale one (a task named
// twice is read once).
func namedLive(pulls map[string]*pull) map[string][]string {
	out := map[string][]string{}
	for _, p := range pulls {
		if p == nil || p.err != nil || p.status == nil {
			continue
		}
		for _, ts := range p.status.Tasks {
			if ts.Status != nil && (ts.Alive || ts.Status.Status == wire.StatusRunning) {
				out[ts.Project] = append(out[ts.Project], ts.Task)
			}
		}
	}
	return out
}

// applyPlan is what one tick decided from the pulls.
type applyPlan struct {
	nodes   []store.Node
	ops     []op
	changed int
	stale   []staleAttempt
	// notices are sent once the ops are recorded.
	notices []notice
	// wake is when the next decision falls due by the clock alone (see
	// applier.wake); zero when none does.
	wake time.Time
	// after is what the changes leave for the claims of the same tick.
	after afterApply
	// unlisted is when each node first named each project it cannot
	// list, as this plan leaves it (see decideUnlisted).
	unlisted map[unlistedKey]time.Time
	// unseen is when each attempt was last not seen, as this plan leaves
	// it (see applier.unseen).
	unseen map[attemptKey]time.Time
}

// decideApply decides, without I/O, what the pulls mean: each node's
// record, each task's changes (see applier), and the stale attempts to
// kill, with an event for those not announced in an earlier tick.
func (c *Controller) decideApply(snap *snapshot, pulls map[string]*pull, prev map[string]store.Node, announced map[string]bool, now time.Time) applyPlan {
	var plan applyPlan
	for _, name := range slices.Sorted(maps.Keys(pulls)) {
		if p := pulls[name]; !p.skipped {
			n := c.nodeRecord(name, p, prev[name], now)
			plan.nodes = append(plan.nodes, n)
			if nt, ok := nodeNotice(prev[name], n); ok {
				plan.notices = append(plan.notices, nt)
			}
		}
	}
	a := &applier{c: c, now: now, pulls: pulls, prev: prev, attempts: snap.attempts, projects: snap.facts,
		counts: snap.counts, depStatus: snap.depStatus, modes: snap.modes, after: newAfterApply()}
	served := make(map[string]bool, len(snap.projects))
	for _, project := range snap.projects {
		served[project] = true
	}
	var unlisted []store.Event
	plan.unlisted, unlisted = decideUnlisted(pulls, c.unlistedSince, served, now)
	a.unlisted = plan.unlisted
	a.unseen = stillUnseen(c.unseenAt, now, c.config().Controller.HeartbeatTimeout)
	for _, project := range snap.projects {
		a.dueAt(snap.nextDue[project])
		a.project(project, snap.tasks[project])
	}
	for _, ev := range unlisted {
		a.event(ev)
	}
	if snap.current == nil {
		snap.current = currentTasks(snap)
	}
	current := snap.current
	plan.stale = findStale(pulls, current, c.draining)
	// A project whose tasks could not be read has none in current: its
	// attempts are not stale, only unknown until it is read again.
	plan.stale = slices.DeleteFunc(plan.stale, func(sa staleAttempt) bool { return snap.damaged[sa.project] != nil })
	for _, sa := range plan.stale {
		if announced[killKey(sa)] {
			continue // said in an earlier tick; the kill goes on
		}
		ev := store.Event{Project: sa.project, Task: sa.task, Attempt: sa.attempt, Kind: "stale",
			Node: sa.node, Message: fmt.Sprintf("attempt %d still runs on %s but is not current; killing it", sa.attempt, sa.node)}
		if sa.orphan {
			ev.Kind = "orphan"
			ev.Message = fmt.Sprintf("the wrapper of attempt %d on %s is gone; killing what its tool left running before the task runs again", sa.attempt, sa.node)
		}
		a.event(ev)
	}
	plan.ops, plan.changed, plan.wake, plan.unseen = a.ops, a.changed, a.wake, a.unseen
	plan.notices = append(plan.notices, a.notices...)
	plan.after = a.after
	plan.after.tasks = current
	return plan
}

// currentTasks indexes the tasks of a snapshot by taskKey.
func currentTasks(snap *snapshot) map[string]*domain.Task {
	current := map[string]*domain.Task{}
	for _, project := range snap.projects {
		for _, t := range snap.tasks[project] {
			current[taskKey(project, t.ID)] = t
		}
	}
	return current
}

// findStale lists the live attempts the pulls found that the database does
// not expect on that node.
// A reply naming one task many times gives one stale attempt (see killKey).
// While a node drains (draining, see reload.go), an attempt current on it
// that another node sees too, or one current on another node that it
// sees, is the same attempt seen under two names (a node renamed, or
// reached anew, over the same work_dir): not stale.
func findStale(pulls map[string]*pull, current map[string]*domain.Task, draining map[string]string) []staleAttempt {
	var out []staleAttempt
	seen := map[string]bool{}
	for name, p := range pulls {
		if p.err != nil || p.status == nil {
			continue
		}
		for _, ts := range p.status.Tasks {
			if ts.Status == nil {
				if sa, ok := statuslessStale(name, ts, current); ok && !seen[killKey(sa)] {
					seen[killKey(sa)] = true
					out = append(out, sa)
				}
				continue
			}
			// A dead wrapper whose status says running may have left its
			// tool's group behind (an orphan): killed like a live attempt.
			orphan := !ts.Alive && ts.Status.Status == wire.StatusRunning
			if !ts.Alive && !orphan {
				continue
			}
			t := current[taskKey(ts.Project, ts.Task)]
			if t != nil && t.Node == name && t.Attempt == ts.Status.Attempt &&
				(t.Status == domain.Claimed || t.Status == domain.Running || ended(ts.Status.Status) && !ts.ToolRunning) {
				// The current attempt, or the one whose end was just
				// recorded while its supervisor is still exiting: its tool
				// is done (the wrapper checked its group, which a task
				// cannot forge), and killing it would only hold the node
				// back. A final status.json with the tool still running is
				// the task's forgery: that attempt is stale and killed.
				continue
			}
			if t != nil && t.Node == name && t.Status == domain.Running && ts.Alive && ts.Status.Attempt < t.Attempt {
				// The node acknowledged the current attempt: `run` took
				// the lock for it, so the supervisor holding it is that
				// attempt's, which has not yet moved the earlier one's
				// status aside (it kills what that one left running).
				continue
			}
			if t != nil && t.Node != name && (draining[name] != "" || draining[t.Node] != "") && t.Attempt == ts.Status.Attempt &&
				(t.Status == domain.Claimed || t.Status == domain.Running) {
				continue // one attempt, two names of its node
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

// statuslessStale is the stale attempt of a supervisor that holds a
// task's lock without a readable status.json, when the task's attempt
// on node is no longer under way (it was found hung before its first
// status): named by the task's attempt, killed before a retry runs.
func statuslessStale(node string, ts wire.TaskStatus, current map[string]*domain.Task) (staleAttempt, bool) {
	t := current[taskKey(ts.Project, ts.Task)]
	if !ts.Alive || t == nil || t.Node != node || t.Status == domain.Claimed || t.Status == domain.Running {
		return staleAttempt{}, false
	}
	return staleAttempt{node: node, project: ts.Project, task: ts.Task, dir: ts.Dir, attempt: t.Attempt}, true
}

// ended reports whether a status is one a supervisor writes once its
// tool's group is gone.
func ended(status string) bool {
	return status == wire.StatusCompleted || status == wire.StatusFailed || status == wire.StatusKilled
}

// staleGrace is the grace a stale attempt gets when it is killed: its
// result is thrown away anyway.
const staleGrace = 2 * time.Second

// killStale kills stale attempts on their nodes, in the background lane of
// each node, so a slow kill never stalls the tick. Until a kill is
// confirmed, its node takes no launch or collection and its task is not
// launched anywhere (see unkilled): a retry never runs beside the attempt
// it replaces. It returns what it could not kill, with why: a node that
// failed the kill, or one not tried (busy, slow, its wrapper unchecked).
func (c *Controller) killStale(ctx context.Context, stale []staleAttempt) map[staleAttempt]string {
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
		inst := n.installed()
		if inst == nil {
			return // not tried: the next pull checks the wrapper again
		}
		mine := byNode[n.cfg.Name]
		kills := make([]executor.Kill, len(mine))
		for i, sa := range mine {
			kills[i] = executor.Kill{Dir: sa.dir, Grace: cmp.Or(sa.grace, staleGrace)}
			if sa.dir == "" {
				kills[i].Dir = taskDir(inst, sa.project, sa.task)
			}
		}
		killed := n.exec.Kill(ctx, inst, kills)
		for i, k := range killed[:min(len(killed), len(mine))] { // one not answered: not tried
			sa, why := mine[i], ""
			switch {
			case k.Err != nil:
				why = k.Err.Error()
			case k.Elsewhere:
				// Another node's attempt took the directory since the
				// pull: nothing of this node's is left there to kill.
				c.log.Info("stale attempt's directory is another node's now; not killed", keyNode, sa.node, keyProject, sa.project,
					keyTask, sa.task, keyAttempt, sa.attempt)
			case sa.preempted:
				c.recordPreemptedEnd(ctx, sa, k.Reply)
			}
			mu.Lock()
			tried[sa] = true
			if why != "" {
				failed[sa] = why
			}
			mu.Unlock()
			if why != "" {
				c.log.Warn("kill stale attempt", keyNode, sa.node, keyProject, sa.project, keyTask, sa.task,
					keyAttempt, sa.attempt, "err", why)
			}
		}
	})
	mu.Lock()
	c.killMu.Lock()
	d := decideKills(c.killFailures, stale, tried, failed)
	c.killFailures, c.unkilledNodes, c.unkilledTasks = d.failures, d.holdNodes, d.holdTasks
	c.killMu.Unlock()
	notKilled := map[staleAttempt]string{}
	for _, sa := range stale {
		switch {
		case failed[sa] != "":
			notKilled[sa] = failed[sa]
		case !tried[sa]:
			notKilled[sa] = "not tried: its node is busy or did not answer in time"
		}
	}
	mu.Unlock()
	if len(d.givenUp) == 0 {
		return notKilled
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
	return notKilled
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

// killSlack is what a kill may take beyond a call and the attempt's grace
// (see executor.KillSlack).
const killSlack = executor.KillSlack

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

// nodeNotice is the notice of a node that went offline or came back
// between two records; none for a node seen for the first time.
func nodeNotice(prev, now store.Node) (notice, bool) {
	switch {
	case prev.State == store.NodeOnline && now.State == store.NodeOffline:
		return notice{event: notify.NodeOffline, node: now.Name, err: now.LastError,
			message: fmt.Sprintf("node %s is offline: %s; its tasks run elsewhere if it is not back in node_offline_timeout", now.Name, now.LastError)}, true
	case prev.State == store.NodeOffline && now.State == store.NodeOnline:
		return notice{event: notify.NodeBack, node: now.Name,
			message: fmt.Sprintf("node %s is back (offline since %s)", now.Name, prev.OfflineSince.UTC().Format(time.RFC3339))}, true
	}
	return notice{}, false
}

func (c *Controller) nodeRecord(name string, p *pull, prev store.Node, now time.Time) store.Node {
	n := store.Node{Name: name, LastSeen: prev.LastSeen, OS: prev.OS, Arch: prev.Arch,
		WrapperVersion: prev.WrapperVersion, MemAvailableBytes: prev.MemAvailableBytes,
		Load1: prev.Load1, DiskFreeBytes: prev.DiskFreeBytes, RTTMillis: prev.RTTMillis}
	if p.err != nil {
		n.State = store.NodeOffline
		n.LastError = nodes.CauseFirst(p.err).Error()
		n.OfflineSince = prev.OfflineSince
		if prev.State != store.NodeOffline || n.OfflineSince.IsZero() {
			n.OfflineSince = p.offlineFrom(now)
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

// taskCache holds the task rows the last ticks read, at their versions
// (see store.TickRead): a steady tick reads again only the rows that
// changed. The decisions of a tick change the values it holds as they
// change the rows, and every change to a row gives it a new version, so a
// held value is never taken for a later version of its row; a tick whose
// transaction fails drops them all.
//
// It also holds each project's last read whole, with the tasks the nodes
// named live for it: a tick that finds the project's stamp unmoved and
// the same tasks named decides over that read again (reuse), so that a
// steady tick reads no task row.
type taskCache struct {
	rows map[string]cachedTask
	// gen counts the ticks; a row not read in the current one is dropped.
	gen   int
	reads map[string]cachedRead
}

type cachedRead struct {
	read store.TickRead
	// named are the tasks named live, sorted.
	named []string
	gen   int
}

type cachedTask struct {
	version int64
	gen     int
	task    *domain.Task
}

// begin starts a tick's reads.
func (c *taskCache) begin() {
	if c.rows == nil {
		c.rows = map[string]cachedTask{}
	}
	c.gen++
}

// known returns the task of project held at a version, nil when none.
func (c *taskCache) known(project string) func(string, int64) *domain.Task {
	return func(id string, version int64) *domain.Task {
		if e, ok := c.rows[taskKey(project, id)]; ok && e.version == version {
			return e.task
		}
		return nil
	}
}

// keep holds the tasks read for project in this tick, and the read with
// the tasks named live (sorted, not changed after).
func (c *taskCache) keep(project string, read store.TickRead, named []string) {
	for _, t := range read.Tasks {
		c.rows[taskKey(project, t.ID)] = cachedTask{version: read.Versions[t.ID], gen: c.gen, task: t}
	}
	if c.reads == nil {
		c.reads = map[string]cachedRead{}
	}
	c.reads[project] = cachedRead{read: read, named: named, gen: c.gen}
}

// reuse returns project's last read again when it is what TickTasks would
// read now: the project's stamp has not moved (no task, attempt or
// dependency of it changed; the decisions of a tick change what they hold
// as they write it), the nodes name the same tasks live, and the earliest
// backoff it saw is still to come. named is sorted. The maps and the
// slice are copies, for the tick's decisions to change.
func (c *taskCache) reuse(ctx context.Context, tx *store.Tx, project string, named []string, now time.Time) (store.TickRead, bool, error) {
	e, ok := c.reads[project]
	if !ok || !e.read.NextDue.IsZero() && !now.Before(e.read.NextDue) ||
		!slices.Equal(e.named, named) {
		return store.TickRead{}, false, nil
	}
	stamp, err := tx.Stamp(ctx, project)
	if err != nil || stamp != e.read.Stamp {
		return store.TickRead{}, false, err
	}
	r := e.read
	r.Tasks = slices.Clone(r.Tasks)
	r.DepStatus, r.Counts, r.Modes = maps.Clone(r.DepStatus), maps.Clone(r.Counts), maps.Clone(r.Modes)
	return r, true, nil
}

// end drops the rows and reads the tick did not read: what is held
// follows what is live and served.
func (c *taskCache) end() {
	for k, e := range c.rows {
		if e.gen != c.gen {
			delete(c.rows, k)
		}
	}
	for p, e := range c.reads {
		if e.gen != c.gen {
			delete(c.reads, p)
		}
	}
}

// drop forgets every row and read (a tick whose decisions were not
// recorded).
func (c *taskCache) drop() {
	clear(c.rows)
	clear(c.reads)
}
