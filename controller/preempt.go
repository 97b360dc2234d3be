package controller

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/policy"
	"github.com/dispatch-tool/dispatch/store"
	"github.com/dispatch-tool/dispatch/wire"
)

// Preemption (controller.preemption in nodes.yaml, issue 37): a task the
// claims of a tick could not place stops the least urgent running attempt
// whose priority is at least priority_gap worse, on a node it may run on.
// The attempt is recorded as preempted and its task waits again at once,
// without using a retry; the attempt is then killed like a stale one
// (SIGTERM, SIGKILL after the grace, under the sandbox as a cancel is),
// and the slot it frees goes to the urgent task in a later tick (the
// candidates are taken by priority). Until then the preemption is under
// way: its urgent task stops nothing else.

// classPreempted is the error class (and event kind) of an attempt a more
// urgent task stopped.
const classPreempted = "preempted"

// maxPreemptions is how many times a task may be preempted; after that it
// runs to its end.
const maxPreemptions = 3

// preemptSlack bounds how long a preemption stays under way beyond its
// grace: a kill that never confirms does not hold its urgent task back
// for good.
const preemptSlack = time.Minute

// preemption is one running attempt stopped for a more urgent task.
type preemption struct {
	victim domain.Task
	urgent domain.Task
}

// underWay is a preemption whose freed slot its urgent task has not taken
// yet, by the victim's killKey.
type underWay struct {
	// urgent is the urgent task's taskKey.
	urgent string
	node   string
	grace  time.Duration
	// until is when it is no longer waited for.
	until time.Time
}

// preemptInput is what the choice of a tick's preemptions reads.
type preemptInput struct {
	// assign is the claims' input as the claims left it: the nodes that
	// may take work with the slots the claims took, pauses, api_mode use.
	assign assignInput
	gap    int
	// waiting are the candidates no claim placed, by priority.
	waiting []domain.Task
	// running are the tasks of the active projects whose attempt runs.
	running []*domain.Task
	// modes holds the api_mode of each running attempt, by taskKey.
	modes map[string]string
	// busy names the urgent tasks (taskKey) whose preemption is under way.
	busy map[string]bool
}

// decidePreemptions chooses, for each waiting task in order, at most one
// running attempt to stop: on a node the task could start on were one
// slot free there, of a task that may be preempted (not a phase task, not
// preemptible: false, preempted fewer than maxPreemptions times) whose
// priority is at least gap worse; the least urgent of them, then the one
// that started last (the least work lost). Pure: it reads only cfg and in.
func decidePreemptions(cfg *nodes.Config, in preemptInput) []preemption {
	if in.gap <= 0 {
		return nil
	}
	var out []preemption
	taken := map[string]bool{}
	for _, u := range in.waiting {
		if in.busy[taskKey(u.Project, u.ID)] {
			continue
		}
		var victims []*domain.Task
		for _, v := range in.running {
			if !taken[taskKey(v.Project, v.ID)] && mayPreempt(v, u, in.gap) && in.assign.caps[v.Node] != nil {
				victims = append(victims, v)
			}
		}
		slices.SortStableFunc(victims, func(a, b *domain.Task) int {
			return cmp.Or(cmp.Compare(b.Priority, a.Priority), b.StartedAt.Compare(a.StartedAt),
				cmp.Compare(a.Project, b.Project), cmp.Compare(a.ID, b.ID))
		})
		for _, v := range victims {
			if fitsOnceFreed(cfg, in.assign, u, v.Node, in.modes[taskKey(v.Project, v.ID)]) {
				taken[taskKey(v.Project, v.ID)] = true
				out = append(out, preemption{victim: *v, urgent: u})
				break
			}
		}
	}
	return out
}

// mayPreempt reports whether the running task v may be stopped for u.
func mayPreempt(v *domain.Task, u domain.Task, gap int) bool {
	return v.Status == domain.Running && !v.NotPreemptible && !domain.IsPhaseID(v.ID) &&
		v.Preemptions < maxPreemptions && v.Priority-u.Priority >= gap
}

// fitsOnceFreed reports whether t could start on node were one slot freed
// there, by an attempt running under freedMode: the claims' own choice
// (decideClaims) over that node alone. Its free memory is not asked: the
// stopped attempt gives back what it holds.
func fitsOnceFreed(cfg *nodes.Config, in assignInput, t domain.Task, node, freedMode string) bool {
	cp := *in.caps[node]
	cp.running, cp.mem = cp.node.cfg.Slots-1, math.MaxInt64
	use := maps.Clone(in.modeUse)
	if use == nil {
		use = map[string]int{}
	}
	if freedMode != "" {
		use[freedMode] = max(use[freedMode]-1, 0)
	}
	probe := assignInput{caps: map[string]*capacity{node: &cp}, paused: in.paused, modeUse: use, unusable: in.unusable,
		candidates: []domain.Task{t}}
	return len(decideClaims(cfg, probe)) == 1
}

// keepUnderWay folds a tick into the preemptions under way: one stays
// until its urgent task is placed by a tick's claims, or it times out.
// Its slot offered to the claims does not end it: a node short of memory
// (fitsOnceFreed cannot know what the stopped attempt gives back) takes
// no task however many attempts stop there, and ending it then stopped
// another attempt each tick for the same urgent task. Pure.
func keepUnderWay(prev map[string]underWay, placed map[string]bool, now time.Time) map[string]underWay {
	out := map[string]underWay{}
	for k, w := range prev {
		if !placed[w.urgent] && now.Before(w.until) {
			out[k] = w
		}
	}
	return out
}

// planPreemptions adds the tick's preemptions to tp, once its claims are
// chosen (in is the claims' input as they left it): each stopped attempt
// is recorded as preempted, its task waits again at once (in memory too,
// as the applier moves the tasks it holds), and the attempt joins the
// stale ones, killed with the preemption's grace.
func (c *Controller) planPreemptions(r *tickRead, tp *tickPlan, in assignInput, now time.Time) {
	pre := c.cfg.Controller.Preemption
	placed := map[string]bool{}
	for _, p := range tp.picks {
		placed[taskKey(p.task.Project, p.task.ID)] = true
	}
	tp.underWay = keepUnderWay(c.preempting, placed, now)
	if !pre.On() {
		return
	}
	pi := preemptInput{assign: in, gap: pre.PriorityGap, modes: map[string]string{}, busy: map[string]bool{}}
	for _, w := range tp.underWay {
		pi.busy[w.urgent] = true
	}
	for _, t := range in.candidates {
		if !placed[taskKey(t.Project, t.ID)] {
			pi.waiting = append(pi.waiting, t)
		}
	}
	if len(pi.waiting) == 0 {
		return
	}
	for _, p := range r.active {
		if _, ok := tp.opts[p.Name]; !ok {
			continue
		}
		for _, t := range r.tasks[p.Name] {
			if t.Status == domain.Running {
				pi.running = append(pi.running, t)
				pi.modes[taskKey(t.Project, t.ID)] = r.modes[p.Name][t.ID]
			}
		}
	}
	for _, pr := range decidePreemptions(c.cfg, pi) {
		c.preempt(r, tp, pr, pre.Grace, now)
	}
}

// preempt records one preemption in tp.
func (c *Controller) preempt(r *tickRead, tp *tickPlan, pr preemption, grace time.Duration, now time.Time) {
	v, u := pr.victim, pr.urgent
	n := v.Preemptions + 1
	why := fmt.Sprintf("preempted on %s by %s/%s (priority %d; this task's is %d)", v.Node, u.Project, u.ID, u.Priority, v.Priority)
	ch := store.Change{Project: v.Project, Task: v.ID, From: domain.Running, To: domain.Pending, Kind: classPreempted,
		Message: fmt.Sprintf("attempt %d %s: stopped (SIGTERM, SIGKILL after %s) and requeued at once (preemption %d of %d; does not use max_retries)",
			v.Attempt, why, grace, n, maxPreemptions),
		Set: store.TaskPatch{Preemptions: new(n), NotBefore: new(now), ErrorClass: new(classPreempted), Error: new(why)}}
	tp.ops = append(tp.ops,
		op{attempt: &attemptPatch{attemptKey{v.Project, v.ID, v.Attempt}, store.AttemptPatch{Status: new(domain.Killed),
			ErrorClass: new(classPreempted), Error: new(why), CompletedAt: new(now)}}},
		op{change: &ch})
	tp.changed++
	if t := r.current[taskKey(v.Project, v.ID)]; t != nil {
		if counts := r.counts[v.Project]; counts != nil {
			counts[t.Status]--
			counts[domain.Pending]++
		}
		ch.Set.ApplyTo(t)
		t.Status = domain.Pending
	}
	sa := staleAttempt{node: v.Node, project: v.Project, task: v.ID, attempt: v.Attempt, grace: grace, preempted: true}
	tp.stale = append(tp.stale, sa)
	tp.underWay[killKey(sa)] = underWay{urgent: taskKey(u.Project, u.ID), node: v.Node, grace: grace,
		until: now.Add(grace + killSlack + preemptSlack)}
}

// preemptedGrace gives each stale attempt that is a preemption under way
// its grace (a kill not confirmed in its tick is tried again with it).
func preemptedGrace(stale []staleAttempt, under map[string]underWay) {
	for i, sa := range stale {
		if w, ok := under[killKey(sa)]; ok && sa.grace == 0 {
			stale[i].grace, stale[i].preempted = w.grace, true
		}
	}
}

// recordPreemptedEnd records what a preempted attempt's kill replied (its
// final status): the tool's session, for the next attempt to resume where
// the tool can, and what the attempt used.
func (c *Controller) recordPreemptedEnd(ctx context.Context, sa staleAttempt, reply []byte) {
	var st wire.Status
	if json.Unmarshal(reply, &st) != nil || st.Attempt != sa.attempt {
		return
	}
	st.Clamp()
	err := c.st.Update(ctx, func(tx *store.Tx) error {
		p, err := tx.Project(ctx, sa.project)
		if err != nil {
			return err
		}
		opts, _ := p.ParseOptions()
		t, err := tx.Task(ctx, sa.project, sa.task)
		if err != nil {
			return err
		}
		n, _ := c.config().Node(sa.node)
		in, out, usd, _ := attemptUsage(policy.ToolFor(t.Tool, n), st, opts.AttemptCeiling())
		return tx.SetAttempt(ctx, sa.project, sa.task, sa.attempt, store.AttemptPatch{SessionID: new(st.SessionID),
			ExitCode: new(st.ExitCode), Signal: new(st.Signal), LogBytes: new(st.LogBytes), Sandbox: new(st.Sandbox), TokensIn: new(in), TokensOut: new(out), CostUSD: new(usd)})
	})
	if err != nil {
		c.log.Warn("record the end of a preempted attempt", keyNode, sa.node, keyProject, sa.project, keyTask, sa.task, keyAttempt, sa.attempt, "err", err)
	}
}
