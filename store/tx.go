package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/internal/yamlval"
)

// ErrConflict is returned by Transition when the task is not in the status the
// caller expected: someone else changed it first, so the caller's decision is
// stale.
var ErrConflict = errors.New("task status changed concurrently")

// IllegalTransitionError is returned for a transition the state machine forbids.
type IllegalTransitionError struct {
	Project, Task string
	From, To      domain.Status
}

func (e *IllegalTransitionError) Error() string {
	return fmt.Sprintf("task %s/%s: illegal transition %s → %s", e.Project, e.Task, e.From, e.To)
}

// Tx is one write transaction; see Store.Update.
type Tx struct {
	tx  *sql.Tx
	now time.Time
}

// Now is the time of the transaction, used for every timestamp it writes.
func (tx *Tx) Now() time.Time { return tx.now }

func sqlValue(v any) any {
	switch v := v.(type) {
	case time.Time:
		return formatTime(v)
	case time.Duration:
		return v.Seconds()
	case []byte:
		if v == nil {
			v = []byte{} // the columns are NOT NULL
		}
		return v
	case yamlval.Limits:
		if v.Zero() {
			return ""
		}
		b, _ := json.Marshal(v)
		return string(b)
	case map[string]string:
		if len(v) == 0 {
			return ""
		}
		b, _ := json.Marshal(v)
		return string(b)
	case []string:
		if v == nil {
			v = []string{}
		}
		b, _ := json.Marshal(v)
		return string(b)
	default:
		return v
	}
}

// Change is a status transition of one task and what it sets along with it.
type Change struct {
	Project, Task string
	From, To      domain.Status
	// Kind names the event; "status" when empty.
	Kind    string
	Message string
	Set     TaskPatch
}

// Transition moves a task from c.From to c.To, applies c.Set and appends the
// event, in one UPDATE ... RETURNING guarded by the expected status. It returns
// the task's attempt and node after the change.
func (tx *Tx) Transition(ctx context.Context, c Change) (attempt int, node string, err error) {
	return tx.transition(ctx, c, nil)
}

// transition is Transition with more columns set by the store itself.
func (tx *Tx) transition(ctx context.Context, c Change, more func(*columns)) (attempt int, node string, err error) {
	if !domain.Legal(c.From, c.To) {
		return 0, "", &IllegalTransitionError{Project: c.Project, Task: c.Task, From: c.From, To: c.To}
	}
	cols := &columns{}
	cols.add("status", c.To)
	cols.add("updated_at", tx.now)
	if more != nil {
		more(cols)
	}
	set := c.Set.columns()
	cols.clauses, cols.args = append(cols.clauses, set.clauses...), append(cols.args, set.args...)
	args := append(cols.args, c.Project, c.Task, c.From)
	q := "UPDATE tasks SET " + cols.sql() +
		" WHERE project = ? AND id = ? AND status = ? RETURNING attempt, node"
	err = tx.tx.QueryRowContext(ctx, q, args...).Scan(&attempt, &node)
	if errors.Is(err, sql.ErrNoRows) {
		var cur string
		if err := tx.tx.QueryRowContext(ctx, "SELECT status FROM tasks WHERE project = ? AND id = ?", c.Project, c.Task).Scan(&cur); errors.Is(err, sql.ErrNoRows) {
			return 0, "", fmt.Errorf("task %s/%s: %w", c.Project, c.Task, ErrNotFound)
		}
		return 0, "", fmt.Errorf("task %s/%s is %s, not %s: %w", c.Project, c.Task, cur, c.From, ErrConflict)
	}
	if err != nil {
		return 0, "", fmt.Errorf("transition %s/%s %s → %s: %w", c.Project, c.Task, c.From, c.To, err)
	}
	kind := c.Kind
	if kind == "" {
		kind = "status"
	}
	err = tx.Event(ctx, Event{Project: c.Project, Task: c.Task, Attempt: attempt, Kind: kind,
		FromStatus: string(c.From), ToStatus: string(c.To), Node: node, Message: c.Message})
	return attempt, node, err
}

// Claim assigns a pending task to node and starts its next attempt: one atomic
// UPDATE ... RETURNING moves it to claimed and increments the attempt, and the
// attempt row and event are written in the same transaction. It returns the new
// attempt number, or ErrConflict if the task is no longer pending.
func (tx *Tx) Claim(ctx context.Context, project, task, node string) (int, error) {
	return tx.ClaimAttempt(ctx, project, task, node, AttemptInit{})
}

// AttemptInit are the columns a claimed attempt's row starts with beside
// its node and status: its api_mode, its inputs (for reuse) and the given
// attempts of its dependencies (AttemptPatch says what each holds).
type AttemptInit struct {
	APIMode, Inputs, Given string
}

// ClaimAttempt is Claim with the new attempt's row written with init in
// the same statement.
func (tx *Tx) ClaimAttempt(ctx context.Context, project, task, node string, init AttemptInit) (int, error) {
	attempt, _, err := tx.transition(ctx, Change{
		Project: project, Task: task, From: domain.Pending, To: domain.Claimed, Kind: "claim",
		Message: "assigned to " + node,
		Set: TaskPatch{ExitCode: new(0), ErrorClass: new(""), Warning: new(""), Error: new(""),
			StartedAt: new(time.Time{}), CompletedAt: new(time.Time{}), Heartbeat: new(""), HeartbeatAt: new(tx.now),
			ReusedFrom: new(0)},
	}, func(c *columns) {
		c.add("node", node)
		c.expr("attempt", "attempt + 1")
	})
	if err != nil {
		return 0, err
	}
	_, err = tx.tx.ExecContext(ctx, `INSERT INTO attempts (project, task, attempt, node, status, claimed_at, api_mode, inputs, given, run)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, `+currentRun+`)`, project, task, attempt, node, domain.Claimed, formatTime(tx.now),
		init.APIMode, init.Inputs, init.Given, project)
	if err != nil {
		return 0, fmt.Errorf("record run %s/%s#%d: %w", project, task, attempt, err)
	}
	return attempt, nil
}

// SetTask changes columns of a task other than its status (heartbeat, notes
// of the attempt); status changes go through Transition.
func (tx *Tx) SetTask(ctx context.Context, project, task string, p TaskPatch) error {
	cols := p.columns()
	if len(cols.clauses) == 0 {
		return nil
	}
	args := append(cols.args, formatTime(tx.now), project, task)
	res, err := tx.tx.ExecContext(ctx, "UPDATE tasks SET "+cols.sql()+", updated_at = ? WHERE project = ? AND id = ?", args...)
	if err != nil {
		return fmt.Errorf("update task %s/%s: %w", project, task, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("task %s/%s: %w", project, task, ErrNotFound)
	}
	return nil
}

// SetAttempt changes columns of one attempt's row.
func (tx *Tx) SetAttempt(ctx context.Context, project, task string, attempt int, p AttemptPatch) error {
	cols := p.columns()
	if len(cols.clauses) == 0 {
		return nil
	}
	args := append(cols.args, project, task, attempt)
	res, err := tx.tx.ExecContext(ctx, "UPDATE attempts SET "+cols.sql()+" WHERE project = ? AND task = ? AND attempt = ?", args...)
	if err != nil {
		return fmt.Errorf("update run %s/%s#%d: %w", project, task, attempt, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("run %s/%s#%d: %w", project, task, attempt, ErrNotFound)
	}
	return nil
}

// Event appends one event to the log.
func (tx *Tx) Event(ctx context.Context, e Event) error {
	if e.Time.IsZero() {
		e.Time = tx.now
	}
	_, err := tx.tx.ExecContext(ctx, `INSERT INTO events (time, project, task, attempt, kind, from_status, to_status, node, message, run)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, COALESCE(`+currentRun+`, 1))`, formatTime(e.Time), e.Project, e.Task, e.Attempt, e.Kind,
		e.FromStatus, e.ToStatus, e.Node, e.Message, e.Project)
	if err != nil {
		return fmt.Errorf("append event %s: %w", e.Kind, err)
	}
	return nil
}

// EnsureProject records a started project (or reactivates it) and appends an
// event when it is new or was not active.
func (tx *Tx) EnsureProject(ctx context.Context, name, options string) error {
	var state string
	err := tx.tx.QueryRowContext(ctx, "SELECT state FROM projects WHERE name = ?", name).Scan(&state)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		if _, err := tx.tx.ExecContext(ctx, `INSERT INTO projects (name, state, phase, options, started_at) VALUES (?, ?, ?, ?, ?)`,
			name, domain.ProjectActive, "implementation", options, formatTime(tx.now)); err != nil {
			return fmt.Errorf("record project %s: %w", name, err)
		}
		return tx.Event(ctx, Event{Project: name, Kind: "project", ToStatus: domain.ProjectActive, Message: "project started"})
	case err != nil:
		return fmt.Errorf("read project %s: %w", name, err)
	}
	if _, err := tx.tx.ExecContext(ctx, `UPDATE projects SET state = ?, options = ?, result = '', finished_at = '', problem = '' WHERE name = ?`,
		domain.ProjectActive, options, name); err != nil {
		return fmt.Errorf("update project %s: %w", name, err)
	}
	if state != domain.ProjectActive {
		return tx.Event(ctx, Event{Project: name, Kind: "project", FromStatus: state, ToStatus: domain.ProjectActive, Message: "project resumed"})
	}
	return nil
}

// SetProject changes columns of a project; a change of state appends an event.
func (tx *Tx) SetProject(ctx context.Context, name string, p ProjectPatch, message string) error {
	var old string
	if err := tx.tx.QueryRowContext(ctx, "SELECT state FROM projects WHERE name = ?", name).Scan(&old); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("project %s: %w", name, ErrNotFound)
		}
		return err
	}
	cols := p.columns()
	if len(cols.clauses) > 0 {
		args := append(cols.args, name)
		if _, err := tx.tx.ExecContext(ctx, "UPDATE projects SET "+cols.sql()+" WHERE name = ?", args...); err != nil {
			return fmt.Errorf("update project %s: %w", name, err)
		}
	}
	if p.State != nil && *p.State != old || message != "" {
		var to string
		if p.State != nil {
			to = *p.State
		}
		return tx.Event(ctx, Event{Project: name, Kind: "project", FromStatus: old, ToStatus: to, Message: message})
	}
	return nil
}

// InsertTask adds a new pending task and its "created" event.
func (tx *Tx) InsertTask(ctx context.Context, t domain.Task) error {
	now := formatTime(tx.now)
	_, err := tx.tx.ExecContext(ctx, `INSERT INTO tasks (project, id, title, type, tool, model, priority, depends_on, tags,
		node_pin, timeout_seconds, max_retries, spec_file, spec_hash, snapshot, status, created_at, updated_at, base_dir, stall_seconds, base_commit, sandbox, limits, network, env, retry_backoff_seconds, files, start_from, on_conflict, not_preemptible, attempt)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?,
			MAX((SELECT COALESCE(MAX(attempt), 0) FROM attempts WHERE project = ?31 AND task = ?32),
				(SELECT COALESCE(MAX(last), 0) FROM task_attempts WHERE project = ?31 AND task = ?32)))`,
		t.Project, t.ID, t.Title, t.Type, t.Tool, t.Model, t.Priority, sqlValue(t.DependsOn), sqlValue(t.Tags),
		t.NodePin, t.Timeout.Seconds(), t.MaxRetries, t.SpecFile, t.SpecHash, t.Snapshot, domain.Pending, now, now, t.BaseDir, t.Stall.Seconds(), t.BaseCommit, t.Sandbox, sqlValue(t.Limits), t.Network, sqlValue(t.Env), t.RetryBackoff.Seconds(), sqlValue(t.Files), t.StartFrom, t.OnConflict, t.NotPreemptible,
		t.Project, t.ID)
	if err != nil {
		return fmt.Errorf("insert task %s/%s: %w", t.Project, t.ID, err)
	}
	return tx.Event(ctx, Event{Project: t.Project, Task: t.ID, Kind: "created", ToStatus: string(domain.Pending), Message: t.Title})
}

// PutNode records a node's state and facts (see PutNodes).
func (tx *Tx) PutNode(ctx context.Context, n Node) error {
	return tx.PutNodes(ctx, []Node{n})
}

// PutNodes records the state and facts of nodes in one statement, and a
// "node" event for each whose state changed: a tick writes every node it
// pulled. The rows are bound values (the text is the same for as many
// nodes, so its statement is compiled once): 20 nodes cost a third of
// what a JSON document of them did, taken apart by json_extract.
func (tx *Tx) PutNodes(ctx context.Context, nodes []Node) error {
	if len(nodes) == 0 {
		return nil
	}
	old := make(map[string]string, len(nodes))
	err := eachRow(ctx, tx.tx, func(r scanner) error {
		var name, state string
		if err := r.Scan(&name, &state); err != nil {
			return err
		}
		old[name] = state
		return nil
	}, `SELECT name, state FROM nodes`)
	if err != nil {
		return fmt.Errorf("read the nodes: %w", err)
	}
	for rest := nodes; len(rest) > 0; {
		n := min(len(rest), nodesPerInsert)
		if err := tx.upsertNodes(ctx, rest[:n]); err != nil {
			return fmt.Errorf("record the nodes: %w", err)
		}
		rest = rest[n:]
	}
	for _, n := range nodes {
		if o := old[n.Name]; o != n.State {
			old[n.Name] = n.State
			msg := ""
			if n.State != NodeOnline {
				msg = n.LastError
			}
			if err := tx.Event(ctx, Event{Node: n.Name, Kind: "node", FromStatus: o, ToStatus: n.State, Message: msg}); err != nil {
				return err
			}
		}
	}
	return nil
}

// nodesPerInsert bounds the rows of one upsertNodes, under SQLite's 32,766
// bound values.
const nodesPerInsert = 1000

// upsertNodes writes the rows of nodes in one statement.
func (tx *Tx) upsertNodes(ctx context.Context, nodes []Node) error {
	args := make([]any, 0, 13*len(nodes))
	var q strings.Builder
	q.WriteString(`INSERT INTO nodes (name, state, last_seen, offline_since, last_error, os, arch, wrapper_version,
		mem_available_bytes, load1, disk_free_bytes, rtt_ms, updated_at) VALUES `)
	now := formatTime(tx.now)
	for i, n := range nodes {
		if i > 0 {
			q.WriteString(", ")
		}
		q.WriteString("(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
		args = append(args, n.Name, n.State, formatTime(n.LastSeen), formatTime(n.OfflineSince), n.LastError, n.OS, n.Arch,
			n.WrapperVersion, n.MemAvailableBytes, n.Load1, n.DiskFreeBytes, n.RTTMillis, now)
	}
	q.WriteString(` ON CONFLICT(name) DO UPDATE SET state = excluded.state, last_seen = excluded.last_seen,
		offline_since = excluded.offline_since, last_error = excluded.last_error, os = excluded.os, arch = excluded.arch,
		wrapper_version = excluded.wrapper_version, mem_available_bytes = excluded.mem_available_bytes,
		load1 = excluded.load1, disk_free_bytes = excluded.disk_free_bytes, rtt_ms = excluded.rtt_ms,
		updated_at = excluded.updated_at`)
	_, err := tx.tx.ExecContext(ctx, q.String(), args...)
	return err
}

// ReplaceFiles stores the manifest of a task's collected outputs, replacing
// an earlier attempt's.
func (tx *Tx) ReplaceFiles(ctx context.Context, project, task string, attempt int, files []File) error {
	if _, err := tx.tx.ExecContext(ctx, "DELETE FROM files WHERE project = ? AND task = ?", project, task); err != nil {
		return fmt.Errorf("clear manifest of %s/%s: %w", project, task, err)
	}
	for _, f := range files {
		if _, err := tx.tx.ExecContext(ctx, "INSERT INTO files (project, task, attempt, path, size, sha256) VALUES (?, ?, ?, ?, ?, ?)",
			project, task, attempt, f.Path, f.Size, f.SHA256); err != nil {
			return fmt.Errorf("record manifest of %s/%s: %w", project, task, err)
		}
	}
	return nil
}

// Tasks returns a project's tasks inside the transaction.
func (tx *Tx) Tasks(ctx context.Context, project string) ([]domain.Task, error) {
	return queryTasks(ctx, tx.tx, "tasks", project)
}

// Task returns one task inside the transaction.
func (tx *Tx) Task(ctx context.Context, project, id string) (domain.Task, error) {
	t, err := scanTask(tx.tx.QueryRowContext(ctx, taskSelect+"tasks WHERE project = ? AND id = ?", project, id))
	if errors.Is(err, sql.ErrNoRows) {
		return t, fmt.Errorf("task %s/%s: %w", project, id, ErrNotFound)
	}
	return t, err
}

// Project returns one project inside the transaction.
func (tx *Tx) Project(ctx context.Context, name string) (domain.Project, error) {
	ps, err := queryProjects(ctx, tx.tx, name)
	if err != nil {
		return domain.Project{}, err
	}
	if len(ps) == 0 {
		return domain.Project{}, fmt.Errorf("project %s: %w", name, ErrNotFound)
	}
	return ps[0], nil
}

// countEventsSQL counts an attempt's events of a kind in its project's
// current run (index events_task).
var countEventsSQL = "SELECT COUNT(*) FROM events WHERE project = ?1 AND task = ?2 AND attempt = ?3 AND kind = ?4 AND run = " + runOf(0, 1)

// CountEvents counts the events of one kind recorded for an attempt (the
// failed tries of its collection, say).
func (tx *Tx) CountEvents(ctx context.Context, project, task string, attempt int, kind string) (int, error) {
	var n int
	err := tx.tx.QueryRowContext(ctx, countEventsSQL, project, task, attempt, kind).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count %s events of %s/%s#%d: %w", kind, project, task, attempt, err)
	}
	return n, nil
}

// RanOn reports whether any attempt of a task ran (was claimed) on node.
func (tx *Tx) RanOn(ctx context.Context, project, task, node string) (bool, error) {
	var n int
	err := tx.tx.QueryRowContext(ctx, "SELECT COUNT(*) FROM attempts WHERE project = ? AND task = ? AND node = ?",
		project, task, node).Scan(&n)
	if err != nil {
		return false, fmt.Errorf("attempts of %s/%s on %s: %w", project, task, node, err)
	}
	return n > 0, nil
}

// PutConflicts replaces a project's merge conflicts.
func (tx *Tx) PutConflicts(ctx context.Context, project string, cs []Conflict) error {
	if _, err := tx.tx.ExecContext(ctx, "DELETE FROM conflicts WHERE project = ?", project); err != nil {
		return fmt.Errorf("clear conflicts of %s: %w", project, err)
	}
	for _, c := range cs {
		if _, err := tx.tx.ExecContext(ctx, "INSERT INTO conflicts (project, path, tasks) VALUES (?, ?, ?)",
			project, c.Path, sqlValue(c.Tasks)); err != nil {
			return fmt.Errorf("record conflict %s: %w", c.Path, err)
		}
	}
	return nil
}

// PutVerdict records a verification round's verdict.
func (tx *Tx) PutVerdict(ctx context.Context, project string, v Verdict) error {
	issues := v.Issues
	if issues == nil {
		issues = []string{}
	}
	_, err := tx.tx.ExecContext(ctx, `INSERT INTO verdicts (project, task, round, pass, issues) VALUES (?, ?, ?, ?, ?)
		ON CONFLICT(project, task) DO UPDATE SET round = excluded.round, pass = excluded.pass, issues = excluded.issues`,
		project, v.Task, v.Round, v.Pass, sqlValue(issues))
	if err != nil {
		return fmt.Errorf("record verdict of %s/%s: %w", project, v.Task, err)
	}
	return nil
}

// AttemptFacts reads what the tick's decisions need of one attempt's row:
// its api_mode, whether its files were collected, and whether it is
// recorded as running its gate; all zero when there is no such row.
func (tx *Tx) AttemptFacts(ctx context.Context, project, task string, attempt int) (mode string, collected, gating bool, err error) {
	var at string
	err = tx.tx.QueryRowContext(ctx, "SELECT api_mode, collected_at, gating FROM attempts WHERE project = ? AND task = ? AND attempt = ?",
		project, task, attempt).Scan(&mode, &at, &gating)
	if errors.Is(err, sql.ErrNoRows) {
		return "", false, false, nil
	}
	if err != nil {
		return "", false, false, fmt.Errorf("read attempt %s/%s#%d: %w", project, task, attempt, err)
	}
	return mode, at != "", gating, nil
}

// Spent returns the cost and tokens recorded for a project's attempts.
func (tx *Tx) Spent(ctx context.Context, project string) (usd float64, tokens int64, err error) {
	return querySpent(ctx, tx.tx, project, 0)
}

// PutPause pauses an api_mode until a time and appends an event.
func (tx *Tx) PutPause(ctx context.Context, p Pause) error {
	_, err := tx.tx.ExecContext(ctx, `INSERT INTO pauses (api_mode, until, reason) VALUES (?, ?, ?)
		ON CONFLICT(api_mode) DO UPDATE SET until = excluded.until, reason = excluded.reason`,
		p.APIMode, formatTime(p.Until), p.Reason)
	if err != nil {
		return fmt.Errorf("record pause of %s: %w", p.APIMode, err)
	}
	return tx.Event(ctx, Event{Kind: "pause", Message: fmt.Sprintf("%s paused until %s: %s", p.APIMode, p.Until.Format(time.RFC3339), p.Reason)})
}

// DeleteTasks removes tasks and everything recorded for their attempts
// (runs, manifests, verdicts), and the project's merge conflicts: used when
// a retry makes the integration phase start over. The event log keeps their
// history.
func (tx *Tx) DeleteTasks(ctx context.Context, project string, ids []string, why string) error {
	for _, id := range ids {
		for _, q := range []string{
			// The attempt numbers go on from the last, whatever is deleted.
			`INSERT INTO task_attempts (project, task, last) SELECT ?1, ?2, attempt FROM tasks WHERE project = ?1 AND id = ?2
				ON CONFLICT(project, task) DO UPDATE SET last = MAX(last, excluded.last)`,
			"DELETE FROM files WHERE project = ? AND task = ?",
			"DELETE FROM attempts WHERE project = ?1 AND task = ?2 AND run = " + runOf(0, 1),
			"DELETE FROM verdicts WHERE project = ? AND task = ?",
			"DELETE FROM tasks WHERE project = ? AND id = ?",
		} {
			if _, err := tx.tx.ExecContext(ctx, q, project, id); err != nil {
				return fmt.Errorf("delete task %s/%s: %w", project, id, err)
			}
		}
		if err := tx.Event(ctx, Event{Project: project, Task: id, Kind: "deleted", Message: "task removed: " + why}); err != nil {
			return err
		}
	}
	_, err := tx.tx.ExecContext(ctx, "DELETE FROM conflicts WHERE project = ?", project)
	return err
}
