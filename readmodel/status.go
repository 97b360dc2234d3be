package readmodel

import (
	"context"
	"path/filepath"
	"sort"
	"strconv"
	"time"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/home"
	"github.com/dispatch-tool/dispatch/store"
)

// Nodes is what the views need of nodes.yaml; *nodes.Config is one. A nil
// Nodes shows no node section and no fallbacks.
type Nodes interface {
	// NodeSlots lists the configured nodes in nodes.yaml's order.
	NodeSlots() []NodeSlots
	// Fallbacks lists the fallbacks of an api_mode, in order.
	Fallbacks(apiMode string) []string
}

// NodeSlots is a configured node and its slots.
type NodeSlots = struct {
	Name    string
	Slots   int
	Address string
	Stall   time.Duration
	Sandbox string
}

// RunDirName is the directory of runs/<project>/ that keeps an ended run's
// outputs and report.
func RunDirName(run int) string { return "run-" + strconv.Itoa(run) }

// RunDir is where run's outputs and report are: runs/<project>/ for the
// current run, runs/<project>/run-<N>/ for an archived one (archived > 0).
func RunDir(homeDir, project string, archived int) string {
	if archived > 0 {
		return filepath.Join(home.RunsDir(homeDir, project), RunDirName(archived))
	}
	return home.RunsDir(homeDir, project)
}

// StatusView is `dispatch status <project> --json` (SPEC §9).
type StatusView struct {
	Project string `json:"project"`
	// Run is the number of the run shown; not in the JSON, whose keys
	// SPEC §9 fixes (`dispatch runs --json` lists the runs).
	Run    int          `json:"-"`
	Counts Counts       `json:"counts"`
	Phase  domain.Phase `json:"phase"`
	// State is the project's state: active, stopped (by `dispatch stop`:
	// nothing new starts) or done. It is not in the JSON, whose keys SPEC
	// §9 fixes; `report --format json` says "result": "stopped".
	State string `json:"-"`
	// Problem is why the controller stopped the project, when an error of
	// its own did (not in the JSON; the report's JSON has it).
	Problem string     `json:"-"`
	Tasks   []TaskView `json:"tasks"`
	Nodes   []NodeView `json:"nodes"`
	// Controller says whether a controller runs for the home and when it
	// last ticked; set by the caller (ControllerOf), absent when unknown.
	Controller *ControllerView `json:"controller,omitempty"`
	// Refresh is what the nodes said when asked (status --refresh).
	Refresh *RefreshView `json:"refresh,omitempty"`
	Notes   []string     `json:"-"`
	// Paused lists the api_modes paused by rate limits, for the text view.
	Paused []store.Pause `json:"-"`
	// Fallbacks names, by paused api_mode, the fallback its tasks run
	// under now ("" when none is free).
	Fallbacks map[string]string `json:"-"`
	// Budget is set when the project's budget stopped it; the text views
	// say so first.
	Budget *BudgetStop `json:"-"`
	// Preemptions counts the attempts of the run's tasks a more urgent
	// task stopped, for the text view (each task's is in the JSON).
	Preemptions int            `json:"-"`
	state       string         // project state, for the text view
	result      string         // project result once finished
	byID        map[string]int // index into Tasks
}

// Counts counts tasks by status. A lost attempt is requeued at once, so lost
// tasks count as pending.
type Counts struct {
	Pending   int `json:"pending"`
	Claimed   int `json:"claimed"`
	Running   int `json:"running"`
	Completed int `json:"completed"`
	Failed    int `json:"failed"`
	Blocked   int `json:"blocked"`
	Canceled  int `json:"canceled"`
}

// Result is the project's result once it is finished, else "".
func (v *StatusView) Result() string { return v.result }

// Settled reports whether nothing more will happen to the project without
// the operator: it is done, or stopped with nothing running.
func (v *StatusView) Settled() bool {
	return v.Phase == domain.PhaseDone || (v.state == domain.ProjectStopped && v.Counts.Running+v.Counts.Claimed == 0)
}

// StaleLine is the status's first line when no controller runs and the
// project is not settled: its running tasks and online nodes are only what
// the last tick saw (see ControllerView.Line). "" otherwise.
func (v *StatusView) StaleLine(now time.Time) string {
	if v.Settled() {
		return ""
	}
	return v.Controller.Line(v.Project, now)
}

// LiveWord is how a text view shows a live status (claimed, running) or a
// node's state: as is while a controller runs, else as last seen ("running
// at 19:56", a node "last seen").
func (c *ControllerView) LiveWord(state string, now time.Time) string {
	if !c.Stale() || c.LastTick().IsZero() {
		return state
	}
	switch state {
	case string(domain.Running), string(domain.Claimed), store.NodeOffline:
		return state + " at " + c.Clock(now)
	case store.NodeOnline:
		return "last seen"
	}
	return state
}

// Total is the number of tasks counted.
func (c Counts) Total() int {
	return c.Pending + c.Claimed + c.Running + c.Completed + c.Failed + c.Blocked + c.Canceled
}

// Add counts one task in the given status.
func (c *Counts) Add(status domain.Status) {
	switch status {
	case domain.Pending, domain.Lost:
		c.Pending++
	case domain.Claimed:
		c.Claimed++
	case domain.Running:
		c.Running++
	case domain.Completed:
		c.Completed++
	case domain.Failed:
		c.Failed++
	case domain.Blocked:
		c.Blocked++
	case domain.Canceled:
		c.Canceled++
	}
}

// TaskView is one task in status and report output.
type TaskView struct {
	ID              string        `json:"id"`
	Title           string        `json:"title"`
	Type            string        `json:"type"`
	Status          domain.Status `json:"status"`
	Node            string        `json:"node"`
	Attempt         int           `json:"attempt"`
	ExitCode        int           `json:"exit_code"`
	ErrorClass      string        `json:"error_class"`
	Error           string        `json:"error"`
	StartedAt       string        `json:"started_at"`
	CompletedAt     string        `json:"completed_at"`
	DurationSeconds float64       `json:"duration_seconds"`
	// Warning is shown by the text views; the JSON keeps SPEC §9's keys.
	Warning string `json:"-"`
	// ReusedFrom is the earlier run whose result this run reuses (0:
	// the task ran in this run); the report's JSON says it.
	ReusedFrom int `json:"-"`
	// NodeGone: Node is not in nodes.yaml any more (removed or renamed
	// since the task ran there); the text views say so.
	NodeGone bool `json:"-"`
	// Sandbox is how the current attempt was confined: "bwrap", or ""
	// for not at all (SPEC §13).
	Sandbox string `json:"sandbox"`
	// Gating is set on a running task whose tool ended and whose result
	// the gate is checking (project.yaml gate:).
	Gating bool `json:"gating,omitempty"`
	// Inputs names the result of each dependency the current attempt was
	// given: the dependency and its attempt.
	Inputs []domain.Given `json:"inputs"`
	// Stale is set when the task's result was made from a dependency's
	// result that is no longer the dependency's (retried or run again
	// since), StaleWhy says which (domain.Stale): retry --downstream.
	Stale    bool   `json:"stale,omitempty"`
	StaleWhy string `json:"stale_why,omitempty"`
	// Preemptions counts the task's attempts a more urgent task stopped
	// (controller.preemption); in the JSON only when there were some.
	Preemptions int `json:"preemptions,omitempty"`
	// SlurmJob is the id of the Slurm job of the current attempt (a node
	// with slurm:); Waiting, on a task not yet started, why its job waits
	// (Slurm's pending reason): the task is launched but waits, not runs.
	SlurmJob string `json:"slurm_job,omitempty"`
	Waiting  string `json:"waiting,omitempty"`
}

// NodeView is one node in status output.
type NodeView struct {
	Name              string `json:"name"`
	State             string `json:"state"`
	Slots             int    `json:"slots"`
	Running           int    `json:"running"`
	MemAvailableBytes int64  `json:"mem_available_bytes"`
	LastSeen          string `json:"last_seen"`
	LastError         string `json:"-"`
}

func jsonTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// Status builds the status of one project from the database.
func Status(ctx context.Context, st *store.Store, cfg Nodes, project string, now time.Time) (*StatusView, error) {
	p, err := st.Project(ctx, project)
	if err != nil {
		return nil, err
	}
	tasks, err := st.Tasks(ctx, project)
	if err != nil {
		return nil, err
	}
	v := &StatusView{Project: project, Run: p.Run, Phase: p.Phase, State: p.State, Problem: p.Problem, Tasks: []TaskView{}, Nodes: []NodeView{},
		state: p.State, result: p.Result, byID: map[string]int{}}
	sortTasks(tasks)
	currents, err := st.Currents(ctx, project)
	if err != nil {
		return nil, err
	}
	gating, err := st.Gating(ctx, project)
	if err != nil {
		return nil, err
	}
	given, err := st.Given(ctx, project)
	if err != nil {
		return nil, err
	}
	stale := domain.Stale(tasks, given)
	running := map[string]int{}
	for _, t := range tasks {
		v.Counts.Add(t.Status)
		if t.Status == domain.Running || t.Status == domain.Claimed {
			running[t.Node]++
		}
		v.byID[t.ID] = len(v.Tasks)
		tv := taskView(t, currents[t.ID], gating[t.ID], now)
		if given[t.ID] != nil {
			tv.Inputs = given[t.ID]
		}
		tv.StaleWhy = stale[t.ID]
		tv.Stale = tv.StaleWhy != ""
		v.Tasks = append(v.Tasks, tv)
		v.Preemptions += t.Preemptions
	}
	// A notification that failed is shown until one goes through.
	if e, ok, err := st.LastEvent(ctx, project, "notify", "notify_failed"); err != nil {
		return nil, err
	} else if ok && e.Kind == "notify_failed" {
		v.Notes = append(v.Notes, "notification failed: "+e.Message+" (it never stops the project; dispatch events "+project+" has the history)")
	}
	known, err := st.Nodes(ctx)
	if err != nil {
		return nil, err
	}
	pauses, err := st.Pauses(ctx)
	if err != nil {
		return nil, err
	}
	if b, err := budgetOf(ctx, st, p, v.Counts.Canceled); err != nil {
		return nil, err
	} else {
		v.Budget = b
	}
	v.addPauses(pauses, cfg, now)
	if cfg != nil {
		v.addNodes(cfg, known, running)
	}
	return v, nil
}

// taskView is t as status shows it at now.
func taskView(t domain.Task, cur store.Current, gating bool, now time.Time) TaskView {
	tv := TaskView{ID: t.ID, Title: t.Title, Type: t.Type, Status: t.Status, Node: t.Node, Attempt: t.Attempt,
		ExitCode: t.ExitCode, ErrorClass: t.ErrorClass, Error: t.Error, Warning: t.Warning, ReusedFrom: t.ReusedFrom,
		StartedAt: jsonTime(t.StartedAt), CompletedAt: jsonTime(t.CompletedAt), Sandbox: cur.Sandbox, Gating: gating, Inputs: []domain.Given{},
		Preemptions: t.Preemptions, SlurmJob: cur.SlurmJob}
	if t.Status == domain.Running || t.Status == domain.Claimed {
		tv.Waiting = cur.Waiting
	}
	switch {
	case !t.StartedAt.IsZero() && !t.CompletedAt.IsZero() && t.CompletedAt.After(t.StartedAt):
		tv.DurationSeconds = t.CompletedAt.Sub(t.StartedAt).Seconds()
	case !t.StartedAt.IsZero() && t.Status == domain.Running:
		tv.DurationSeconds = max(now.Sub(t.StartedAt).Seconds(), 0)
	}
	return tv
}

// sortTasks orders tasks as status shows them: the author tasks by ID
// (a matrix's and a broadcast's after their spec's place, in their order:
// S01.2 before S01.10), then the phase tasks in the order they came.
func sortTasks(tasks []domain.Task) {
	sort.SliceStable(tasks, func(i, j int) bool {
		pi, pj := domain.IsPhaseID(tasks[i].ID), domain.IsPhaseID(tasks[j].ID)
		if pi != pj {
			return !pi
		}
		if pi && !tasks[i].CreatedAt.Equal(tasks[j].CreatedAt) {
			return tasks[i].CreatedAt.Before(tasks[j].CreatedAt)
		}
		return domain.CompareIDs(tasks[i].ID, tasks[j].ID) < 0
	})
}

// addPauses adds the api_modes paused at now and, with cfg, the fallback
// each one's tasks run under meanwhile.
func (v *StatusView) addPauses(pauses []store.Pause, cfg Nodes, now time.Time) {
	paused := map[string]bool{}
	for _, p := range pauses {
		if now.Before(p.Until) {
			v.Paused = append(v.Paused, p)
			paused[p.APIMode] = true
		}
	}
	if cfg == nil {
		return
	}
	v.Fallbacks = map[string]string{}
	for _, p := range v.Paused {
		for _, fb := range cfg.Fallbacks(p.APIMode) {
			if !paused[fb] {
				v.Fallbacks[p.APIMode] = fb
				break
			}
		}
	}
}

// addNodes adds the nodes of cfg with what the store knows of them and
// the tasks running there, and marks the tasks of nodes no longer in it.
func (v *StatusView) addNodes(cfg Nodes, known []store.Node, running map[string]int) {
	configured := map[string]bool{}
	for _, n := range cfg.NodeSlots() {
		configured[n.Name] = true
	}
	for i := range v.Tasks {
		v.Tasks[i].NodeGone = v.Tasks[i].Node != "" && !configured[v.Tasks[i].Node]
	}
	facts := map[string]store.Node{}
	for _, n := range known {
		facts[n.Name] = n
	}
	for _, n := range cfg.NodeSlots() {
		f := facts[n.Name]
		state := f.State
		if state == "" {
			state = store.NodeUnknown
		}
		v.Nodes = append(v.Nodes, NodeView{Name: n.Name, State: state, Slots: n.Slots, Running: running[n.Name],
			MemAvailableBytes: f.MemAvailableBytes, LastSeen: jsonTime(f.LastSeen), LastError: f.LastError})
	}
}

// budgetOf is how the project's budget stopped it, from its spending as
// recorded; nil when it did not.
func budgetOf(ctx context.Context, st *store.Store, p domain.Project, canceled int) (*BudgetStop, error) {
	if opts, err := p.ParseOptions(); err != nil || !opts.HasBudget() {
		return nil, nil
	}
	usd, tokens, err := st.Spent(ctx, p.Name)
	if err != nil {
		return nil, err
	}
	return budgetStopOf(p, usd, tokens, canceled), nil
}
