package controller

import (
	"slices"
	"time"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/policy"
	"github.com/dispatch-tool/dispatch/wire"
)

// claim is a task assigned to a node in this tick, to be launched.
type claim struct {
	task    domain.Task
	node    *nodeRuntime
	attempt int
	// mode is the api_mode the attempt runs under: the node's own, or a
	// fallback of it while it is paused.
	mode string
	// opts are the project's options as the tick that claimed it read
	// them; nil: the launch reads them (and fails when they do not parse).
	opts *domain.ProjectOptions
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
	// waiting counts the node's attempts whose batch job waits in its
	// scheduler's queue (a Slurm node): at slurm.max_pending, the node
	// takes no more.
	waiting int
}

// queueFull reports whether cp's node, a Slurm one, has max_pending jobs
// waiting already.
func (cp *capacity) queueFull() bool {
	s := cp.node.cfg.Slurm
	return s != nil && s.MaxPending > 0 && cp.waiting >= s.MaxPending
}

// stepAssign names the claiming of a project's tasks in its problem.
const stepAssign = "starting its tasks"

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
	// unlisted are the projects each node cannot list (see
	// decideUnlisted): a task of one placed there could not even make
	// its directory.
	unlisted map[unlistedKey]time.Time
	// candidates are the runnable tasks, by priority, ID, project.
	candidates []domain.Task
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
			if ok, _ := policy.Eligible(cfg, t, n); !ok || cp.running >= n.Slots || cp.queueFull() {
				continue
			}
			if n.MinFreeMem > 0 && cp.mem < n.MinFreeMem {
				continue
			}
			if in.unusable[n.Name] != "" {
				continue
			}
			if _, unlisted := in.unlisted[unlistedKey{n.Name, t.Project}]; unlisted {
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
		if best.node.cfg.Slurm != nil {
			best.waiting++ // a job submitted waits until squeue says otherwise
		}
		if bestMode != "" {
			in.modeUse[bestMode]++
		}
		picks = append(picks, claim{task: *t, node: best.node, mode: bestMode})
	}
	return picks
}

// candidateFactor is how many candidates per free slot a tick considers
// of each project.
const candidateFactor = 4

// retryElsewhere lists the failures after which a retry should prefer
// another node than the one that failed.
var retryElsewhere = map[string]bool{wire.ClassStart: true, wire.ClassCrash: true, wire.ClassHung: true, classLost: true}

// better reports whether a is a better node than b for task t: away from the
// node where t's last attempt failed to start, crashed or was lost, then
// the least loaded.
func better(a, b *capacity, t *domain.Task) bool {
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
