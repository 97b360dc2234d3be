package readmodel

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/store"
)

// The views below are the HTTP API's own (docs/API.md): what the
// dashboard needs beyond the CLI's JSON, each read without reading every
// task of a project, so that they stay quick at ten thousand tasks.

// ProjectsView is /api/v1/projects.
type ProjectsView struct {
	Projects []ProjectSummary `json:"projects"`
}

// ProjectSummary is one project at a glance.
type ProjectSummary struct {
	Project string `json:"project"`
	Run     int    `json:"run"`
	// State is active, stopped or done; Result passed, failed or stopped
	// once done ("" before).
	State        string       `json:"state"`
	Result       string       `json:"result"`
	Phase        domain.Phase `json:"phase"`
	Counts       Counts       `json:"counts"`
	Tasks        int          `json:"tasks"`
	CostUSD      float64      `json:"cost_usd"`
	TokensIn     int64        `json:"tokens_in"`
	TokensOut    int64        `json:"tokens_out"`
	StartedAt    string       `json:"started_at"`
	FinishedAt   string       `json:"finished_at"`
	NextSchedule string       `json:"next_schedule"`
	Problem      string       `json:"problem"`
	Notes        []string     `json:"notes"`
	Paused       []PauseView  `json:"paused"`
	Budget       *BudgetView  `json:"budget"`
	Conflicts    int          `json:"conflicts"`
}

// PauseView is an api_mode paused by a rate limit until its reset.
type PauseView struct {
	APIMode string `json:"api_mode"`
	Until   string `json:"until"`
	Reason  string `json:"reason"`
	// Fallback is the api_mode its tasks run under meanwhile ("" none).
	Fallback string `json:"fallback"`
}

// BudgetView is a project's budget and its burn.
type BudgetView struct {
	LimitUSD    float64 `json:"limit_usd"`
	LimitTokens int64   `json:"limit_tokens"`
	SpentUSD    float64 `json:"spent_usd"`
	SpentTokens int64   `json:"spent_tokens"`
	// Stopped: the budget was reached and nothing new starts.
	Stopped bool   `json:"stopped"`
	Summary string `json:"summary"`
}

// Projects summarizes every started project.
func Projects(ctx context.Context, st *store.Store, cfg Nodes, now time.Time) (*ProjectsView, error) {
	ps, err := st.Projects(ctx)
	if err != nil {
		return nil, err
	}
	v := &ProjectsView{Projects: []ProjectSummary{}}
	for _, p := range ps {
		s, err := Summary(ctx, st, cfg, p.Name, now)
		if err != nil {
			return nil, err
		}
		v.Projects = append(v.Projects, *s)
	}
	return v, nil
}

// Summary is one project at a glance, from its counts and sums.
func Summary(ctx context.Context, st *store.Store, cfg Nodes, project string, now time.Time) (*ProjectSummary, error) {
	p, err := st.Project(ctx, project)
	if err != nil {
		return nil, err
	}
	s := &ProjectSummary{Project: project, Run: p.Run, State: p.State, Result: p.Result, Phase: p.Phase,
		StartedAt: jsonTime(p.StartedAt), FinishedAt: jsonTime(p.FinishedAt), Problem: p.Problem, Notes: []string{}, Paused: []PauseView{}}
	counts, err := st.Counts(ctx, project)
	if err != nil {
		return nil, err
	}
	for status, n := range counts {
		for range n {
			s.Counts.Add(status)
		}
	}
	s.Tasks = s.Counts.Total()
	if s.TokensIn, s.TokensOut, s.CostUSD, err = st.Usage(ctx, project); err != nil {
		return nil, err
	}
	if err := s.addBudget(ctx, st, p); err != nil {
		return nil, err
	}
	if e, ok, err := st.LastEvent(ctx, project, "notify", "notify_failed"); err != nil {
		return nil, err
	} else if ok && e.Kind == "notify_failed" {
		s.Notes = append(s.Notes, "notification failed: "+e.Message)
	}
	pauses, err := st.Pauses(ctx)
	if err != nil {
		return nil, err
	}
	sv := &StatusView{}
	sv.addPauses(pauses, cfg, now)
	for _, pa := range sv.Paused {
		s.Paused = append(s.Paused, PauseView{APIMode: pa.APIMode, Until: jsonTime(pa.Until), Reason: pa.Reason, Fallback: sv.Fallbacks[pa.APIMode]})
	}
	conflicts, err := st.Conflicts(ctx, project)
	if err != nil {
		return nil, err
	}
	s.Conflicts = len(conflicts)
	scs, err := st.Schedules(ctx)
	if err != nil {
		return nil, err
	}
	for _, sc := range scs {
		if sc.Project == project && sc.Enabled {
			s.NextSchedule = jsonTime(sc.NextAt)
		}
	}
	return s, nil
}

func (s *ProjectSummary) addBudget(ctx context.Context, st *store.Store, p domain.Project) error {
	opts, err := p.ParseOptions()
	if err != nil || !opts.HasBudget() {
		return nil
	}
	b := &BudgetView{LimitUSD: opts.BudgetUSD, LimitTokens: opts.BudgetTokens, SpentUSD: s.CostUSD, SpentTokens: s.TokensIn + s.TokensOut}
	if stop := budgetStopOf(p, s.CostUSD, s.TokensIn+s.TokensOut, s.Counts.Canceled); stop != nil {
		b.Stopped, b.Summary = true, stop.Summary()
	}
	s.Budget = b
	return nil
}

// Window cuts v's tasks to those from offset on, at most limit of them
// (all with limit < 0), says which part it kept, and adds to each what
// the dashboard's table shows of it: its api_mode, tokens and cost in
// this run, heartbeat and stall timeout while it runs, and its newest
// event. Reads are per task of the window, never of the whole project.
func (v *StatusView) Window(ctx context.Context, st *store.Store, cfg Nodes, offset, limit int, now time.Time) (*PagedStatus, error) {
	total := len(v.Tasks)
	offset = min(max(offset, 0), total)
	end := total
	if limit >= 0 && limit < total-offset { // offset+limit may overflow
		end = offset + limit
	}
	p, err := st.Project(ctx, v.Project)
	if err != nil {
		return nil, err
	}
	rows := make([]TaskRow, 0, end-offset)
	for _, tv := range v.Tasks[offset:end] {
		r, err := taskRow(ctx, st, cfg, p, tv)
		if err != nil {
			return nil, err
		}
		rows = append(rows, r)
	}
	return &PagedStatus{StatusView: v, Page: Page{Offset: offset, Limit: limit, Total: total}, rows: rows}, nil
}

// TaskRow is a task in a windowed status: its status view and more.
type TaskRow struct {
	TaskView
	APIMode      string     `json:"api_mode"`
	TokensIn     int64      `json:"tokens_in"`
	TokensOut    int64      `json:"tokens_out"`
	CostUSD      float64    `json:"cost_usd"`
	HeartbeatAt  string     `json:"heartbeat_at"`
	OutputAt     string     `json:"output_at"`
	StallSeconds float64    `json:"stall_seconds"`
	LastEvent    *EventView `json:"last_event"`
}

func taskRow(ctx context.Context, st *store.Store, cfg Nodes, p domain.Project, tv TaskView) (TaskRow, error) {
	r := TaskRow{TaskView: tv}
	as, err := st.Attempts(ctx, p.Name, tv.ID)
	if err != nil {
		return r, err
	}
	for _, a := range as {
		if a.Run != p.Run {
			continue
		}
		r.APIMode = a.APIMode
		r.TokensIn = addSat(r.TokensIn, max(a.TokensIn, 0))
		r.TokensOut = addSat(r.TokensOut, max(a.TokensOut, 0))
		r.CostUSD += clampCost(a.CostUSD)
	}
	if tv.Status == domain.Running || tv.Status == domain.Claimed {
		t, err := st.Task(ctx, p.Name, tv.ID)
		if err != nil {
			return r, err
		}
		r.HeartbeatAt, r.OutputAt, r.StallSeconds = heartbeat(t, p, cfg)
	}
	evs, err := st.TaskEvents(ctx, p.Name, tv.ID, 1)
	if err != nil {
		return r, err
	}
	if len(evs) == 1 {
		e := Event(evs[0])
		r.LastEvent = &e
	}
	return r, nil
}

// heartbeat is when a running task last showed life, when its tool last
// wrote (as of that heartbeat: how long it had been quiet, by the node's
// clock, taken from when the controller saw the beat; "" when the
// heartbeat does not say), and the quiet time after which it is stopped.
// The stall watch counts from the output, not from the heartbeat.
func heartbeat(t domain.Task, p domain.Project, cfg Nodes) (string, string, float64) {
	var nodeStall time.Duration
	if cfg != nil {
		for _, n := range cfg.NodeSlots() {
			if n.Name == t.Node {
				nodeStall = n.Stall
			}
		}
	}
	opts, _ := p.ParseOptions()
	var output string
	if quiet, ok := domain.HeartbeatQuiet(t.Heartbeat); ok && !t.HeartbeatAt.IsZero() {
		output = jsonTime(t.HeartbeatAt.Add(-quiet))
	}
	return jsonTime(t.HeartbeatAt), output, domain.StallTimeout(t, opts, nodeStall).Seconds()
}

// PagedStatus is a status with a window of its tasks.
type PagedStatus struct {
	*StatusView
	Page Page `json:"page"`
	rows []TaskRow
}

// Page says which tasks a windowed view holds of how many.
type Page struct {
	Offset int `json:"offset"`
	Limit  int `json:"limit"`
	Total  int `json:"total"`
}

// MarshalJSON writes the status with the window's rows as its tasks.
func (p *PagedStatus) MarshalJSON() ([]byte, error) {
	type status StatusView // without this method
	return json.Marshal(struct {
		*status
		Tasks []TaskRow `json:"tasks"`
		Page  Page      `json:"page"`
	}{(*status)(p.StatusView), p.rows, p.Page})
}

// GraphView is a project's dependency graph.
type GraphView struct {
	Tasks []GraphTask `json:"tasks"`
}

// GraphTask is one task of the graph with the tasks it waits for.
type GraphTask struct {
	ID        string        `json:"id"`
	Status    domain.Status `json:"status"`
	DependsOn []string      `json:"depends_on"`
}

// Graph is the dependency graph of the tasks of st's run of project.
func Graph(ctx context.Context, st *store.Store, project string) (*GraphView, error) {
	tasks, err := st.Tasks(ctx, project)
	if err != nil {
		return nil, err
	}
	sortTasks(tasks)
	v := &GraphView{Tasks: make([]GraphTask, 0, len(tasks))}
	for _, t := range tasks {
		deps := t.DependsOn
		if deps == nil {
			deps = []string{}
		}
		v.Tasks = append(v.Tasks, GraphTask{ID: t.ID, Status: t.Status, DependsOn: deps})
	}
	return v, nil
}

// TaskDetail is /api/v1/projects/<p>/tasks/<ID>: the task as the report
// shows it, with its dependencies, latest events, diffstat and heartbeat.
type TaskDetail struct {
	ReportTask
	DependsOn  []string    `json:"depends_on"`
	Dependents []string    `json:"dependents"`
	Events     []EventView `json:"events"`
	// Diffstat is a git-native task's `git diff --stat` ("" otherwise).
	Diffstat string `json:"diffstat"`
	// HeartbeatAt is when the running attempt last showed life;
	// OutputAt when its tool last wrote ("" when unknown); StallSeconds
	// the quiet time after which it is stopped.
	HeartbeatAt  string  `json:"heartbeat_at"`
	OutputAt     string  `json:"output_at"`
	StallSeconds float64 `json:"stall_seconds"`
	Tool         string  `json:"tool"`
	Model        string  `json:"model"`
	Priority     int     `json:"priority"`
}

// taskEvents is how many of its newest events a task's detail lists.
const taskEvents = 50

// Task is one task of st's run of project in detail; homeDir holds the
// collected results, cfg the nodes (nil: not known).
func Task(ctx context.Context, st *store.Store, cfg Nodes, homeDir, project, id string, now time.Time) (*TaskDetail, error) {
	p, err := st.Project(ctx, project)
	if err != nil {
		return nil, err
	}
	t, err := st.Task(ctx, project, id)
	if err != nil {
		return nil, err
	}
	currents, err := st.Currents(ctx, project)
	if err != nil {
		return nil, err
	}
	gating, err := st.Gating(ctx, project)
	if err != nil {
		return nil, err
	}
	tv := taskView(t, currents[t.ID], gating[t.ID], now)
	if given, err := st.Given(ctx, project); err != nil {
		return nil, err
	} else if given[id] != nil {
		tv.Inputs = given[id]
	}
	d := &TaskDetail{ReportTask: ReportTask{TaskView: tv, ReusedFromRun: t.ReusedFrom, Attempts: []AttemptView{}, Outputs: []OutputView{}},
		DependsOn: slices.Clone(t.DependsOn), Dependents: []string{}, Events: []EventView{}, Tool: t.Tool, Model: t.Model, Priority: t.Priority}
	if d.DependsOn == nil {
		d.DependsOn = []string{}
	}
	if err := d.addRecords(ctx, st, p, t); err != nil {
		return nil, err
	}
	dir := RunDir(homeDir, project, st.Archived())
	if t.Status == domain.Failed {
		d.LogTail = LogTail(filepath.Join(dir, t.ID, "task.log"), 20)
	}
	d.Diffstat = readCapped(filepath.Join(dir, t.ID, "diffstat.txt"), 64<<10)
	if t.Status == domain.Running || t.Status == domain.Claimed {
		d.HeartbeatAt, d.OutputAt, d.StallSeconds = heartbeat(t, p, cfg)
	}
	return d, nil
}

// addRecords adds the task's attempts of this run and the runs before it
// (newest first), outputs, dependents and latest events.
func (d *TaskDetail) addRecords(ctx context.Context, st *store.Store, p domain.Project, t domain.Task) error {
	as, err := st.Attempts(ctx, t.Project, t.ID)
	if err != nil {
		return err
	}
	d.Attempts = taskAttempts(as, p.Run)
	files, err := st.Files(ctx, t.Project, t.ID)
	if err != nil {
		return err
	}
	for _, f := range files {
		d.Outputs = append(d.Outputs, OutputView{Path: f.Path, Size: f.Size, SHA256: f.SHA256})
	}
	if d.Dependents, err = st.Dependents(ctx, t.Project, t.ID); err != nil {
		return err
	}
	evs, err := st.TaskEvents(ctx, t.Project, t.ID, taskEvents)
	if err != nil {
		return err
	}
	for _, e := range evs {
		d.Events = append(d.Events, Event(e))
	}
	return nil
}

// readCapped reads up to max bytes of path; "" when it cannot.
func readCapped(path string, max int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max))
	if err != nil && !errors.Is(err, io.EOF) {
		return ""
	}
	return string(b)
}
