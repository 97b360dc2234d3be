package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/plan"
	"github.com/dispatch-tool/dispatch/policy"
	"github.com/dispatch-tool/dispatch/store"
	"github.com/dispatch-tool/dispatch/wrapper"
)

// claim is a task assigned to a node in this tick, to be launched.
type claim struct {
	task    store.Task
	node    *nodeRuntime
	attempt int
	// mode is the api_mode the attempt runs under: the node's own, or a
	// fallback of it while it is paused.
	mode string
}

// pickMode returns the api_mode a task runs under on n now: n's own, unless
// a rate limit paused it; then the first of its fallbacks that n may use
// (api_mode or api_modes), that is not paused and has room under its
// max_concurrency. ok is false when none may run there now. A node without
// an api_mode runs under its own login, paused as "node:<name>".
func pickMode(cfg *nodes.Config, n nodes.Node, paused map[string]bool, use map[string]int) (mode string, ok bool) {
	room := func(m string) bool {
		am := cfg.APIModes[m]
		return !paused[m] && (am.MaxConcurrency <= 0 || use[m] < am.MaxConcurrency)
	}
	if n.APIMode == "" {
		return "", !paused["node:"+n.Name]
	}
	if !paused[n.APIMode] {
		return n.APIMode, room(n.APIMode)
	}
	allowed := n.Modes()
	for _, fb := range cfg.APIModes[n.APIMode].Fallback {
		if slices.Contains(allowed, fb) && room(fb) {
			return fb, true
		}
	}
	return "", false
}

// capacity is a node's room for new attempts in this tick.
type capacity struct {
	node    *nodeRuntime
	running int
	mem     int64
}

// stepAssign names the claiming of a project's tasks in its problem.
const stepAssign = "starting its tasks"

// assign claims runnable tasks for nodes with free slots: by priority then
// ID, least-loaded node first, each claim one atomic UPDATE ... RETURNING.
// It reads what the choice needs (readAssign), chooses (decideClaims,
// pure) and claims what it chose (claimAll).
func (c *Controller) assign(ctx context.Context, projects []store.Project, pulls map[string]*pull, stale []staleAttempt) (claims []claim, pauseEnd time.Time, err error) {
	in, pauseEnd, err := c.readAssign(ctx, projects, pulls, stale)
	if err != nil || len(in.candidates) == 0 {
		return nil, pauseEnd, err
	}
	picks := decideClaims(c.cfg, in)
	if len(picks) == 0 {
		return nil, pauseEnd, nil
	}
	claims, err = c.claimAll(ctx, picks)
	return claims, pauseEnd, err
}

// assignInput is what the choice of a tick's claims reads.
type assignInput struct {
	// caps are the nodes that may take work this tick, with their load.
	caps map[string]*capacity
	// paused are the api_modes paused by a rate limit (and "node:<name>"
	// for a node's own account); modeUse the attempts running under each.
	paused  map[string]bool
	modeUse map[string]int
	// unusable are the nodes that cannot run tasks at all, with why.
	unusable map[string]string
	// candidates are the runnable tasks, by priority, ID, project.
	candidates []store.Task
}

// readAssign reads what assign chooses over: the nodes with room (their
// pull went well, they are not launching, their disk is not full, no
// attempt that must die is alive there), the pauses (and when the next
// one ends: pauseEnd), the use of each api_mode, the busy slots, and a
// few candidates per free slot of each project. No candidates: nothing
// to claim.
func (c *Controller) readAssign(ctx context.Context, projects []store.Project, pulls map[string]*pull, stale []staleAttempt) (in assignInput, pauseEnd time.Time, err error) {
	in = assignInput{caps: map[string]*capacity{}, paused: map[string]bool{}, unusable: c.unusable}
	unkilledNodes, unkilledTasks := c.unkilled()
	for name, n := range c.nodes {
		// A node busy launching takes no new work this tick (one
		// collecting does: see inCollection),
		// nor one whose disk is nearly full, nor one where an attempt that
		// must die is not dead yet.
		if p := pulls[name]; p != nil && p.err == nil && !n.working.Load() && !diskFull(p.status.Facts.DiskFreeBytes) && !unkilledNodes[name] {
			in.caps[name] = &capacity{node: n, mem: p.status.Facts.MemAvailableBytes}
		}
	}
	// A stale attempt holds its slot until it is killed.
	for _, sa := range stale {
		if cp := in.caps[sa.node]; cp != nil {
			cp.running++
		}
	}
	pauses, err := c.st.Pauses(ctx)
	if err != nil {
		return in, pauseEnd, err
	}
	now := c.now()
	for _, p := range pauses {
		if now.Before(p.Until) {
			in.paused[p.APIMode] = true
			// Its tasks may go on when it ends: a tick then.
			pauseEnd = earliest(pauseEnd, p.Until, now)
		}
	}
	// What runs under each api_mode, across projects, counts against its
	// max_concurrency.
	if in.modeUse, err = c.st.LiveModes(ctx); err != nil {
		return in, pauseEnd, err
	}
	// Busy slots are counted in SQL, across projects (a stopped project's
	// running tasks hold their slots too).
	busy, err := c.st.Busy(ctx)
	if err != nil {
		return in, pauseEnd, err
	}
	free := 0
	for name, cp := range in.caps {
		cp.running += busy[name]
		free += max(cp.node.cfg.Slots-cp.running, 0)
	}
	if free == 0 {
		return in, pauseEnd, nil
	}
	in.candidates, err = c.candidates(ctx, projects, free, unkilledTasks, now)
	return in, pauseEnd, err
}

// candidates are the tasks that may start, selected in SQL: pending,
// due, every dependency completed, by priority and ID, a few times the
// free slots per project (some may fit no free node). Readiness is decided
// before the limit, so tasks waiting for a dependency never fill the
// window (head of line). A task whose earlier attempt still runs somewhere
// (an orphaned tool, a hung wrapper, unkilled) waits until it is killed,
// and one whose previous attempt is still being collected (a slow
// collection outlasts its tick) until it is collected.
func (c *Controller) candidates(ctx context.Context, projects []store.Project, free int, unkilled map[string]bool, now time.Time) ([]store.Task, error) {
	var out []store.Task
	for _, p := range projects {
		opts, err := p.ParseOptions()
		if err != nil {
			// Nothing of it launches on a wrong assumption (no setup, no
			// halt); the other projects' tasks do.
			if err := c.projectTrouble(ctx, p.Name, stepAssign, err); err != nil {
				return nil, err
			}
			continue
		}
		c.projectWentOn(p.Name, stepAssign)
		counts, err := c.st.Counts(ctx, p.Name)
		if err != nil {
			return nil, err
		}
		if h := opts.HaltFail; h > 0 && counts[store.Failed] >= h {
			continue
		}
		runnable, err := c.st.Runnable(ctx, p.Name, now, candidateFactor*free)
		if errors.Is(err, store.ErrDamaged) {
			// A candidate that does not read back is its project's
			// trouble (left out, stopped after a few), not the tick's.
			if err := c.projectTrouble(ctx, p.Name, stepRead, err); err != nil {
				return nil, err
			}
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, t := range runnable {
			_, collecting := c.inCollection.Load(taskKey(t.Project, t.ID))
			if !unkilled[taskKey(t.Project, t.ID)] && !collecting {
				out = append(out, t)
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Priority != b.Priority {
			return a.Priority < b.Priority
		}
		if a.ID != b.ID {
			return a.ID < b.ID
		}
		return a.Project < b.Project
	})
	return out, nil
}

// decideClaims chooses, for each candidate in order, the node it starts
// on: eligible, with a free slot, enough free memory and an api_mode with
// room (its own, or a fallback while it is paused), the least loaded
// (better). It counts each choice against the node's slots and the mode's
// use in in, and returns the choices. Pure: it reads only in and cfg.
func decideClaims(cfg *nodes.Config, in assignInput) []claim {
	var picks []claim
	for i := range in.candidates {
		t := &in.candidates[i]
		var best *capacity
		bestMode := ""
		for _, cp := range in.caps {
			n := cp.node.cfg
			if ok, _ := policy.Eligible(cfg, t, n); !ok || cp.running >= n.Slots {
				continue
			}
			if n.MinFreeMem > 0 && cp.mem < n.MinFreeMem {
				continue
			}
			if in.unusable[n.Name] != "" {
				continue
			}
			mode, ok := pickMode(cfg, n, in.paused, in.modeUse)
			if !ok {
				continue
			}
			if best == nil || better(cp, best, t) {
				best, bestMode = cp, mode
			}
		}
		if best == nil {
			continue
		}
		best.running++
		if bestMode != "" {
			in.modeUse[bestMode]++
		}
		picks = append(picks, claim{task: *t, node: best.node, mode: bestMode})
	}
	return picks
}

// claimAll claims the chosen tasks in one transaction: a task another
// claim took meanwhile (store.ErrConflict) is left out. Each claimed
// attempt records its api_mode and its inputs (for reuse), and a
// fallback mode an event.
func (c *Controller) claimAll(ctx context.Context, picks []claim) (claims []claim, err error) {
	err = c.st.Update(ctx, func(tx *store.Tx) error {
		claims = claims[:0]
		opts := map[string]store.ProjectOptions{}
		for _, p := range picks {
			attempt, err := tx.Claim(ctx, p.task.Project, p.task.ID, p.node.cfg.Name)
			if errors.Is(err, store.ErrConflict) {
				continue
			}
			if err != nil {
				return err
			}
			o, ok := opts[p.task.Project]
			if !ok {
				proj, err := tx.Project(ctx, p.task.Project)
				if err != nil {
					return err
				}
				o, _ = proj.ParseOptions() // unreadable options fail the launch, with the fix
				opts[p.task.Project] = o
			}
			in, err := plan.ClaimInputs(ctx, tx, c.cfg, p.task, p.mode, o)
			if err != nil {
				return err
			}
			if err := tx.SetRun(ctx, p.task.Project, p.task.ID, attempt, store.RunPatch{APIMode: new(p.mode), Inputs: &in}); err != nil {
				return err
			}
			if p.mode != "" && p.mode != p.node.cfg.APIMode {
				if err := tx.Event(ctx, store.Event{Project: p.task.Project, Task: p.task.ID, Attempt: attempt, Kind: "fallback", Node: p.node.cfg.Name,
					Message: fmt.Sprintf("api_mode %s is paused; attempt %d runs under its fallback %s", p.node.cfg.APIMode, attempt, p.mode)}); err != nil {
					return err
				}
			}
			p.attempt = attempt
			p.task.Attempt, p.task.Node, p.task.Status = attempt, p.node.cfg.Name, store.Claimed
			claims = append(claims, p)
		}
		return nil
	})
	return claims, err
}

// candidateFactor is how many candidates per free slot a tick considers
// of each project.
const candidateFactor = 4

// retryElsewhere lists the failures after which a retry should prefer
// another node than the one that failed.
var retryElsewhere = map[string]bool{wrapper.ClassStart: true, wrapper.ClassCrash: true, wrapper.ClassHung: true, store.Lost: true}

// better reports whether a is a better node than b for task t: away from the
// node where t's last attempt failed to start, crashed or was lost, then
// the least loaded.
func better(a, b *capacity, t *store.Task) bool {
	if t.Attempt > 0 && retryElsewhere[t.ErrorClass] {
		aw, bw := a.node.cfg.Name == t.Node, b.node.cfg.Name == t.Node
		if aw != bw {
			return bw
		}
	}
	return less(a, b)
}

// minDiskFree is the free space below which a node takes no new task: it
// would fail to write the spec, the log or the outputs.
const minDiskFree = 64 << 20

func diskFull(free int64) bool { return free > 0 && free < minDiskFree }

// less orders nodes for a new task: lowest load first, then most free slots,
// then name, so that spreading is deterministic.
func less(a, b *capacity) bool {
	la := float64(a.running) / float64(a.node.cfg.Slots)
	lb := float64(b.running) / float64(b.node.cfg.Slots)
	if la != lb {
		return la < lb
	}
	fa, fb := a.node.cfg.Slots-a.running, b.node.cfg.Slots-b.running
	if fa != fb {
		return fa > fb
	}
	return a.node.cfg.Name < b.node.cfg.Name
}
