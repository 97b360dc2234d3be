package controller

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/nodes"
)

// TestDecidePreemptions: which running attempt each waiting task stops,
// decided over the tick's input alone: one per waiting task, the least
// urgent at least gap worse, then the latest started, on a node the task
// may run on; never a phase task, a preemptible: false one, one preempted
// maxPreemptions times, nor for a task whose preemption is under way.
func TestDecidePreemptions(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 3, 0, 0, 0, time.UTC)
	run := func(project, id, node string, prio int, set func(*domain.Task)) *domain.Task {
		tk := &domain.Task{Project: project, ID: id, Node: node, Priority: prio, Status: domain.Running, Attempt: 1, StartedAt: t0}
		if set != nil {
			set(tk)
		}
		return tk
	}
	wait := func(project, id string, prio int, set func(*domain.Task)) domain.Task {
		tk := domain.Task{Project: project, ID: id, Priority: prio, Status: domain.Pending}
		if set != nil {
			set(&tk)
		}
		return tk
	}
	two := []nodes.Node{{Name: "a", Slots: 2}, {Name: "b", Slots: 1, Tags: []string{"gpu"}}}
	for _, tc := range []struct {
		name    string
		gap     int
		nodes   []nodes.Node
		running []*domain.Task
		waiting []domain.Task
		busy    []string // urgent tasks whose preemption is under way
		paused  []string
		want    string // "victim<-urgent" in order
	}{
		{name: "off", gap: 0, nodes: two,
			running: []*domain.Task{run("low", "S01", "a", 9, nil)},
			waiting: []domain.Task{wait("hot", "S01", 1, nil)}},
		{name: "the least urgent attempt, at least gap worse", gap: 3, nodes: two,
			running: []*domain.Task{run("low", "S01", "a", 6, nil), run("low", "S02", "a", 9, nil), run("low", "S03", "b", 8, nil)},
			waiting: []domain.Task{wait("hot", "S01", 1, nil)},
			want:    "low/S02<-hot/S01"},
		{name: "a gap too small stops nothing", gap: 3, nodes: two,
			running: []*domain.Task{run("low", "S01", "a", 3, nil), run("low", "S02", "b", 4, nil)},
			waiting: []domain.Task{wait("hot", "S01", 2, nil)}},
		{name: "the exact gap preempts", gap: 2, nodes: two,
			running: []*domain.Task{run("low", "S01", "b", 4, nil)},
			waiting: []domain.Task{wait("hot", "S01", 2, nil)},
			want:    "low/S01<-hot/S01"},
		{name: "of equal priority, the one that started last", gap: 1, nodes: two,
			running: []*domain.Task{run("low", "S01", "a", 9, nil), run("low", "S02", "a", 9, func(t *domain.Task) { t.StartedAt = t0.Add(time.Minute) })},
			waiting: []domain.Task{wait("hot", "S01", 1, nil)},
			want:    "low/S02<-hot/S01"},
		{name: "one attempt per waiting task, each attempt once", gap: 1, nodes: two,
			running: []*domain.Task{run("low", "S01", "a", 9, nil), run("low", "S02", "a", 9, nil), run("low", "S03", "b", 5, nil)},
			waiting: []domain.Task{wait("hot", "S01", 1, nil), wait("hot", "S02", 1, nil), wait("hot", "S03", 1, nil), wait("hot", "S04", 1, nil)},
			want:    "low/S01<-hot/S01 low/S02<-hot/S02 low/S03<-hot/S03"},
		{name: "only on a node the waiting task may run on", gap: 1, nodes: two,
			running: []*domain.Task{run("low", "S01", "a", 9, nil), run("low", "S02", "b", 6, nil)},
			waiting: []domain.Task{wait("hot", "S01", 1, func(t *domain.Task) { t.Tags = []string{"gpu"} })},
			want:    "low/S02<-hot/S01"},
		{name: "a pinned task stops nothing elsewhere", gap: 1, nodes: two,
			running: []*domain.Task{run("low", "S01", "a", 9, nil)},
			waiting: []domain.Task{wait("hot", "S01", 1, func(t *domain.Task) { t.NodePin = "b" })}},
		{name: "phase tasks, preemptible: false and thrice preempted are kept", gap: 1, nodes: two,
			running: []*domain.Task{run("low", "S99", "a", 9, nil), run("low", "V01", "a", 9, nil),
				run("low", "S01", "b", 9, func(t *domain.Task) { t.NotPreemptible = true })},
			waiting: []domain.Task{wait("hot", "S01", 1, nil)}},
		{name: "preempted fewer than three times", gap: 1, nodes: two,
			running: []*domain.Task{run("low", "S01", "a", 9, func(t *domain.Task) { t.Preemptions = maxPreemptions }),
				run("low", "S02", "a", 8, func(t *domain.Task) { t.Preemptions = maxPreemptions - 1 })},
			waiting: []domain.Task{wait("hot", "S01", 1, nil)},
			want:    "low/S02<-hot/S01"},
		{name: "a claimed attempt is not stopped", gap: 1, nodes: two,
			running: []*domain.Task{run("low", "S01", "a", 9, func(t *domain.Task) { t.Status = domain.Claimed })},
			waiting: []domain.Task{wait("hot", "S01", 1, nil)}},
		{name: "one preemption per freed slot: none while one is under way", gap: 1, nodes: two,
			running: []*domain.Task{run("low", "S01", "a", 9, nil), run("low", "S02", "a", 9, nil)},
			waiting: []domain.Task{wait("hot", "S01", 1, nil), wait("hot", "S02", 2, nil)},
			busy:    []string{"hot/S01"},
			want:    "low/S01<-hot/S02"},
		{name: "a node paused for the waiting task is no use to it", gap: 1, nodes: two, paused: []string{"node:a"},
			running: []*domain.Task{run("low", "S01", "a", 9, nil)},
			waiting: []domain.Task{wait("hot", "S01", 1, nil)}},
		{name: "a node not taking work (held, offline) is not used", gap: 1, nodes: two[1:],
			running: []*domain.Task{run("low", "S01", "a", 9, nil)},
			waiting: []domain.Task{wait("hot", "S01", 1, nil)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := &nodes.Config{Nodes: tc.nodes, APIModes: map[string]nodes.APIMode{}}
			in := preemptInput{gap: tc.gap, waiting: tc.waiting, running: tc.running, modes: map[string]string{}, busy: map[string]bool{},
				assign: assignInput{caps: map[string]*capacity{}, paused: map[string]bool{}, modeUse: map[string]int{}}}
			for _, n := range tc.nodes {
				busy := 0
				for _, r := range tc.running {
					if r.Node == n.Name {
						busy++
					}
				}
				in.assign.caps[n.Name] = &capacity{node: &nodeRuntime{cfg: n}, running: busy}
			}
			for _, p := range tc.paused {
				in.assign.paused[p] = true
			}
			for _, b := range tc.busy {
				in.busy[b] = true
			}
			var got []string
			for _, p := range decidePreemptions(cfg, in) {
				got = append(got, fmt.Sprintf("%s/%s<-%s/%s", p.victim.Project, p.victim.ID, p.urgent.Project, p.urgent.ID))
			}
			if g := strings.Join(got, " "); g != tc.want {
				t.Errorf("preemptions %q, want %q", g, tc.want)
			}
		})
	}
}

// TestKeepUnderWay: a preemption stays under way, stopping its urgent
// task from preempting again, until its urgent task is placed or it times
// out; its slot offered to the claims (the attempt dead, its node taking
// work) does not end it.
func TestKeepUnderWay(t *testing.T) {
	now := time.Date(2026, 11, 29, 3, 0, 0, 0, time.UTC)
	w := underWay{urgent: "hot/S01", node: "a", grace: time.Second, until: now.Add(time.Minute)}
	for _, tc := range []struct {
		name   string
		placed bool
		until  time.Time
		kept   bool
	}{
		// Its attempt still dies, or its node takes no work, or its slot
		// was offered and did not take it (too little memory on its
		// node, a more urgent task took it): it waits for its own
		// preemption to time out before it stops another attempt.
		{name: "its urgent task waits", until: w.until, kept: true},
		{name: "its urgent task was placed", placed: true, until: w.until},
		{name: "timed out", until: now},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ww := w
			ww.until = tc.until
			got := keepUnderWay(map[string]underWay{"k": ww}, map[string]bool{"hot/S01": tc.placed}, now)
			if _, kept := got["k"]; kept != tc.kept {
				t.Errorf("kept = %v, want %v", kept, tc.kept)
			}
		})
	}
}

// TestPreemptionOnAMemoryStarvedNode: the freed slot of a node short of
// memory (under its min_free_mem) does not take the urgent task, whose
// placement a preemption cannot foresee (the stopped attempt's memory is
// not known). The ticks after it, with the stopped attempt dead and the
// node taking work again, stop no second attempt for the same urgent task
// until its preemption times out (each tick stopped one more before).
func TestPreemptionOnAMemoryStarvedNode(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 3, 0, 0, 0, time.UTC)
	node := nodes.Node{Name: "a", Slots: 2, MinFreeMem: 1 << 30}
	cfg := &nodes.Config{Nodes: []nodes.Node{node}, APIModes: map[string]nodes.APIMode{}}
	urgent := domain.Task{Project: "hot", ID: "S01", Priority: 1, Status: domain.Pending}
	running := []*domain.Task{
		{Project: "low", ID: "S01", Node: "a", Priority: 9, Status: domain.Running, Attempt: 1, StartedAt: t0},
		{Project: "low", ID: "S02", Node: "a", Priority: 9, Status: domain.Running, Attempt: 1, StartedAt: t0},
	}
	const grace = 2 * time.Second
	var under map[string]underWay
	var stopped []string
	for tick := range 5 {
		now := t0.Add(time.Duration(tick) * 3 * time.Second)
		caps := map[string]*capacity{"a": {node: &nodeRuntime{cfg: node}, running: len(running), mem: 512 << 20}}
		in := assignInput{caps: caps, paused: map[string]bool{}, modeUse: map[string]int{}, candidates: []domain.Task{urgent}}
		placed := map[string]bool{}
		for _, cl := range decideClaims(cfg, in) {
			placed[taskKey(cl.task.Project, cl.task.ID)] = true
		}
		// The stopped attempt died within its tick: none is stale after.
		under = keepUnderWay(under, placed, now)
		pi := preemptInput{assign: in, gap: 3, waiting: []domain.Task{urgent}, running: running, modes: map[string]string{}, busy: map[string]bool{}}
		for _, w := range under {
			pi.busy[w.urgent] = true
		}
		for _, p := range decidePreemptions(cfg, pi) {
			stopped = append(stopped, fmt.Sprintf("tick %d: %s/%s", tick, p.victim.Project, p.victim.ID))
			sa := staleAttempt{node: "a", project: p.victim.Project, task: p.victim.ID, attempt: p.victim.Attempt}
			if under == nil {
				under = map[string]underWay{}
			}
			under[killKey(sa)] = underWay{urgent: taskKey(urgent.Project, urgent.ID), node: "a", grace: grace,
				until: now.Add(grace + killSlack + preemptSlack)}
			running = slices.DeleteFunc(running, func(t *domain.Task) bool { return t.ID == p.victim.ID })
		}
	}
	if len(stopped) != 1 {
		t.Errorf("one urgent task that a memory-starved node cannot take stopped %d attempts in 5 ticks (%s), want 1", len(stopped), strings.Join(stopped, ", "))
	}
}
