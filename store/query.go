package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/dispatch-tool/dispatch/domain"
)

type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// taskSelect reads a task with its snapshot; taskListSelect leaves the
// snapshot out (an empty value in its place): the controller reads every
// task several times a tick and needs the spec text only to launch one.
const taskSelect = "SELECT " + taskColumns + " FROM "

const taskListSelect = `SELECT project, id, title, type, tool, model, priority, depends_on, tags, node_pin,
	timeout_seconds, max_retries, spec_file, spec_hash, x'' AS snapshot, status, attempt, retries_used, node,
	not_before, exit_code, error_class, error, started_at, completed_at, heartbeat, heartbeat_at,
	created_at, updated_at, warning, base_dir, rate_limit_retries, stall_seconds, base_commit, reused_from, lost_retries, sandbox, limits, network, env, retry_backoff_seconds, files, start_from, on_conflict, not_preemptible, preemptions FROM `

func scanTask(rows scanner) (domain.Task, error) {
	var t domain.Task
	var deps, tags, limits, env, files, notBefore, started, completed, hbAt, created, updated string
	var timeout, stall, backoff float64
	err := rows.Scan(&t.Project, &t.ID, &t.Title, &t.Type, &t.Tool, &t.Model, &t.Priority, &deps, &tags, &t.NodePin,
		&timeout, &t.MaxRetries, &t.SpecFile, &t.SpecHash, &t.Snapshot, &t.Status, &t.Attempt, &t.RetriesUsed, &t.Node,
		&notBefore, &t.ExitCode, &t.ErrorClass, &t.Error, &started, &completed, &t.Heartbeat, &hbAt, &created, &updated, &t.Warning, &t.BaseDir, &t.RateLimitRetries, &stall, &t.BaseCommit, &t.ReusedFrom, &t.LostRetries, &t.Sandbox, &limits, &t.Network, &env, &backoff, &files, &t.StartFrom, &t.OnConflict, &t.NotPreemptible, &t.Preemptions)
	if err != nil {
		return t, err
	}
	// A task read without its dependencies would run before them.
	if err := readList(deps, &t.DependsOn); err != nil {
		return t, fmt.Errorf("task %s/%s: read depends_on: %w", t.Project, t.ID, damaged{err})
	}
	if err := readList(tags, &t.Tags); err != nil {
		return t, fmt.Errorf("task %s/%s: read tags: %w", t.Project, t.ID, damaged{err})
	}
	// A task read without its limits would run unbounded.
	if limits != "" {
		if err := json.Unmarshal([]byte(limits), &t.Limits); err != nil {
			return t, fmt.Errorf("task %s/%s: read limits: %w", t.Project, t.ID, damaged{err})
		}
	}
	if env != "" {
		if err := json.Unmarshal([]byte(env), &t.Env); err != nil {
			return t, fmt.Errorf("task %s/%s: read env: %w", t.Project, t.ID, damaged{err})
		}
	}
	if files != "" {
		if err := json.Unmarshal([]byte(files), &t.Files); err != nil {
			return t, fmt.Errorf("task %s/%s: read files: %w", t.Project, t.ID, damaged{err})
		}
	}
	t.RetryBackoff = time.Duration(backoff * float64(time.Second))
	t.Timeout = time.Duration(timeout * float64(time.Second))
	t.Stall = time.Duration(stall * float64(time.Second))
	t.NotBefore = parseTime(notBefore)
	t.StartedAt = parseTime(started)
	t.CompletedAt = parseTime(completed)
	t.HeartbeatAt = parseTime(hbAt)
	t.CreatedAt = parseTime(created)
	t.UpdatedAt = parseTime(updated)
	return t, nil
}

// readList reads a JSON list column; the empty list, the common case, costs
// no decoding (a tick reads a thousand live tasks).
func readList(text string, into *[]string) error {
	switch text {
	case "null":
		*into = nil
		return nil
	case "[]":
		*into = []string{} // as json.Unmarshal leaves it
		return nil
	}
	return json.Unmarshal([]byte(text), into)
}

func queryTasks(ctx context.Context, q querier, from, project string) ([]domain.Task, error) {
	out, err := queryRows(ctx, q, scanTask, taskListSelect+from+" WHERE project = ? ORDER BY id", project)
	if err != nil {
		return nil, fmt.Errorf("read tasks of %s: %w", project, err)
	}
	return out, nil
}

// liveWorkSQL is HasLiveWork's query; attempts_uncollected is named for
// the reason given at uncollectedCurrentSQL.
const liveWorkSQL = `SELECT EXISTS (SELECT 1 FROM tasks WHERE project = ? AND status IN (?, ?))
		OR EXISTS (SELECT 1 FROM attempts INDEXED BY attempts_uncollected
			WHERE project = ? AND collected_at = '' AND status IN (?, ?, ?))`

// HasLiveWork reports, in one query, whether a project has a task claimed
// or running, or a finished run whose results are not collected yet.
func (s *Store) HasLiveWork(ctx context.Context, project string) (bool, error) {
	var live bool
	err := s.db.QueryRowContext(ctx, liveWorkSQL,
		project, domain.Claimed, domain.Running, project, domain.Completed, domain.Failed, "killed").Scan(&live)
	if err != nil {
		return false, fmt.Errorf("read the live work of %s: %w", project, err)
	}
	return live, nil
}

// Spent returns the cost and tokens recorded for a project's attempts.
func (s *Store) Spent(ctx context.Context, project string) (usd float64, tokens int64, err error) {
	return querySpent(ctx, s.db, project, s.run)
}

// querySpent sums in floating point (TOTAL): counts a node reported near
// the clamp would overflow SUM's integers and fail every tick.
func querySpent(ctx context.Context, q querier, project string, run int) (usd float64, tokens int64, err error) {
	var t float64
	err = q.QueryRowContext(ctx, `SELECT TOTAL(cost_usd), TOTAL(tokens_in) + TOTAL(tokens_out)
		FROM attempts WHERE project = ?1 AND run = `+runOf(run, 1), project).Scan(&usd, &t)
	if err != nil {
		return 0, 0, fmt.Errorf("read the spending of %s: %w", project, err)
	}
	if t >= math.MaxInt64/2 {
		return usd, math.MaxInt64 / 2, nil
	}
	return usd, int64(t), nil
}

// busy counts the claimed and running tasks on each node, across projects
// (see LiveCounts).
func busy(ctx context.Context, q querier) (map[string]int, error) {
	return countBy(ctx, q, "count busy slots",
		`SELECT node, COUNT(*) FROM tasks WHERE status IN (?, ?) GROUP BY node`, domain.Claimed, domain.Running)
}

// countBy runs a query of (key, count) rows into a map; what names the
// count in its errors.
func countBy(ctx context.Context, q querier, what, query string, args ...any) (map[string]int, error) {
	out := map[string]int{}
	err := eachRow(ctx, q, func(r scanner) error {
		var key string
		var n int
		if err := r.Scan(&key, &n); err != nil {
			return err
		}
		out[key] = n
		return nil
	}, query, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return out, nil
}

// States returns the status of every task of a project by ID, and how many
// have failed: what scheduling needs of the tasks it does not launch.
func (s *Store) States(ctx context.Context, project string) (map[string]domain.Status, int, error) {
	out := map[string]domain.Status{}
	failed := 0
	err := eachRow(ctx, s.db, func(r scanner) error {
		var id string
		var st domain.Status
		if err := r.Scan(&id, &st); err != nil {
			return err
		}
		out[id] = st
		if st == domain.Failed {
			failed++
		}
		return nil
	}, `SELECT id, status FROM tasks WHERE project = ?`, project)
	if err != nil {
		return nil, 0, fmt.Errorf("read task states of %s: %w", project, err)
	}
	return out, failed, nil
}

// Runnable returns up to limit pending tasks of a project whose not_before
// has passed and whose dependencies have all completed, by priority then
// ID, without their snapshots: the candidates for free slots. Readiness is
// decided here, before the limit: a window filled with tasks that still wait
// for a dependency would keep a ready task behind them (head of line).
func (s *Store) Runnable(ctx context.Context, project string, now time.Time, limit int) ([]domain.Task, error) {
	return runnable(ctx, s.db, project, now, limit)
}

// Runnable is Store.Runnable in the transaction.
func (tx *Tx) Runnable(ctx context.Context, project string, now time.Time, limit int) ([]domain.Task, error) {
	return runnable(ctx, tx.tx, project, now, limit)
}

func runnable(ctx context.Context, q querier, project string, now time.Time, limit int) ([]domain.Task, error) {
	out, err := queryRows(ctx, q, scanTask, runnableSQL+" LIMIT ?3", project, formatTime(now), limit)
	if err != nil {
		return nil, fmt.Errorf("read runnable tasks of %s: %w", project, err)
	}
	return out, nil
}

// runnableSQL selects the pending tasks of project ?1 due at ?2 whose
// dependencies have all completed (and, unless start_from: base, been
// collected: a plain project's task receives their outputs, a git
// project's is stacked on their commits: controller.waitsForCollection), in priority and ID order (the order of
// the tasks_ready index, so that the read stops at its limit; the unary
// + keeps the planner off tasks_due, which would sort every due task).
const runnableSQL = taskListSelect + `tasks AS t WHERE project = ?1 AND status = 'pending' AND +not_before <= ?2
		AND NOT EXISTS (SELECT 1 FROM task_deps AS d WHERE d.project = t.project AND d.task = t.id AND NOT EXISTS (
			SELECT 1 FROM tasks AS dep WHERE dep.project = t.project AND dep.id = d.dep AND dep.status = 'completed'
				AND (t.start_from = 'base' OR EXISTS (SELECT 1 FROM attempts AS a
					WHERE a.project = dep.project AND a.task = dep.id AND a.attempt = dep.attempt AND a.collected_at != ''))))
		ORDER BY priority, id`

// Tasks returns a project's tasks ordered by ID, without their snapshots
// (see Snapshot and Task).
func (s *Store) Tasks(ctx context.Context, project string) ([]domain.Task, error) {
	return queryTasks(ctx, s.db, s.table("tasks"), project)
}

// Task returns one task.
func (s *Store) Task(ctx context.Context, project, id string) (domain.Task, error) {
	t, err := scanTask(s.db.QueryRowContext(ctx, taskSelect+s.table("tasks")+" WHERE project = ? AND id = ?", project, id))
	if errors.Is(err, sql.ErrNoRows) {
		return t, fmt.Errorf("task %s/%s: %w", project, id, ErrNotFound)
	}
	return t, err
}

// Projects returns every project the database knows, by name.
func (s *Store) Projects(ctx context.Context) ([]domain.Project, error) {
	return queryProjects(ctx, s.db, "")
}

// Project returns one project.
func (s *Store) Project(ctx context.Context, name string) (domain.Project, error) {
	if s.run > 0 {
		return s.archivedProject(ctx, name)
	}
	ps, err := queryProjects(ctx, s.db, name)
	if err != nil {
		return domain.Project{}, err
	}
	if len(ps) == 0 {
		return domain.Project{}, fmt.Errorf("project %s: %w", name, ErrNotFound)
	}
	return ps[0], nil
}

func queryProjects(ctx context.Context, q querier, name string) ([]domain.Project, error) {
	query := "SELECT name, state, phase, result, options, started_at, finished_at, final_commit, run, problem FROM projects"
	var args []any
	if name != "" {
		query += " WHERE name = ?"
		args = append(args, name)
	}
	out, err := queryRows(ctx, q, scanProject, query+" ORDER BY name", args...)
	if err != nil {
		return nil, fmt.Errorf("read projects: %w", err)
	}
	return out, nil
}

func scanProject(r scanner) (domain.Project, error) {
	var p domain.Project
	var started, finished string
	err := r.Scan(&p.Name, &p.State, &p.Phase, &p.Result, &p.Options, &started, &finished, &p.FinalCommit, &p.Run, &p.Problem)
	p.StartedAt, p.FinishedAt = parseTime(started), parseTime(finished)
	return p, err
}

// Current is what status shows of a task's current attempt beside the
// task's row.
type Current struct {
	// Sandbox is how the attempt was confined: "bwrap", or "".
	Sandbox string
	// SlurmJob is the id of its Slurm job; Waiting why that job has not
	// started yet ("" for none).
	SlurmJob, Waiting string
}

// Currents returns, by task, its current attempt's Current, for the tasks
// whose current attempt has one set.
func (s *Store) Currents(ctx context.Context, project string) (map[string]Current, error) {
	out := map[string]Current{}
	err := eachRow(ctx, s.db, func(r scanner) error {
		var task string
		var c Current
		if err := r.Scan(&task, &c.Sandbox, &c.SlurmJob, &c.Waiting); err != nil {
			return err
		}
		out[task] = c
		return nil
	}, `SELECT r.task, r.sandbox, r.slurm_job, r.waiting FROM attempts AS r JOIN `+s.table("tasks")+
		` ON tasks.project = r.project AND tasks.id = r.task AND tasks.attempt = r.attempt
		WHERE r.project = ? AND (r.sandbox != '' OR r.slurm_job != '' OR r.waiting != '')`, project)
	if err != nil {
		return nil, fmt.Errorf("read the current attempts of %s: %w", project, err)
	}
	return out, nil
}

// Gating returns the running tasks of a project whose current attempt's
// gate is running.
func (s *Store) Gating(ctx context.Context, project string) (map[string]bool, error) {
	out := map[string]bool{}
	err := eachRow(ctx, s.db, func(r scanner) error {
		var task string
		if err := r.Scan(&task); err != nil {
			return err
		}
		out[task] = true
		return nil
	}, `SELECT r.task FROM attempts AS r JOIN `+s.table("tasks")+
		` ON tasks.project = r.project AND tasks.id = r.task AND tasks.attempt = r.attempt
		WHERE r.project = ? AND r.gating != 0 AND tasks.status = 'running'`, project)
	if err != nil {
		return nil, fmt.Errorf("read the gates running in %s: %w", project, err)
	}
	return out, nil
}

// Attempts returns every attempt of a project's tasks (of one task when task is
// not empty), by task then attempt.
func (s *Store) Attempts(ctx context.Context, project, task string) ([]domain.Attempt, error) {
	query := attemptSelect + " WHERE project = ?"
	args := []any{project}
	if task != "" {
		query += " AND task = ?"
		args = append(args, task)
	}
	return s.queryAttempts(ctx, project, query+" ORDER BY task, attempt", args...)
}

const attemptSelect = `SELECT project, task, attempt, node, status, pid, exit_code, signal, error_class, error, claimed_at,
		started_at, completed_at, log_bytes, tokens_in, tokens_out, cost_usd, collected_at, dangerous, api_mode, session_id, result_commit, run, inputs, sandbox, given, final_message, base_commit, slurm_job, waiting FROM attempts`

// Settled reports whether every task of a project is settled: in a
// terminal status and, completed, with its current attempt's files
// collected. A project's phase can move only when it is. While a task is
// not terminal, a count says so without reading the tasks.
func (s *Store) Settled(ctx context.Context, project string) (bool, error) {
	counts, err := s.Counts(ctx, project)
	if err != nil {
		return false, err
	}
	for st, n := range counts {
		if n > 0 && !domain.Terminal(st) {
			return false, nil
		}
	}
	var unsettled bool
	err = s.db.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM tasks t WHERE t.project = ? AND
		(t.status NOT IN (?, ?, ?, ?) OR (t.status = ? AND NOT EXISTS (SELECT 1 FROM attempts r
			WHERE r.project = t.project AND r.task = t.id AND r.attempt = t.attempt AND r.collected_at != ''))))`,
		project, domain.Completed, domain.Failed, domain.Blocked, domain.Canceled, domain.Completed).Scan(&unsettled)
	if err != nil {
		return false, fmt.Errorf("check whether the tasks of %s are settled: %w", project, err)
	}
	return !unsettled, nil
}

// uncollectedCurrentSQL reads the current attempt of each task of project
// ?1 with a finished attempt not collected yet (statuses ?2, ?3, ?4), and
// whether the task starts from a commit. It names attempts_uncollected:
// the planner would otherwise take attempts_run, as good a match for
// project = ?, and read every attempt of the project on each call (each
// tick that collects).
const uncollectedCurrentSQL = `SELECT DISTINCT t.id, t.attempt, t.base_commit != '' FROM attempts r INDEXED BY attempts_uncollected
		JOIN tasks t ON t.project = r.project AND t.id = r.task
		WHERE r.project = ?1 AND r.collected_at = '' AND r.status IN (?2, ?3, ?4)`

// UncollectedAttempt is a finished attempt whose files are not collected
// yet.
type UncollectedAttempt struct {
	domain.Attempt
	// Current is whether it is its task's current attempt. Based, of a
	// current attempt, is whether its task starts from a commit (a
	// git-native project's): only then does its collection read the task,
	// so that a plain task's costs no read of its row (issue 35).
	Current, Based bool
}

// Uncollected returns the finished attempts of a project whose files are
// not collected yet, by task then attempt.
func (s *Store) Uncollected(ctx context.Context, project string) ([]UncollectedAttempt, error) {
	attempts, err := s.queryAttempts(ctx, project, attemptSelect+` WHERE project = ? AND collected_at = '' AND status IN (?, ?, ?)
		ORDER BY task, attempt`, project, domain.Completed, domain.Failed, domain.Killed)
	if err != nil || len(attempts) == 0 {
		return nil, err
	}
	type currentOf struct {
		attempt int
		based   bool
	}
	current := map[string]currentOf{}
	err = eachRow(ctx, s.db, func(r scanner) error {
		var id string
		var c currentOf
		if err := r.Scan(&id, &c.attempt, &c.based); err != nil {
			return err
		}
		current[id] = c
		return nil
	}, uncollectedCurrentSQL, project, domain.Completed, domain.Failed, domain.Killed)
	if err != nil {
		return nil, fmt.Errorf("read the attempts of %s: %w", project, err)
	}
	out := make([]UncollectedAttempt, len(attempts))
	for i, r := range attempts {
		c, ok := current[r.Task]
		isCurrent := ok && c.attempt == r.Attempt
		out[i] = UncollectedAttempt{Attempt: r, Current: isCurrent, Based: isCurrent && c.based}
	}
	return out, nil
}

func (s *Store) queryAttempts(ctx context.Context, project, query string, args ...any) ([]domain.Attempt, error) {
	out, err := queryRows(ctx, s.db, scanAttempt, query, args...)
	if err != nil {
		return nil, fmt.Errorf("read the attempts of %s: %w", project, err)
	}
	return out, nil
}

func scanAttempt(row scanner) (domain.Attempt, error) {
	var r domain.Attempt
	var claimed, started, completed, collected, given string
	err := row.Scan(&r.Project, &r.Task, &r.Attempt, &r.Node, &r.Status, &r.PID, &r.ExitCode, &r.Signal,
		&r.ErrorClass, &r.Error, &claimed, &started, &completed, &r.LogBytes, &r.TokensIn, &r.TokensOut,
		&r.CostUSD, &collected, &r.Dangerous, &r.APIMode, &r.SessionID, &r.Commit, &r.Run, &r.Inputs, &r.Sandbox,
		&given, &r.FinalMessage, &r.BaseCommit, &r.SlurmJob, &r.Waiting)
	r.ClaimedAt, r.StartedAt, r.CompletedAt, r.CollectedAt = parseTime(claimed), parseTime(started), parseTime(completed), parseTime(collected)
	r.Given = DecodeGiven(given)
	return r, err
}

// Nodes returns what is known about every node, by name.
func (s *Store) Nodes(ctx context.Context) ([]Node, error) { return queryNodes(ctx, s.db) }

// Nodes returns what is known about every node, by name.
func (tx *Tx) Nodes(ctx context.Context) ([]Node, error) { return queryNodes(ctx, tx.tx) }

func queryNodes(ctx context.Context, q querier) ([]Node, error) {
	out, err := queryRows(ctx, q, scanNode, `SELECT name, state, last_seen, offline_since, last_error, os, arch, wrapper_version,
		mem_available_bytes, load1, disk_free_bytes, rtt_ms, updated_at FROM nodes ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("read nodes: %w", err)
	}
	return out, nil
}

func scanNode(r scanner) (Node, error) {
	var n Node
	var seen, offline, updated string
	err := r.Scan(&n.Name, &n.State, &seen, &offline, &n.LastError, &n.OS, &n.Arch, &n.WrapperVersion,
		&n.MemAvailableBytes, &n.Load1, &n.DiskFreeBytes, &n.RTTMillis, &updated)
	n.LastSeen, n.OfflineSince, n.UpdatedAt = parseTime(seen), parseTime(offline), parseTime(updated)
	return n, err
}

// Events returns a project's events with an id greater than after, oldest
// first; project "" means every event. limit <= 0 means no limit.
func (s *Store) Events(ctx context.Context, project string, after int64, limit int) ([]Event, error) {
	query := eventSelect + " WHERE id > ?1"
	args := []any{after}
	if project != "" {
		query += " AND project = ?2 AND run = " + runOf(s.run, 2)
		args = append(args, project)
	}
	query += " ORDER BY id"
	if limit > 0 {
		query += fmt.Sprintf(" LIMIT %d", limit)
	}
	out, err := queryRows(ctx, s.db, scanEvent, query, args...)
	if err != nil {
		return nil, fmt.Errorf("read events: %w", err)
	}
	return out, nil
}

const eventSelect = "SELECT id, time, project, task, attempt, kind, from_status, to_status, node, message FROM events"

func scanEvent(r scanner) (Event, error) {
	var e Event
	var t string
	err := r.Scan(&e.ID, &t, &e.Project, &e.Task, &e.Attempt, &e.Kind, &e.FromStatus, &e.ToStatus, &e.Node, &e.Message)
	e.Time = parseTime(t)
	return e, err
}

// lastEventSQL reads the newest event of a project's run (its current one
// for run 0) of one of n kinds. "+id" keeps SQLite from walking the run's
// events newest first for the ORDER BY (every one of them when no event is
// of those kinds): it takes events_kind and sorts the few that match. It
// names no index, so a read-only open of a database not yet migrated still
// reads it.
func lastEventSQL(run, n int) string {
	return eventSelect + " WHERE project = ?1 AND run = " + runOf(run, 1) + " AND kind IN (?" +
		strings.Repeat(", ?", n-1) + ") ORDER BY +id DESC LIMIT 1"
}

// LastEvent returns the newest event of project whose kind is one of
// kinds; false when there is none.
func (s *Store) LastEvent(ctx context.Context, project string, kinds ...string) (Event, bool, error) {
	if len(kinds) == 0 {
		return Event{}, false, nil
	}
	query := lastEventSQL(s.run, len(kinds))
	args := []any{project}
	for _, k := range kinds {
		args = append(args, k)
	}
	e, err := scanEvent(s.db.QueryRowContext(ctx, query, args...))
	if errors.Is(err, sql.ErrNoRows) {
		return Event{}, false, nil
	}
	if err != nil {
		return Event{}, false, fmt.Errorf("read events: %w", err)
	}
	return e, true, nil
}

// Files returns the manifest of a project's collected outputs (of one task when
// task is not empty), by task then path.
func (s *Store) Files(ctx context.Context, project, task string) ([]File, error) {
	return queryFiles(ctx, s.db, s.table("files"), project, task)
}

func queryFiles(ctx context.Context, q querier, from, project, task string) ([]File, error) {
	query := "SELECT project, task, attempt, path, size, sha256 FROM " + from + " WHERE project = ?"
	args := []any{project}
	if task != "" {
		query += " AND task = ?"
		args = append(args, task)
	}
	out, err := queryRows(ctx, q, func(r scanner) (File, error) {
		var f File
		err := r.Scan(&f.Project, &f.Task, &f.Attempt, &f.Path, &f.Size, &f.SHA256)
		return f, err
	}, query+" ORDER BY task, path", args...)
	if err != nil {
		return nil, fmt.Errorf("read manifest of %s: %w", project, err)
	}
	return out, nil
}

// Conflict is a path two tasks wrote with different content.
type Conflict struct {
	Path  string
	Tasks []string
}

// Conflicts returns a project's merge conflicts by path.
func (s *Store) Conflicts(ctx context.Context, project string) ([]Conflict, error) {
	out, err := queryRows(ctx, s.db, func(r scanner) (Conflict, error) {
		var c Conflict
		var tasks string
		if err := r.Scan(&c.Path, &tasks); err != nil {
			return c, err
		}
		if err := json.Unmarshal([]byte(tasks), &c.Tasks); err != nil {
			return c, fmt.Errorf("conflict %s: its tasks: %w", c.Path, err)
		}
		return c, nil
	}, "SELECT path, tasks FROM "+s.table("conflicts")+" WHERE project = ? ORDER BY path", project)
	if err != nil {
		return nil, fmt.Errorf("read conflicts of %s: %w", project, err)
	}
	return out, nil
}

// Verdict is one verification round's result.
type Verdict struct {
	Task   string
	Round  int
	Pass   bool
	Issues []string
}

// Verdicts returns a project's verification verdicts by round.
func (s *Store) Verdicts(ctx context.Context, project string) ([]Verdict, error) {
	out, err := queryRows(ctx, s.db, func(r scanner) (Verdict, error) {
		var v Verdict
		var issues string
		if err := r.Scan(&v.Task, &v.Round, &v.Pass, &issues); err != nil {
			return v, err
		}
		if err := json.Unmarshal([]byte(issues), &v.Issues); err != nil {
			return v, fmt.Errorf("the issues of round %d: %w", v.Round, err)
		}
		return v, nil
	}, "SELECT task, round, pass, issues FROM "+s.table("verdicts")+" WHERE project = ? ORDER BY round", project)
	if err != nil {
		return nil, fmt.Errorf("read verdicts of %s: %w", project, err)
	}
	return out, nil
}

// Pause is an api_mode that takes no new launches until a time (a rate
// limit that named its reset).
type Pause struct {
	APIMode string
	Until   time.Time
	Reason  string
}

// liveModes counts the claimed and running attempts under each api_mode
// (see LiveCounts).
func liveModes(ctx context.Context, q querier) (map[string]int, error) {
	return countBy(ctx, q, "count attempts by api_mode", liveModesSQL)
}

// liveModesSQL names the statuses as literals: the partial index
// attempts_live (migration 0019) serves only a query that names them.
const liveModesSQL = `SELECT api_mode, COUNT(*) FROM attempts
		WHERE status IN ('claimed', 'running') AND api_mode != '' GROUP BY api_mode`

// Pauses returns the pauses recorded, expired or not.
func (s *Store) Pauses(ctx context.Context) ([]Pause, error) { return pauses(ctx, s.db) }

// Pauses returns the pauses recorded, expired or not.
func (tx *Tx) Pauses(ctx context.Context) ([]Pause, error) { return pauses(ctx, tx.tx) }

func pauses(ctx context.Context, q querier) ([]Pause, error) {
	out, err := queryRows(ctx, q, func(r scanner) (Pause, error) {
		var p Pause
		var until string
		err := r.Scan(&p.APIMode, &until, &p.Reason)
		p.Until = parseTime(until)
		return p, err
	}, "SELECT api_mode, until, reason FROM pauses ORDER BY api_mode")
	if err != nil {
		return nil, fmt.Errorf("read pauses: %w", err)
	}
	return out, nil
}

// Snapshot returns the spec text a task runs with.
func (s *Store) Snapshot(ctx context.Context, project, id string) ([]byte, error) {
	var b []byte
	query := "SELECT snapshot FROM tasks WHERE project = ? AND id = ?"
	if s.run > 0 {
		// An archived task's text is kept once per hash.
		query = fmt.Sprintf(`SELECT s.snapshot FROM run_tasks t JOIN run_snapshots s ON s.project = t.project AND s.spec_hash = t.spec_hash
			WHERE t.run = %d AND t.project = ? AND t.id = ?`, s.run)
	}
	err := s.db.QueryRowContext(ctx, query, project, id).Scan(&b)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("task %s/%s: %w", project, id, ErrNotFound)
	}
	return b, err
}
