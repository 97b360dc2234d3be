package controller

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/plan"
	"github.com/dispatch-tool/dispatch/store"
)

// The decisions of a tick over what the nodes said are made in one
// transaction: one read (read), one pure plan (decideTick: the changes the
// statuses mean, then the claims over what those changes leave) and one
// record of the plan (record). What follows is I/O on the nodes — kills,
// launches, collections — and the phase steps that wait for them.

// tickRead is what the decisions of a tick read.
type tickRead struct {
	*snapshot
	// prev holds the node records as the last tick left them.
	prev map[string]store.Node
	// claims is what the claims choose over, as read: the nodes with
	// room, pauses, api_mode use, and a few runnable tasks per free slot
	// of each active project (runnable), before the tick's changes.
	claims   assignInput
	pauses   []store.Pause
	runnable map[string][]domain.Task
	// active are the projects whose tasks may start, in order.
	active []domain.Project
	// readErrs are the active projects whose candidates did not read back.
	readErrs map[string]error
	// ranOn says, for the attempts the pulls report live that are not
	// current on their node (by killKey), whether their task ever ran on
	// it: a stale attempt whose task never did is its node's word alone.
	ranOn map[string]bool
	// live are the busy slots and api_mode use as read (kept for the
	// next tick once the transaction commits).
	live *store.LiveCounts
}

// afterApply is what the tick's changes leave for its claims: the tasks
// as the decisions left them, the slots and api_mode uses they freed, the
// modes they paused (until when), and the projects whose waiting tasks
// they canceled all at once.
type afterApply struct {
	tasks       map[string]*domain.Task
	freed       map[string]int
	modesFreed  map[string]int
	paused      map[string]time.Time
	canceledAll map[string]bool
}

func newAfterApply() afterApply {
	return afterApply{tasks: map[string]*domain.Task{}, freed: map[string]int{}, modesFreed: map[string]int{},
		paused: map[string]time.Time{}, canceledAll: map[string]bool{}}
}

// live reports whether a task in status s holds a slot.
func live(s domain.Status) bool { return s == domain.Claimed || s == domain.Running }

// tickPlan is everything the decisions of a tick chose.
type tickPlan struct {
	applyPlan
	// picks are the claims to record, in order.
	picks []claim
	// pauseEnd is when the next pause ends (a tick then).
	pauseEnd time.Time
	// troubles are the active projects whose options do not parse (none
	// of their tasks starts); wentOn those whose did.
	troubles map[string]error
	wentOn   []string
	// opts are the options of the active projects, for the claims.
	opts map[string]domain.ProjectOptions
	// underWay are the preemptions under way once this tick is recorded
	// (see preempt.go).
	underWay map[string]underWay
}

// tickOutcome is what the decisions of a tick leave to the rest of it.
type tickOutcome struct {
	changed  int
	stale    []staleAttempt
	wake     time.Time
	damaged  map[string]error
	claims   []claim
	pauseEnd time.Time
}

// decide reads, decides and records, in one transaction, what the pulls
// mean for the served projects (names) and which runnable tasks of the
// active projects start where; then sends the notices the changes call
// for and counts the projects' troubles. Projects whose rows do not read
// back (store.ErrDamaged) are left out and returned in damaged.
func (c *Controller) decide(ctx context.Context, active []domain.Project, names []string, pulls map[string]*pull) (tickOutcome, error) {
	var out tickOutcome
	var tp tickPlan
	c.killMu.Lock()
	announced, failures := c.announced, c.killFailures
	holdNodes, holdTasks := c.unkilledNodes, c.unkilledTasks
	c.killMu.Unlock()
	var readErrs map[string]error
	var counts *store.LiveCounts
	c.taskCache.begin()
	err := c.st.Update(ctx, func(tx *store.Tx) error {
		now := tx.Now()
		r, err := c.read(ctx, tx, active, names, pulls, holdNodes, now)
		if err != nil {
			return err
		}
		readErrs, counts = r.readErrs, r.live
		tp = c.decideTick(r, pulls, announced, holdTasks, failures, now)
		out.claims, err = c.record(ctx, tx, &tp)
		out.damaged = r.damaged
		return err
	})
	if err != nil {
		// The held tasks may have been changed by decisions that were
		// not recorded.
		c.taskCache.drop()
		c.liveCounts = nil
		return out, err
	}
	c.taskCache.end()
	c.liveCounts = counts
	c.preempting = tp.underWay
	out.changed, out.stale, out.wake, out.pauseEnd = tp.changed, tp.stale, tp.wake, tp.pauseEnd
	for _, n := range tp.notices {
		c.addNotice(n) // sent at the end of the tick, with its others
	}
	seen := map[string]bool{}
	for _, sa := range out.stale {
		seen[killKey(sa)] = true
	}
	c.killMu.Lock()
	c.announced = seen
	c.killMu.Unlock()
	c.unlistedSince, c.unseenAt = tp.unlisted, tp.unseen
	for _, name := range tp.wentOn {
		c.projectWentOn(name, stepAssign)
	}
	for _, name := range sortedKeys(tp.troubles) {
		if err := c.projectTrouble(ctx, name, stepAssign, tp.troubles[name]); err != nil {
			return out, err
		}
	}
	for _, name := range sortedKeys(readErrs) {
		if err := c.projectTrouble(ctx, name, stepRead, readErrs[name]); err != nil {
			return out, err
		}
	}
	return out, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// read reads, in tx, what the tick decides over: the node records, the
// served projects' tasks that can move (readSnapshot), the pauses, the
// api_mode use, the busy slots, and for each active project a few
// runnable tasks per slot that is free or may be freed by an attempt the
// pulls report ended.
func (c *Controller) read(ctx context.Context, tx *store.Tx, active []domain.Project, names []string, pulls map[string]*pull,
	holdNodes map[string]bool, now time.Time) (*tickRead, error) {
	r := &tickRead{prev: map[string]store.Node{}, runnable: map[string][]domain.Task{}, readErrs: map[string]error{}}
	known, err := tx.Nodes(ctx)
	if err != nil {
		return nil, err
	}
	for _, n := range known {
		r.prev[n.Name] = n
	}
	if r.snapshot, err = readSnapshot(ctx, tx, names, pulls, &c.taskCache); err != nil {
		return nil, err
	}
	r.ranOn = map[string]bool{}
	r.current = currentTasks(r.snapshot)
	for _, sa := range findStale(pulls, r.current, c.draining) {
		if !sa.foreign && r.damaged[sa.project] == nil {
			if r.ranOn[killKey(sa)], err = tx.RanOn(ctx, sa.project, sa.task, sa.node); err != nil {
				return nil, err
			}
		}
	}
	in := assignInput{unusable: c.unusable}
	if r.pauses, err = tx.Pauses(ctx); err != nil {
		return nil, err
	}
	// What runs under each api_mode, across projects, counts against its
	// max_concurrency; busy slots are counted across projects too (a
	// stopped project's running tasks hold their slots).
	// Both are read again only when a row they count changed.
	if r.live, err = tx.LiveCounts(ctx, c.liveCounts); err != nil {
		return nil, err
	}
	in.modeUse = r.live.Modes // copied before the claims count theirs
	in.caps = c.capacities(pulls, r.live.Busy, holdNodes)
	free := freeSlots(in.caps, pulls)
	r.claims = in
	for _, p := range active {
		if r.damaged[p.Name] != nil {
			continue
		}
		r.active = append(r.active, p)
		limit := candidateFactor * free
		if limit == 0 && c.cfg.Controller.Preemption.On() {
			// No slot is free, but its most urgent task may preempt.
			limit = 1
		}
		if limit == 0 {
			continue
		}
		ts, err := tx.Runnable(ctx, p.Name, now, limit)
		if errors.Is(err, store.ErrDamaged) {
			// A candidate that does not read back is its project's
			// trouble (left out, stopped after a few), not the tick's.
			r.readErrs[p.Name] = err
			continue
		}
		if err != nil {
			return nil, err
		}
		r.runnable[p.Name] = ts
	}
	return r, nil
}

// capacities are the nodes that may take work this tick, with their busy
// slots. A node busy launching takes none (one collecting does: see
// inCollection), nor one whose pull failed or whose disk is nearly full,
// nor one where an attempt that must die is not dead yet (hold).
func (c *Controller) capacities(pulls map[string]*pull, busy map[string]int, hold map[string]bool) map[string]*capacity {
	caps := map[string]*capacity{}
	for name, n := range c.nodes {
		if p := pulls[name]; p != nil && p.err == nil && !n.working.Load() && !diskFull(p.status.Facts.DiskFreeBytes) && !hold[name] {
			caps[name] = &capacity{node: n, mem: p.status.Facts.MemAvailableBytes, running: busy[name]}
			for _, ts := range p.status.Tasks {
				if ts.Alive && ts.Waiting != "" {
					caps[name].waiting++
				}
			}
		}
	}
	return caps
}

// freeSlots is how many slots the claims of a tick may fill: those free
// now and, on each node, those its pull reports ended, at most its busy
// ones. A full listing names every finished task directory of a node, and
// a node may say anything: the count never passes the slots.
func freeSlots(caps map[string]*capacity, pulls map[string]*pull) int {
	free := 0
	for name, cp := range caps {
		ended := 0
		if p := pulls[name]; p != nil && p.err == nil && p.status != nil {
			for _, ts := range p.status.Tasks {
				if ts.Status != nil && ts.Status.Final() {
					ended++
				}
			}
		}
		free += max(cp.node.cfg.Slots-cp.running, 0) + min(ended, cp.running)
	}
	return free
}

// decideTick decides, without I/O, what the pulls mean (decideApply) and
// then which tasks start where over what those changes leave
// (decideClaims): slots and modes they freed, modes they paused, tasks
// they made runnable or took back, and the stale attempts found, whose
// nodes and tasks wait until they are killed.
func (c *Controller) decideTick(r *tickRead, pulls map[string]*pull, announced, holdTasks map[string]bool, failures map[string]int, now time.Time) tickPlan {
	tp := tickPlan{applyPlan: c.decideApply(r.snapshot, pulls, r.prev, announced, now), troubles: map[string]error{},
		opts: map[string]domain.ProjectOptions{}}
	after := tp.after
	in := r.claims
	in.unlisted = tp.unlisted
	in.paused = map[string]bool{}
	for _, p := range r.pauses {
		if now.Before(p.Until) {
			in.paused[p.APIMode] = true
			// Its tasks may go on when it ends: a tick then.
			tp.pauseEnd = earliest(tp.pauseEnd, p.Until, now)
		}
	}
	for mode, until := range after.paused {
		if now.Before(until) {
			in.paused[mode] = true
			tp.pauseEnd = earliest(tp.pauseEnd, until, now)
		}
	}
	in.modeUse = maps.Clone(in.modeUse)
	if in.modeUse == nil {
		in.modeUse = map[string]int{}
	}
	for mode, n := range after.modesFreed {
		in.modeUse[mode] = max(in.modeUse[mode]-n, 0)
	}
	caps := map[string]*capacity{}
	for name, cp := range in.caps {
		cc := *cp
		cc.running = max(cc.running-after.freed[name], 0)
		caps[name] = &cc
	}
	in.caps = caps
	hold := map[string]bool{}
	maps.Copy(hold, holdTasks)
	for i, sa := range tp.stale {
		if ran, ok := r.ranOn[killKey(sa)]; ok && !ran {
			tp.stale[i].foreign, sa.foreign = true, true
		}
		// A stale attempt holds its node until it is killed, and its task
		// (unless the node never ran it) until then too — unless its kill
		// has failed too often (see decideKills).
		if failures[killKey(sa)] >= maxKillFailures {
			continue
		}
		delete(in.caps, sa.node)
		if !sa.foreign {
			hold[taskKey(sa.project, sa.task)] = true
		}
	}
	for _, p := range r.active {
		f := r.facts[p.Name]
		if f.optsErr != nil {
			// Nothing of it launches on a wrong assumption (no setup, no
			// halt); the other projects' tasks do.
			tp.troubles[p.Name] = f.optsErr
			continue
		}
		tp.wentOn = append(tp.wentOn, p.Name)
		tp.opts[p.Name] = f.opts
		if h := f.opts.HaltFail; h > 0 && r.counts[p.Name][domain.Failed] >= h || after.canceledAll[p.Name] {
			continue
		}
		in.candidates = append(in.candidates, c.candidatesAfter(p.Name, r, after, hold, now)...)
	}
	sort.SliceStable(in.candidates, func(i, j int) bool {
		a, b := in.candidates[i], in.candidates[j]
		if a.Priority != b.Priority {
			return a.Priority < b.Priority
		}
		if a.ID != b.ID {
			return a.ID < b.ID
		}
		return a.Project < b.Project
	})
	if len(in.candidates) > 0 {
		tp.picks = decideClaims(c.cfg, in)
	}
	c.planPreemptions(r, &tp, in, now)
	preemptedGrace(tp.stale, tp.underWay)
	return tp
}

// uncollected reports whether t waits for its dependencies' collection
// (waitsForCollection) and dep's result is not collected yet: it completed in this tick, or its
// collection is under way. The next tick's read sees it collected.
func (c *Controller) uncollected(project string, t domain.Task, dep string, after afterApply) bool {
	if !waitsForCollection(t) {
		return false
	}
	if d := after.tasks[taskKey(project, dep)]; d != nil && d.Status == domain.Completed {
		return true
	}
	_, collecting := c.inCollection.Load(taskKey(project, dep))
	return collecting
}

// candidatesAfter lists the tasks of project that may start once the
// tick's changes are made: the runnable ones read (unless a change moved
// them or one of their dependencies), and the tasks read that the changes
// left pending, due and with every dependency completed (a lost attempt
// requeued, a dependent whose last dependency just completed). A task
// whose earlier attempt still runs somewhere (hold) waits until it is
// killed, and one whose previous attempt is still being collected (a slow
// collection outlasts its tick) until it is collected.
func (c *Controller) candidatesAfter(project string, r *tickRead, after afterApply, hold map[string]bool, now time.Time) []domain.Task {
	var out []domain.Task
	seen := map[string]bool{}
	ok := func(t *domain.Task) bool {
		key := taskKey(project, t.ID)
		if seen[key] || hold[key] {
			return false
		}
		if _, collecting := c.inCollection.Load(key); collecting {
			return false
		}
		return true
	}
	completed := func(dep string) bool {
		if d := after.tasks[taskKey(project, dep)]; d != nil {
			return d.Status == domain.Completed
		}
		return r.depStatus[project][dep] == domain.Completed
	}
	for _, t := range r.runnable[project] {
		if moved := after.tasks[taskKey(project, t.ID)]; moved != nil && moved.Status != domain.Pending {
			continue
		}
		if slices.ContainsFunc(t.DependsOn, func(d string) bool {
			moved := after.tasks[taskKey(project, d)]
			return moved != nil && moved.Status != domain.Completed
		}) {
			continue
		}
		if ok(&t) {
			seen[taskKey(project, t.ID)] = true
			out = append(out, t)
		}
	}
	for _, read := range r.tasks[project] {
		t := after.tasks[taskKey(project, read.ID)]
		if t == nil || t.Status != domain.Pending || t.NotBefore.After(now) || !ok(t) {
			continue
		}
		if slices.ContainsFunc(t.DependsOn, func(d string) bool { return !completed(d) || c.uncollected(project, *t, d, after) }) {
			continue
		}
		seen[taskKey(project, t.ID)] = true
		out = append(out, *t)
	}
	return out
}

// record writes a tick's plan in tx: the node records, every change, and
// the claims. A task another claim took meanwhile (store.ErrConflict) is
// left out. Each claimed attempt's row is written with its api_mode, its
// inputs (for reuse) and the attempt of each dependency it is given (for
// status to tell a stale result); a fallback mode gets an event. It
// returns the claims made, each with its project's options.
func (c *Controller) record(ctx context.Context, tx *store.Tx, tp *tickPlan) ([]claim, error) {
	if err := tx.PutNodes(ctx, tp.nodes); err != nil {
		return nil, err
	}
	for _, o := range tp.ops {
		if err := o.exec(ctx, tx); err != nil {
			return nil, err
		}
	}
	var claims []claim
	for _, p := range tp.picks {
		// Unreadable options (none here) fail the launch, with the fix.
		o, ok := tp.opts[p.task.Project]
		if ok {
			p.opts = &o
		}
		in, err := plan.ClaimInputs(ctx, tx, c.cfg, p.task, p.mode, o)
		if err != nil {
			return nil, err
		}
		given, err := claimGiven(ctx, tx, p.task)
		if err != nil {
			return nil, err
		}
		attempt, err := tx.ClaimAttempt(ctx, p.task.Project, p.task.ID, p.node.cfg.Name, store.AttemptInit{APIMode: p.mode, Inputs: in, Given: given})
		if errors.Is(err, store.ErrConflict) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if p.mode != "" && p.mode != p.node.cfg.APIMode {
			if err := tx.Event(ctx, store.Event{Project: p.task.Project, Task: p.task.ID, Attempt: attempt, Kind: "fallback", Node: p.node.cfg.Name,
				Message: fmt.Sprintf("api_mode %s is paused; attempt %d runs under its fallback %s", p.node.cfg.APIMode, attempt, p.mode)}); err != nil {
				return nil, err
			}
		}
		p.attempt = attempt
		p.task.Attempt, p.task.Node, p.task.Status = attempt, p.node.cfg.Name, domain.Claimed
		claims = append(claims, p)
	}
	return claims, nil
}

// claimGiven is the given column of t's claimed attempt: the attempt of
// each dependency whose result it receives, as they are now.
func claimGiven(ctx context.Context, tx *store.Tx, t domain.Task) (string, error) {
	var gs []domain.Given
	for _, d := range t.DependsOn {
		attempt, _, err := tx.Result(ctx, t.Project, d)
		if err != nil {
			return "", err
		}
		gs = append(gs, domain.Given{Task: d, Attempt: attempt})
	}
	return store.EncodeGiven(gs), nil
}
