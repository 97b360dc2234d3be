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
)

// TickRead is what a tick's decisions over one project's node statuses
// read of its tasks: the rows they may change, and counts for the rest.
// Its cost follows what is live, not how many tasks the project holds.
type TickRead struct {
	// Tasks are, by ID: the claimed, running and blocked tasks; the
	// completed ones with their current attempt not collected; the tasks
	// named (live on a node); and the pending tasks downstream of a task
	// that is live or failed, blocked or canceled (through pending and
	// blocked tasks only): every task a decision of the tick may move.
	// A task the caller already holds at its current version (known) is
	// that very value, not read again.
	Tasks []*domain.Task
	// Versions are the versions of Tasks, by ID: a task's version changes
	// with every change to its row (migration 0019).
	Versions map[string]int64
	// DepStatus holds the status of each dependency of the pending and
	// blocked tasks in Tasks.
	DepStatus map[string]domain.Status
	// Counts are the project's tasks by status.
	Counts map[domain.Status]int
	// NextDue is the earliest not_before after now among the pending
	// tasks (zero: none).
	NextDue time.Time
	// Modes holds the api_mode of the current attempt of each claimed or
	// running task that has one, by task ID.
	Modes map[string]string
	// Stamp is the project's stamp when it was read (see Tx.Stamp).
	Stamp int64
}

// Stamp returns project's stamp: it moves with every change a TickTasks
// of the project could see (a task row, an attempt row, a dependency;
// migration 0020), so that a read at the same stamp, with the same named
// tasks and before its NextDue, would read the same.
func (tx *Tx) Stamp(ctx context.Context, project string) (int64, error) {
	var n int64
	err := tx.tx.QueryRowContext(ctx, `SELECT n FROM project_stamps WHERE project = ?`, project).Scan(&n)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read the stamp of %s: %w", project, err)
	}
	return n, nil
}

// tickSelect reads the IDs and versions of TickRead.Tasks: ?1 the project, ?2 the
// named IDs as a JSON array. Each part of ids reads an index (a WHERE
// with ORs across them would read every task of the project).
var tickSelect = `WITH RECURSIVE
	live(id) AS (` + byStatus(domain.Claimed, domain.Running, domain.Blocked) + `),
	seed(id) AS (SELECT id FROM live UNION ALL ` + byStatus(domain.Failed, domain.Canceled) + `),
	down(id) AS (
		SELECT d.task FROM seed AS s CROSS JOIN task_deps AS d ON d.project = ?1 AND d.dep = s.id
			CROSS JOIN tasks AS w ON w.project = d.project AND w.id = d.task AND w.status IN ('pending', 'blocked')
		UNION
		SELECT d.task FROM down AS x CROSS JOIN task_deps AS d ON d.project = ?1 AND d.dep = x.id
			CROSS JOIN tasks AS w ON w.project = d.project AND w.id = d.task AND w.status IN ('pending', 'blocked')),
	ids(id) AS (
		SELECT id FROM live
		UNION ALL SELECT r.task FROM attempts AS r CROSS JOIN tasks AS c ON c.project = r.project AND c.id = r.task AND c.attempt = r.attempt
			WHERE r.project = ?1 AND r.collected_at = '' AND c.status = 'completed'
		UNION ALL SELECT value FROM json_each(?2)
		UNION ALL SELECT id FROM down)
	SELECT t.id, t.version FROM tasks AS t WHERE t.project = ?1 AND t.id IN ids ORDER BY t.id`

// byStatus selects the IDs of the tasks of project ?1 in the statuses
// given, one index search each: a UNION (which sorts to drop duplicates)
// or an IN list leads the planner to read the whole project in ID order.
func byStatus(statuses ...domain.Status) string {
	var parts []string
	for _, st := range statuses {
		parts = append(parts, "SELECT id FROM tasks WHERE project = ?1 AND status = '"+string(st)+"'")
	}
	return strings.Join(parts, " UNION ALL ")
}

// TickTasks reads, in the transaction, what a tick decides over for a
// project (see TickRead); named are the IDs its nodes report live; known
// returns the task the caller holds at a version (nil: none), which is
// not read again. A
// project with a row that does not read back gives ErrDamaged, whether
// or not the tick would read that row: nothing of it may be decided on.
func (tx *Tx) TickTasks(ctx context.Context, project string, named []string, now time.Time, known func(id string, version int64) *domain.Task) (TickRead, error) {
	if known == nil {
		known = func(string, int64) *domain.Task { return nil }
	}
	r := TickRead{DepStatus: map[string]domain.Status{}, Counts: map[domain.Status]int{}, Modes: map[string]string{}}
	var err error
	if r.Stamp, err = tx.Stamp(ctx, project); err != nil {
		return r, err
	}
	if err := tx.damage(ctx, project); err != nil {
		return r, err
	}
	ids, err := json.Marshal(named)
	if err != nil {
		return r, err
	}
	if named == nil {
		ids = []byte("[]")
	}
	type idVersion struct {
		id      string
		version int64
	}
	read, err := queryRows(ctx, tx.tx, func(row scanner) (idVersion, error) {
		var v idVersion
		return v, row.Scan(&v.id, &v.version)
	}, tickSelect, project, string(ids))
	if err != nil {
		return r, fmt.Errorf("read the live tasks of %s: %w", project, err)
	}
	r.Versions = make(map[string]int64, len(read))
	r.Tasks = make([]*domain.Task, len(read))
	var missing []string
	at := map[string]int{}
	for i, v := range read {
		r.Versions[v.id] = v.version
		if r.Tasks[i] = known(v.id, v.version); r.Tasks[i] == nil {
			missing = append(missing, v.id)
			at[v.id] = i
		}
	}
	if len(missing) > 0 {
		ids, _ := json.Marshal(missing)
		err := eachRow(ctx, tx.tx, func(row scanner) error {
			t, err := scanTask(row)
			if err != nil {
				return err
			}
			r.Tasks[at[t.ID]] = &t
			return nil
		}, taskListSelect+`tasks WHERE project = ?1 AND id IN (SELECT value FROM json_each(?2))`, project, string(ids))
		if err != nil {
			return r, fmt.Errorf("read the live tasks of %s: %w", project, err)
		}
	}
	if err := tx.depStatus(ctx, project, r.Tasks, r.DepStatus); err != nil {
		return r, err
	}
	if r.Counts, err = countStatus(ctx, tx.tx, project); err != nil {
		return r, err
	}
	var due sql.NullString
	if err := tx.tx.QueryRowContext(ctx, `SELECT MIN(not_before) FROM tasks WHERE project = ? AND status = ? AND not_before > ?`,
		project, domain.Pending, formatTime(now)).Scan(&due); err != nil {
		return r, fmt.Errorf("read the next backoff of %s: %w", project, err)
	}
	r.NextDue = parseTime(due.String)
	err = eachRow(ctx, tx.tx, func(row scanner) error {
		var id, mode string
		if err := row.Scan(&id, &mode); err != nil {
			return err
		}
		r.Modes[id] = mode
		return nil
	}, `SELECT t.id, r.api_mode FROM (`+byStatus(domain.Claimed, domain.Running)+`) AS l
		JOIN tasks AS t ON t.project = ?1 AND t.id = l.id
		JOIN attempts AS r ON r.project = t.project AND r.task = t.id AND r.attempt = t.attempt
		WHERE r.api_mode != ''`, project)
	if err != nil {
		return r, fmt.Errorf("read the api_modes of %s: %w", project, err)
	}
	return r, nil
}

// depStatus fills out with the status of each dependency of the pending
// and blocked tasks among tasks.
func (tx *Tx) depStatus(ctx context.Context, project string, tasks []*domain.Task, out map[string]domain.Status) error {
	var waiting []string
	for _, t := range tasks {
		if t.Status == domain.Pending || t.Status == domain.Blocked {
			waiting = append(waiting, t.ID)
		}
	}
	if len(waiting) == 0 {
		return nil
	}
	ids, _ := json.Marshal(waiting)
	err := eachRow(ctx, tx.tx, func(row scanner) error {
		var id string
		var st domain.Status
		if err := row.Scan(&id, &st); err != nil {
			return err
		}
		out[id] = st
		return nil
	}, `SELECT DISTINCT dep.id, dep.status FROM task_deps AS d JOIN tasks AS dep ON dep.project = d.project AND dep.id = d.dep
		WHERE d.project = ?1 AND d.task IN (SELECT value FROM json_each(?2))`, project, string(ids))
	if err != nil {
		return fmt.Errorf("read the dependencies of %s: %w", project, err)
	}
	return nil
}

// damage returns the error of the first row of project that does not read
// back (see task_damage), nil when none.
func (tx *Tx) damage(ctx context.Context, project string) error {
	var id string
	err := tx.tx.QueryRowContext(ctx, `SELECT task FROM task_damage WHERE project = ? ORDER BY task LIMIT 1`, project).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("check the tasks of %s: %w", project, err)
	}
	if _, err := tx.Task(ctx, project, id); err != nil {
		return err
	}
	return nil
}

// CancelWaiting moves every pending and blocked task of a project to
// canceled, each as ch says (From, To and Task are set per task), and
// returns how many it moved.
func (tx *Tx) CancelWaiting(ctx context.Context, ch Change) (int, error) {
	type waiting struct {
		id     string
		status domain.Status
	}
	tasks, err := queryRows(ctx, tx.tx, func(r scanner) (waiting, error) {
		var w waiting
		return w, r.Scan(&w.id, &w.status)
	}, `SELECT id, status FROM tasks WHERE project = ? AND status IN (?, ?) ORDER BY id`, ch.Project, domain.Pending, domain.Blocked)
	if err != nil {
		return 0, fmt.Errorf("read the waiting tasks of %s: %w", ch.Project, err)
	}
	for _, w := range tasks {
		c := ch
		c.Task, c.From, c.To = w.id, w.status, domain.Canceled
		if _, _, err := tx.Transition(ctx, c); err != nil {
			return 0, err
		}
	}
	return len(tasks), nil
}

// Counts returns a project's tasks counted by status (kept by triggers,
// see migration 0017).
func (s *Store) Counts(ctx context.Context, project string) (map[domain.Status]int, error) {
	return countStatus(ctx, s.db, project)
}

func countStatus(ctx context.Context, q querier, project string) (map[domain.Status]int, error) {
	out := map[domain.Status]int{}
	err := eachRow(ctx, q, func(row scanner) error {
		var st domain.Status
		var n int
		if err := row.Scan(&st, &n); err != nil {
			return err
		}
		if n > 0 {
			out[st] = n
		}
		return nil
	}, `SELECT status, n FROM task_counts WHERE project = ?`, project)
	if err != nil {
		return nil, fmt.Errorf("count the tasks of %s: %w", project, err)
	}
	return out, nil
}

// Beats records new heartbeats of a project's tasks (ID → heartbeat), all
// seen at a time, in one statement: a tick with 1,000 running tasks writes
// their heartbeats at once, not row by row. It leaves updated_at alone, so
// that a heartbeat gives the row no new version (migration 0019): whoever
// holds the task sets its Heartbeat and HeartbeatAt as written. Any other
// write of a task, a heartbeat through SetTask included, gives one.
func (tx *Tx) Beats(ctx context.Context, project string, beats map[string]string, at time.Time) error {
	if len(beats) == 0 {
		return nil
	}
	doc, err := json.Marshal(beats)
	if err != nil {
		return err
	}
	// The beats go through a keyed table of the connection's own: an
	// UPDATE joined to json_each would scan the list once per task.
	for _, stmt := range []string{
		`CREATE TEMP TABLE IF NOT EXISTS beats (id TEXT PRIMARY KEY, hb TEXT NOT NULL)`,
		`DELETE FROM temp.beats`,
	} {
		if _, err := tx.tx.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("record the heartbeats of %s: %w", project, err)
		}
	}
	if _, err := tx.tx.ExecContext(ctx, `INSERT INTO temp.beats (id, hb) SELECT key, value FROM json_each(?)`, string(doc)); err != nil {
		return fmt.Errorf("record the heartbeats of %s: %w", project, err)
	}
	res, err := tx.tx.ExecContext(ctx, `UPDATE tasks SET heartbeat = (SELECT hb FROM temp.beats AS b WHERE b.id = tasks.id), heartbeat_at = ?1
		WHERE project = ?2 AND id IN (SELECT id FROM temp.beats)`, formatTime(at), project)
	if err != nil {
		return fmt.Errorf("record the heartbeats of %s: %w", project, err)
	}
	if n, _ := res.RowsAffected(); n != int64(len(beats)) {
		return fmt.Errorf("record the heartbeats of %s: %d of %d tasks: %w", project, n, len(beats), ErrNotFound)
	}
	return nil
}
