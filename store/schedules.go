package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// ScheduleState is what `dispatch serve` records of a scheduled project.
type ScheduleState struct {
	Project string
	Enabled bool
	// Spec is the schedule as project.yaml last said it (JSON): a change
	// starts the schedule afresh.
	Spec string
	// NextAt is when the next run is due; zero for none.
	NextAt time.Time
	// LastAt, LastRun and LastResult are the last run the schedule began
	// ("" result while it runs).
	LastAt     time.Time
	LastRun    int
	LastResult string
	// Failures counts the scheduled runs that failed in a row.
	Failures int
	// Skipped counts the runs not started because the last still ran;
	// CatchUps the runs made for occurrences missed while no daemon ran.
	Skipped, CatchUps int
	// DisabledReason says why a disabled schedule is: its failed runs in
	// a row (the circuit breaker), or the operator; "" while enabled.
	DisabledReason string
	UpdatedAt      time.Time
}

const scheduleSelect = `SELECT project, enabled, spec, next_at, last_at, last_run, last_result, failures, skipped, catch_ups, disabled_reason, updated_at FROM schedules`

func scanSchedule(row scanner) (ScheduleState, error) {
	var s ScheduleState
	var next, last, updated string
	err := row.Scan(&s.Project, &s.Enabled, &s.Spec, &next, &last, &s.LastRun, &s.LastResult, &s.Failures, &s.Skipped, &s.CatchUps, &s.DisabledReason, &updated)
	s.NextAt, s.LastAt, s.UpdatedAt = parseTime(next), parseTime(last), parseTime(updated)
	return s, err
}

// Schedules returns the recorded schedules by project.
func (s *Store) Schedules(ctx context.Context) ([]ScheduleState, error) {
	out, err := queryRows(ctx, s.db, scanSchedule, scheduleSelect+" ORDER BY project")
	if err != nil {
		return nil, fmt.Errorf("read schedules: %w", err)
	}
	return out, nil
}

// Schedule returns project's recorded schedule; false when none is.
func (tx *Tx) Schedule(ctx context.Context, project string) (ScheduleState, bool, error) {
	sc, err := scanSchedule(tx.tx.QueryRowContext(ctx, scheduleSelect+" WHERE project = ?", project))
	if errors.Is(err, sql.ErrNoRows) {
		return ScheduleState{Project: project}, false, nil
	}
	if err != nil {
		return sc, false, fmt.Errorf("read the schedule of %s: %w", project, err)
	}
	return sc, true, nil
}

// PutSchedule records a project's schedule state.
func (tx *Tx) PutSchedule(ctx context.Context, s ScheduleState) error {
	_, err := tx.tx.ExecContext(ctx, `INSERT INTO schedules (project, enabled, spec, next_at, last_at, last_run, last_result, failures, skipped, catch_ups, disabled_reason, updated_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT(project) DO UPDATE SET enabled = excluded.enabled, spec = excluded.spec, next_at = excluded.next_at,
			last_at = excluded.last_at, last_run = excluded.last_run, last_result = excluded.last_result, failures = excluded.failures,
			skipped = excluded.skipped, catch_ups = excluded.catch_ups, disabled_reason = excluded.disabled_reason,
			updated_at = excluded.updated_at`,
		s.Project, s.Enabled, s.Spec, formatTime(s.NextAt), formatTime(s.LastAt), s.LastRun, s.LastResult, s.Failures,
		s.Skipped, s.CatchUps, s.DisabledReason, formatTime(tx.now))
	if err != nil {
		return fmt.Errorf("record the schedule of %s: %w", s.Project, err)
	}
	return nil
}

// DeleteSchedule forgets a project's schedule (its project.yaml has none
// any more).
func (tx *Tx) DeleteSchedule(ctx context.Context, project string) error {
	if _, err := tx.tx.ExecContext(ctx, "DELETE FROM schedules WHERE project = ?", project); err != nil {
		return fmt.Errorf("forget the schedule of %s: %w", project, err)
	}
	return nil
}
