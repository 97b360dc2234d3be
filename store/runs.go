package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/dispatch-tool/dispatch/domain"
)

// A project's runs (issue 14): the live tables hold each project's current
// run; BeginRun archives the run that ended into project_runs and the
// run_* tables and begins the next. Attempts and events carry their run
// and stay where they are. AtRun gives a Store that reads an archived run
// through the same queries.

// currentRun is the current run of the project named by the statement's
// next argument.
const currentRun = "(SELECT p.run FROM projects p WHERE p.name = ?)"

// runOf is the run a query reads: run itself when set, else the current
// run of the project that is the statement's argument number arg (a
// subquery SQLite evaluates once, not per row).
func runOf(run, arg int) string {
	if run > 0 {
		return strconv.Itoa(run)
	}
	return "(SELECT p.run FROM projects p WHERE p.name = ?" + strconv.Itoa(arg) + ")"
}

// table is what a read of the live table name goes to: the table itself,
// or the archived rows of the run this Store reads, under the same name.
func (s *Store) table(name string) string {
	if s.run == 0 {
		return name
	}
	return fmt.Sprintf("(SELECT * FROM run_%s WHERE run = %d) AS %s", name, s.run, name)
}

// taskColumns are every column of tasks, in the order taskSelect reads them.
const taskColumns = `project, id, title, type, tool, model, priority, depends_on, tags, node_pin,
	timeout_seconds, max_retries, spec_file, spec_hash, snapshot, status, attempt, retries_used, node,
	not_before, exit_code, error_class, error, started_at, completed_at, heartbeat, heartbeat_at,
	created_at, updated_at, warning, base_dir, rate_limit_retries, stall_seconds, base_commit, reused_from, lost_retries, sandbox, limits, network, env, retry_backoff_seconds, files, start_from, on_conflict, not_preemptible, preemptions`

// RunRangeError is a run number a project does not have.
type RunRangeError struct {
	Project     string
	Run, Latest int
}

func (e *RunRangeError) Error() string {
	if e.Latest == 1 {
		return fmt.Sprintf("%s has one run (run 1), not run %d", e.Project, e.Run)
	}
	return fmt.Sprintf("%s has runs 1 to %d, not run %d", e.Project, e.Latest, e.Run)
}

// AtRun returns a Store that reads run n of project (0: the current one)
// and the number of the run it reads. Its tasks, manifests, conflicts,
// verdicts, project row, spending and events are those of that run;
// attempts (Attempts) are every run's, each with its Run.
func (s *Store) AtRun(ctx context.Context, project string, n int) (*Store, int, error) {
	p, err := s.Project(ctx, project)
	if err != nil {
		return nil, 0, err
	}
	if n == 0 || n == p.Run {
		return s, p.Run, nil
	}
	if n < 1 || n > p.Run {
		return nil, p.Run, &RunRangeError{Project: project, Run: n, Latest: p.Run}
	}
	pruned, err := s.PruneStates(ctx, project)
	if err != nil {
		return nil, p.Run, err
	}
	if _, gone := pruned[n]; gone {
		return nil, p.Run, fmt.Errorf("run %d of %s was pruned (retention): `dispatch runs %s` lists the runs kept: %w", n, project, project, ErrNotFound)
	}
	at := *s
	at.run = n
	return &at, n, nil
}

// Archived is the archived run this Store reads (AtRun), 0 for the
// current runs.
func (s *Store) Archived() int { return s.run }

func (s *Store) archivedProject(ctx context.Context, name string) (domain.Project, error) {
	p := domain.Project{Name: name, Run: s.run}
	var started, finished string
	err := s.db.QueryRowContext(ctx, `SELECT state, phase, result, options, started_at, finished_at, final_commit
		FROM project_runs WHERE project = ? AND run = ?`, name, s.run).Scan(&p.State, &p.Phase, &p.Result, &p.Options, &started, &finished, &p.FinalCommit)
	if errors.Is(err, sql.ErrNoRows) {
		return p, fmt.Errorf("project %s run %d: %w", name, s.run, ErrNotFound)
	}
	if err != nil {
		return p, fmt.Errorf("read project %s run %d: %w", name, s.run, err)
	}
	p.StartedAt, p.FinishedAt = parseTime(started), parseTime(finished)
	return p, nil
}

// RunSummary is one run of a project as `dispatch runs` lists it.
type RunSummary struct {
	Project domain.Project
	// Ran counts the tasks with an attempt in the run, Reused those whose
	// result came from an earlier run.
	Ran, Reused int
	CostUSD     float64
}

// RunHistory returns every run of a project that is not pruned, the first first, in a few
// queries however many runs there are.
func (s *Store) RunHistory(ctx context.Context, project string) ([]RunSummary, error) {
	cur, err := s.Project(ctx, project)
	if err != nil {
		return nil, err
	}
	out := make([]RunSummary, cur.Run)
	for i := range out {
		out[i].Project = domain.Project{Name: project, Run: i + 1}
	}
	out[cur.Run-1].Project = cur
	err = eachRow(ctx, s.db, func(r scanner) error {
		var p domain.Project
		var started, finished string
		if err := r.Scan(&p.Run, &p.State, &p.Phase, &p.Result, &p.Options, &started, &finished, &p.FinalCommit); err != nil {
			return err
		}
		p.Name, p.StartedAt, p.FinishedAt = project, parseTime(started), parseTime(finished)
		if p.Run >= 1 {
			out[p.Run-1].Project = p
		}
		return nil
	}, `SELECT run, state, phase, result, options, started_at, finished_at, final_commit
		FROM project_runs WHERE project = ? AND run < ? ORDER BY run`, project, cur.Run)
	if err != nil {
		return nil, fmt.Errorf("read the runs of %s: %w", project, err)
	}
	// What ran and what it cost, by run; then what each run reused.
	at := func(run int) *RunSummary {
		if run < 1 || run > len(out) {
			return &RunSummary{}
		}
		return &out[run-1]
	}
	err = eachRow(ctx, s.db, func(r scanner) error {
		var run, ran int
		var cost float64
		if err := r.Scan(&run, &ran, &cost); err != nil {
			return err
		}
		at(run).Ran, at(run).CostUSD = ran, cost
		return nil
	}, `SELECT run, COUNT(DISTINCT task), TOTAL(cost_usd) FROM attempts WHERE project = ?1 GROUP BY run`, project)
	if err != nil {
		return nil, fmt.Errorf("read the runs of %s: %w", project, err)
	}
	err = eachRow(ctx, s.db, func(r scanner) error {
		var run, reused int
		if err := r.Scan(&run, &reused); err != nil {
			return err
		}
		at(run).Reused = reused
		return nil
	}, `SELECT run, COUNT(*) FROM run_tasks WHERE project = ?1 AND reused_from > 0 GROUP BY run
		UNION ALL SELECT `+runOf(0, 1)+`, COUNT(*) FROM tasks WHERE project = ?1 AND reused_from > 0`, project)
	if err != nil {
		return nil, fmt.Errorf("read the runs of %s: %w", project, err)
	}
	pruned, err := s.PruneStates(ctx, project)
	if err != nil || len(pruned) == 0 {
		return out, err
	}
	kept := out[:0]
	for _, r := range out {
		if _, gone := pruned[r.Project.Run]; !gone {
			kept = append(kept, r)
		}
	}
	return kept, nil
}

// BeginRun archives the project's current run (its row, tasks, manifests,
// conflicts and verdicts) and begins the next one, active in its
// implementation phase with options; it returns the new run's number. The
// live tasks, conflicts and verdicts stay as they were: the caller
// decides, task by task, to run each again (RunAgain), reuse it (Reuse)
// or remove it (DeleteTasks, which also clears the phase's conflicts and
// verdicts).
func (tx *Tx) BeginRun(ctx context.Context, project, options, message string) (int, error) {
	var run int
	if err := tx.tx.QueryRowContext(ctx, "SELECT run FROM projects WHERE name = ?", project).Scan(&run); err != nil {
		return 0, fmt.Errorf("project %s: %w", project, err)
	}
	for _, q := range []string{
		`INSERT INTO project_runs (project, run, state, phase, result, options, started_at, finished_at, final_commit)
			SELECT name, ?1, state, phase, result, options, started_at, finished_at, final_commit FROM projects WHERE name = ?2`,
		"INSERT OR IGNORE INTO run_snapshots (project, spec_hash, snapshot) SELECT project, spec_hash, snapshot FROM tasks WHERE project = ?2 AND ?1 > 0",
		"INSERT INTO run_tasks (run, " + taskColumns + ") SELECT ?1, " + strings.Replace(taskColumns, "snapshot", "x''", 1) + " FROM tasks WHERE project = ?2",
		"INSERT INTO run_files (run, project, task, attempt, path, size, sha256) SELECT ?1, project, task, attempt, path, size, sha256 FROM files WHERE project = ?2",
		"INSERT INTO run_conflicts (run, project, path, tasks) SELECT ?1, project, path, tasks FROM conflicts WHERE project = ?2",
		"INSERT INTO run_verdicts (run, project, task, round, pass, issues) SELECT ?1, project, task, round, pass, issues FROM verdicts WHERE project = ?2",
	} {
		if _, err := tx.tx.ExecContext(ctx, q, run, project); err != nil {
			return 0, fmt.Errorf("archive run %d of %s: %w", run, project, err)
		}
	}
	if _, err := tx.tx.ExecContext(ctx, `UPDATE projects SET run = run + 1, state = ?, phase = ?, result = '', options = ?,
		started_at = ?, finished_at = '', final_commit = '', problem = '' WHERE name = ?`,
		domain.ProjectActive, domain.PhaseImplementation, options, formatTime(tx.now), project); err != nil {
		return 0, fmt.Errorf("begin run %d of %s: %w", run+1, project, err)
	}
	if err := tx.Event(ctx, Event{Project: project, Kind: "project", ToStatus: domain.ProjectActive, Message: message}); err != nil {
		return 0, err
	}
	return run + 1, nil
}

// RunAgain makes a task of a new run pending again with t's spec and
// settings, its attempts counted on from the last one (an attempt number
// is never reused: the nodes fence stale attempts off by it); reason says
// why it runs again.
func (tx *Tx) RunAgain(ctx context.Context, t domain.Task, reason string) error {
	var from string
	if err := tx.tx.QueryRowContext(ctx, "SELECT status FROM tasks WHERE project = ? AND id = ?", t.Project, t.ID).Scan(&from); err != nil {
		return fmt.Errorf("task %s/%s: %w", t.Project, t.ID, err)
	}
	_, err := tx.tx.ExecContext(ctx, `UPDATE tasks SET status = ?, retries_used = 0, rate_limit_retries = 0, lost_retries = 0, preemptions = 0, node = '',
		not_before = '', exit_code = 0, error_class = '', error = '', started_at = '', completed_at = '', heartbeat = '',
		heartbeat_at = '', warning = '', reused_from = 0, title = ?, type = ?, tool = ?, model = ?, priority = ?,
		depends_on = ?, tags = ?, node_pin = ?, timeout_seconds = ?, stall_seconds = ?, max_retries = ?, spec_file = ?,
		spec_hash = ?, snapshot = ?, base_dir = ?, base_commit = ?, sandbox = ?, limits = ?, network = ?, env = ?, retry_backoff_seconds = ?, files = ?, start_from = ?, on_conflict = ?, not_preemptible = ?, updated_at = ? WHERE project = ? AND id = ?`,
		domain.Pending, t.Title, t.Type, t.Tool, t.Model, t.Priority, sqlValue(t.DependsOn), sqlValue(t.Tags), t.NodePin,
		t.Timeout.Seconds(), t.Stall.Seconds(), t.MaxRetries, t.SpecFile, t.SpecHash, t.Snapshot, t.BaseDir, t.BaseCommit, t.Sandbox, sqlValue(t.Limits), t.Network, sqlValue(t.Env), t.RetryBackoff.Seconds(), sqlValue(t.Files), t.StartFrom, t.OnConflict, t.NotPreemptible,
		formatTime(tx.now), t.Project, t.ID)
	if err != nil {
		return fmt.Errorf("run %s/%s again: %w", t.Project, t.ID, err)
	}
	if _, err := tx.tx.ExecContext(ctx, "DELETE FROM files WHERE project = ? AND task = ?", t.Project, t.ID); err != nil {
		return fmt.Errorf("run %s/%s again: %w", t.Project, t.ID, err)
	}
	return tx.Event(ctx, Event{Project: t.Project, Task: t.ID, Kind: "rerun", FromStatus: string(from), ToStatus: string(domain.Pending), Message: reason})
}

// Reuse keeps a completed task's result in the new run: from is the run
// whose attempt made it. The task takes t's settings (title, priority,
// tags, dependencies, …: what its spec file says now); its status, attempt
// and results stay.
func (tx *Tx) Reuse(ctx context.Context, t domain.Task, from int) error {
	if err := tx.SetTask(ctx, t.Project, t.ID, TaskPatch{ReusedFrom: &from, Warning: new(""), Title: &t.Title, Type: &t.Type,
		Priority: &t.Priority, DependsOn: &t.DependsOn, Tags: &t.Tags, NodePin: &t.NodePin, Timeout: &t.Timeout,
		Stall: &t.Stall, MaxRetries: &t.MaxRetries, SpecFile: &t.SpecFile, Sandbox: &t.Sandbox, Limits: &t.Limits, Network: &t.Network, Env: &t.Env, RetryBackoff: &t.RetryBackoff, Files: &t.Files, StartFrom: &t.StartFrom, OnConflict: &t.OnConflict, NotPreemptible: &t.NotPreemptible}); err != nil {
		return err
	}
	return tx.Event(ctx, Event{Project: t.Project, Task: t.ID, Kind: "reused", ToStatus: string(domain.Completed),
		Message: fmt.Sprintf("reused from run %d: its inputs are unchanged", from)})
}

// Result returns a task's current attempt and the commit it produced (in a
// git-native project; "" otherwise).
func (tx *Tx) Result(ctx context.Context, project, id string) (attempt int, commit string, err error) {
	err = tx.tx.QueryRowContext(ctx, `SELECT t.attempt, COALESCE(r.result_commit, '') FROM tasks t
		LEFT JOIN attempts r ON r.project = t.project AND r.task = t.id AND r.attempt = t.attempt
		WHERE t.project = ? AND t.id = ?`, project, id).Scan(&attempt, &commit)
	if err != nil {
		return 0, "", fmt.Errorf("read the result of %s/%s: %w", project, id, err)
	}
	return attempt, commit, nil
}
