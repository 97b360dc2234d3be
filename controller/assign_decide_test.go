package controller

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/nodes"
)

// TestDecideClaims: which node each candidate starts on, decided over a
// tick's input alone (no store, no process): in the candidates' order,
// on an eligible node with a free slot, enough memory and an api_mode
// with room, the least loaded first; each choice counts against the
// node's slots and the mode's use.
func TestDecideClaims(t *testing.T) {
	node := func(name string, slots int, set func(*nodes.Node)) nodes.Node {
		n := nodes.Node{Name: name, Slots: slots}
		if set != nil {
			set(&n)
		}
		return n
	}
	task := func(id string, set func(*domain.Task)) domain.Task {
		tk := domain.Task{Project: "p", ID: id, Status: domain.Pending}
		if set != nil {
			set(&tk)
		}
		return tk
	}
	cfgModes := map[string]nodes.APIMode{
		"main":  {MaxConcurrency: 1, Fallback: []string{"spare"}},
		"spare": {},
	}
	for _, tc := range []struct {
		name    string
		nodes   []nodes.Node
		running map[string]int // busy slots per node
		waiting map[string]int // of them, jobs waiting in a Slurm queue
		mem     map[string]int64
		paused  []string
		use     map[string]int
		// unlisted are the "node/project"s the node cannot list.
		unlisted []string
		tasks    []domain.Task
		want     string // "ID@node[/mode]" in claim order
	}{
		{name: "least loaded first, then by name",
			nodes: []nodes.Node{node("a", 2, nil), node("b", 2, nil)}, running: map[string]int{"a": 1},
			tasks: []domain.Task{task("T1", nil), task("T2", nil), task("T3", nil), task("T4", nil)},
			want:  "T1@b T2@a T3@b"},
		{name: "a pinned task waits for its node",
			nodes: []nodes.Node{node("a", 1, nil), node("b", 1, nil)}, running: map[string]int{"b": 1},
			tasks: []domain.Task{task("T1", func(t *domain.Task) { t.NodePin = "b" }), task("T2", nil)},
			want:  "T2@a"},
		{name: "tags",
			nodes: []nodes.Node{node("a", 1, nil), node("gpu", 1, func(n *nodes.Node) { n.Tags = []string{"gpu"} })},
			tasks: []domain.Task{task("T1", func(t *domain.Task) { t.Tags = []string{"gpu"} }), task("T2", func(t *domain.Task) { t.Tags = []string{"gpu"} }), task("T3", nil)},
			want:  "T1@gpu T3@a"},
		{name: "min_free_mem",
			nodes: []nodes.Node{node("a", 4, func(n *nodes.Node) { n.MinFreeMem = 1 << 30 }), node("b", 1, nil)},
			mem:   map[string]int64{"a": 512 << 20},
			tasks: []domain.Task{task("T1", nil), task("T2", nil)},
			want:  "T1@b"},
		{name: "a retry of a crash goes elsewhere",
			nodes: []nodes.Node{node("a", 1, nil), node("b", 1, nil)},
			tasks: []domain.Task{task("T1", func(t *domain.Task) { t.Attempt, t.Node, t.ErrorClass = 1, "a", "crash" })},
			want:  "T1@b"},
		{name: "max_concurrency of a mode across nodes",
			nodes: []nodes.Node{node("a", 2, func(n *nodes.Node) { n.APIMode = "spare" }), node("b", 2, func(n *nodes.Node) { n.APIMode = "main" })},
			use:   map[string]int{"main": 0},
			tasks: []domain.Task{task("T1", nil), task("T2", nil), task("T3", nil), task("T4", nil)},
			want:  "T1@a/spare T2@b/main T3@a/spare"},
		{name: "a paused mode runs its tasks under its fallback on nodes allowed it",
			nodes: []nodes.Node{node("a", 2, func(n *nodes.Node) { n.APIMode = "main"; n.APIModes = []string{"main", "spare"} }),
				node("b", 2, func(n *nodes.Node) { n.APIMode = "main" })},
			paused: []string{"main"},
			tasks:  []domain.Task{task("T1", nil), task("T2", nil), task("T3", nil)},
			want:   "T1@a/spare T2@a/spare"},
		{name: "a node's own account paused",
			nodes: []nodes.Node{node("a", 1, nil), node("b", 1, nil)}, paused: []string{"node:a"},
			tasks: []domain.Task{task("T1", nil), task("T2", nil)},
			want:  "T1@b"},
		{name: "slurm max_pending: no more jobs waiting than it, free slots or not",
			nodes:   []nodes.Node{node("hpc", 8, func(n *nodes.Node) { n.Slurm = &nodes.Slurm{MaxPending: 3} }), node("b", 1, nil)},
			running: map[string]int{"hpc": 1}, waiting: map[string]int{"hpc": 1},
			tasks: []domain.Task{task("T1", nil), task("T2", nil), task("T3", nil), task("T4", nil)},
			want:  "T1@b T2@hpc T3@hpc"}, // T4 would be a fourth job waiting
		{name: "slurm max_pending reached",
			nodes:   []nodes.Node{node("hpc", 8, func(n *nodes.Node) { n.Slurm = &nodes.Slurm{MaxPending: 2} })},
			running: map[string]int{"hpc": 2}, waiting: map[string]int{"hpc": 2},
			tasks: []domain.Task{task("T1", nil)},
			want:  ""},
		{name: "not on a node that cannot list the task's project (it could not make the task's directory)",
			nodes: []nodes.Node{node("a", 2, nil), node("b", 2, nil)}, running: map[string]int{"b": 1},
			unlisted: []string{"a/p", "b/q"},
			tasks:    []domain.Task{task("T1", nil), task("T2", nil), task("T3", func(t *domain.Task) { t.Project = "q" })},
			want:     "T1@b T3@a"},
		{name: "no free slot",
			nodes: []nodes.Node{node("a", 1, nil)}, running: map[string]int{"a": 1},
			tasks: []domain.Task{task("T1", nil)},
			want:  ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := &nodes.Config{Nodes: tc.nodes, APIModes: cfgModes}
			in := assignInput{caps: map[string]*capacity{}, paused: map[string]bool{}, modeUse: map[string]int{}, candidates: tc.tasks}
			for _, n := range tc.nodes {
				in.caps[n.Name] = &capacity{node: &nodeRuntime{cfg: n}, running: tc.running[n.Name], mem: tc.mem[n.Name], waiting: tc.waiting[n.Name]}
			}
			for _, p := range tc.paused {
				in.paused[p] = true
			}
			for k, v := range tc.use {
				in.modeUse[k] = v
			}
			in.unlisted = map[unlistedKey]time.Time{}
			for _, np := range tc.unlisted {
				node, project, _ := strings.Cut(np, "/")
				in.unlisted[unlistedKey{node, project}] = t0
			}
			var got []string
			for _, cl := range decideClaims(cfg, in) {
				s := fmt.Sprintf("%s@%s", cl.task.ID, cl.node.cfg.Name)
				if cl.mode != "" {
					s += "/" + cl.mode
				}
				got = append(got, s)
			}
			if g := strings.Join(got, " "); g != tc.want {
				t.Errorf("claims %q, want %q", g, tc.want)
			}
		})
	}
}
