package store

import (
	"context"
	"fmt"
	"time"
)

// GateRun is one gate run on an attempt's result (migration 0021).
type GateRun struct {
	Project string
	Run     int
	Task    string
	Attempt int
	Command string
	// Tool and Model are what the attempt ran (the tool its node gave
	// it, when the task names none), for "claims vs gate".
	Tool, Model string
	Tree        string
	Passed      bool
	ExitCode    int
	Seconds     float64
	// OutputTail is the end of the gate's output; Error why it did not
	// pass besides its exit status; Missing that its command was not
	// found on the node.
	OutputTail string
	Error      string
	Missing    bool
	// Reused is set when the result is an earlier run's on the same tree.
	Reused bool
	At     time.Time
}

const gateRunColumns = `project, run, task, attempt, command, tool, model, tree, passed, exit_code, seconds, output_tail, error, missing, reused, at`

func scanGateRun(r scanner) (GateRun, error) {
	var g GateRun
	var at string
	err := r.Scan(&g.Project, &g.Run, &g.Task, &g.Attempt, &g.Command, &g.Tool, &g.Model, &g.Tree, &g.Passed, &g.ExitCode, &g.Seconds,
		&g.OutputTail, &g.Error, &g.Missing, &g.Reused, &at)
	g.At = parseTime(at)
	return g, err
}

// PutGateRun records the gate run of an attempt (replacing one recorded
// for it before), in the project's current run.
func (tx *Tx) PutGateRun(ctx context.Context, g GateRun) error {
	_, err := tx.tx.ExecContext(ctx, `INSERT OR REPLACE INTO gate_runs (`+gateRunColumns+`)
		VALUES (?, `+currentRun+`, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		g.Project, g.Project, g.Task, g.Attempt, g.Command, g.Tool, g.Model, g.Tree, g.Passed, g.ExitCode, g.Seconds, g.OutputTail, g.Error,
		g.Missing, g.Reused, formatTime(tx.now))
	if err != nil {
		return fmt.Errorf("record the gate of %s/%s#%d: %w", g.Project, g.Task, g.Attempt, err)
	}
	return nil
}

// GateKnown returns what command found on the trees it gated in project
// (the newest run of each tree, at most limit trees, the newest first):
// a launch hands them to the wrapper, which gates no tree among them
// again.
func (s *Store) GateKnown(ctx context.Context, project, command string, limit int) ([]GateRun, error) {
	out, err := queryRows(ctx, s.db, scanGateRun, `SELECT `+gateRunColumns+` FROM gate_runs AS g
		WHERE project = ? AND command = ? AND reused = 0 AND tree != '' AND error NOT LIKE 'stopped%'
		AND id = (SELECT MAX(id) FROM gate_runs AS h WHERE h.project = g.project AND h.command = g.command AND h.tree = g.tree AND h.reused = 0)
		ORDER BY id DESC LIMIT ?`, project, command, limit)
	if err != nil {
		return nil, fmt.Errorf("read the gate runs of %s: %w", project, err)
	}
	return out, nil
}

// GateRuns returns the gate runs of a project's run (its current one when
// run is 0), in the order they were recorded.
func (s *Store) GateRuns(ctx context.Context, project string, run int) ([]GateRun, error) {
	q := `SELECT ` + gateRunColumns + ` FROM gate_runs WHERE project = ? AND run = ` + currentRun + ` ORDER BY id`
	args := []any{project, project}
	if run > 0 {
		q = `SELECT ` + gateRunColumns + ` FROM gate_runs WHERE project = ? AND run = ? ORDER BY id`
		args = []any{project, run}
	}
	out, err := queryRows(ctx, s.db, scanGateRun, q, args...)
	if err != nil {
		return nil, fmt.Errorf("read the gate runs of %s: %w", project, err)
	}
	return out, nil
}

// GateRunOf returns the gate run of one attempt; false when it had none.
func (s *Store) GateRunOf(ctx context.Context, project, task string, attempt int) (GateRun, bool, error) {
	out, err := queryRows(ctx, s.db, scanGateRun, `SELECT `+gateRunColumns+` FROM gate_runs WHERE project = ? AND task = ? AND attempt = ?`,
		project, task, attempt)
	if err != nil || len(out) == 0 {
		return GateRun{}, false, err
	}
	return out[0], true, nil
}

// GateOrigin returns the run that gated tree with command first in
// project (not a reused verdict): where a reused verdict's output is.
func (s *Store) GateOrigin(ctx context.Context, project, command, tree string) (GateRun, bool, error) {
	out, err := queryRows(ctx, s.db, scanGateRun, `SELECT `+gateRunColumns+` FROM gate_runs
		WHERE project = ? AND command = ? AND tree = ? AND reused = 0 ORDER BY id DESC LIMIT 1`, project, command, tree)
	if err != nil || len(out) == 0 {
		return GateRun{}, false, err
	}
	return out[0], true, nil
}
