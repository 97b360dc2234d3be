package store

import (
	"context"
	"fmt"
	"math"

	"github.com/dispatch-tool/dispatch/domain"
)

// NodeTasks counts a project's claimed and running tasks by node.
func (s *Store) NodeTasks(ctx context.Context, project string) (map[string]int, error) {
	out := map[string]int{}
	err := eachRow(ctx, s.db, func(r scanner) error {
		var node string
		var n int
		if err := r.Scan(&node, &n); err != nil {
			return err
		}
		out[node] = n
		return nil
	}, `SELECT node, count(*) FROM `+s.table("tasks")+` WHERE project = ? AND status IN (?, ?) GROUP BY node`,
		project, domain.Claimed, domain.Running)
	if err != nil {
		return nil, fmt.Errorf("count the live tasks of %s: %w", project, err)
	}
	return out, nil
}

// LastEventID is the id of the newest event recorded (0 for none).
func (s *Store) LastEventID(ctx context.Context) (int64, error) {
	var id int64
	if err := s.db.QueryRowContext(ctx, `SELECT coalesce(max(id), 0) FROM events`).Scan(&id); err != nil {
		return 0, fmt.Errorf("read the newest event: %w", err)
	}
	return id, nil
}

// taskEventsSQL reads the newest ?3 events of task ?2 of project ?1 in
// run (0: the current). "+run" and "+id" keep SQLite on events_task (the
// task's few events) rather than on an index that walks the whole run's.
func taskEventsSQL(run int) string {
	return `SELECT * FROM (` + eventSelect + ` WHERE project = ?1 AND task = ?2 AND +run = ` + runOf(run, 1) +
		` ORDER BY +id DESC LIMIT ?3) ORDER BY id`
}

// TaskEvents returns the newest limit events of one task of the project's
// run, oldest first.
func (s *Store) TaskEvents(ctx context.Context, project, task string, limit int) ([]Event, error) {
	out, err := queryRows(ctx, s.db, scanEvent, taskEventsSQL(s.run), project, task, limit)
	if err != nil {
		return nil, fmt.Errorf("read the events of %s/%s: %w", project, task, err)
	}
	return out, nil
}

// Usage sums the tokens and cost of every attempt of the project's run.
func (s *Store) Usage(ctx context.Context, project string) (in, out int64, usd float64, err error) {
	var fin, fout float64
	err = s.db.QueryRowContext(ctx, `SELECT TOTAL(tokens_in), TOTAL(tokens_out), TOTAL(cost_usd)
		FROM attempts WHERE project = ?1 AND run = `+runOf(s.run, 1), project).Scan(&fin, &fout, &usd)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("read the usage of %s: %w", project, err)
	}
	return int64(min(fin, math.MaxInt64/2)), int64(min(fout, math.MaxInt64/2)), usd, nil
}

// Dependents lists the tasks of the project that depend on task, by ID.
func (s *Store) Dependents(ctx context.Context, project, task string) ([]string, error) {
	out := []string{}
	err := eachRow(ctx, s.db, func(r scanner) error {
		var id string
		if err := r.Scan(&id); err != nil {
			return err
		}
		out = append(out, id)
		return nil
	}, `SELECT task FROM task_deps WHERE project = ? AND dep = ? ORDER BY task`, project, task)
	if err != nil {
		return nil, fmt.Errorf("read the dependents of %s/%s: %w", project, task, err)
	}
	return out, nil
}
