package store

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/dispatch-tool/dispatch/domain"
)

// Retention (issue 23): a run being pruned is recorded first (the
// intent), its files go, then its rows and the record says it is pruned,
// in one transaction. A prune killed midway leaves the intent: the next
// one finishes it. Rows a kept run refers to stay: the attempt a kept
// run's task reuses (and its gate runs) is never deleted, whatever run
// made it.

// States of a run_prunes row.
const (
	PruneIntent = "pruning" // recorded, not yet done: the next prune finishes it
	PruneDone   = "pruned"  // files and rows gone
)

// keptAttempt is true of the attempt row X (task, attempt) when a task of
// the current run or of an archived run not in gone has it as its
// attempt; ?1 is the project.
func keptAttempt(gone []int) string {
	return `(EXISTS (SELECT 1 FROM tasks t WHERE t.project = ?1 AND t.id = X.task AND t.attempt = X.attempt)
		OR EXISTS (SELECT 1 FROM run_tasks r WHERE r.project = ?1 AND r.id = X.task AND r.attempt = X.attempt
			AND r.run NOT IN (` + intList(gone) + `)))`
}

func intList(ns []int) string {
	if len(ns) == 0 {
		return "0"
	}
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

// pruneTables are the tables a run's rows are in, each with the rows of
// run ?2 of project ?1 that go; attempts (and their gate runs) that a
// kept run uses stay. Deleted in this order.
func pruneTables(gone []int) [][2]string {
	notKept := " AND NOT " + keptAttempt(gone)
	return [][2]string{
		{"gate_runs", "project = ?1 AND run = ?2" + notKept},
		{"attempts", "project = ?1 AND run = ?2" + notKept},
		{"events", "project = ?1 AND run = ?2"},
		{"run_files", "project = ?1 AND run = ?2"},
		{"run_conflicts", "project = ?1 AND run = ?2"},
		{"run_verdicts", "project = ?1 AND run = ?2"},
		{"run_tasks", "project = ?1 AND run = ?2"},
		{"project_runs", "project = ?1 AND run = ?2"},
	}
}

// RunPrune is what pruning one run removes from the database: rows by
// table, and the attempts whose directories go with them (on their nodes
// and under runs/).
type RunPrune struct {
	Run      int
	Rows     map[string]int
	Attempts []domain.Attempt // Task, Attempt and Node set
}

// RowCount is the number of rows the prune removes.
func (p RunPrune) RowCount() int {
	n := 0
	for _, c := range p.Rows {
		n += c
	}
	return n
}

// PruneOf reads what pruning run of project removes, gone being every run
// pruned with it (their tasks keep nothing).
func (s *Store) PruneOf(ctx context.Context, project string, run int, gone []int) (RunPrune, error) {
	p := RunPrune{Run: run, Rows: map[string]int{}}
	for _, t := range pruneTables(gone) {
		var n int
		q := "SELECT COUNT(*) FROM " + t[0] + " X WHERE " + t[1]
		if err := s.db.QueryRowContext(ctx, q, project, run).Scan(&n); err != nil {
			return p, fmt.Errorf("count the %s of run %d of %s: %w", t[0], run, project, err)
		}
		p.Rows[t[0]] = n
	}
	err := eachRow(ctx, s.db, func(r scanner) error {
		a := domain.Attempt{Project: project}
		if err := r.Scan(&a.Task, &a.Attempt, &a.Node); err != nil {
			return err
		}
		p.Attempts = append(p.Attempts, a)
		return nil
	}, "SELECT task, attempt, node FROM attempts X WHERE project = ?1 AND run = ?2 AND NOT "+keptAttempt(gone)+" ORDER BY task, attempt",
		project, run)
	if err != nil {
		return p, fmt.Errorf("read the attempts of run %d of %s: %w", run, project, err)
	}
	return p, nil
}

// TasksKeptOn returns the task and node of every attempt of project that
// stays when the runs gone are pruned: a node's task directory of such a
// task may hold what a kept attempt left.
func (s *Store) TasksKeptOn(ctx context.Context, project string, gone []int) (map[[2]string]bool, error) {
	out := map[[2]string]bool{}
	err := eachRow(ctx, s.db, func(r scanner) error {
		var k [2]string
		if err := r.Scan(&k[0], &k[1]); err != nil {
			return err
		}
		out[k] = true
		return nil
	}, "SELECT DISTINCT task, node FROM attempts X WHERE project = ?1 AND (run NOT IN ("+intList(gone)+") OR "+keptAttempt(gone)+")", project)
	if err != nil {
		return nil, fmt.Errorf("read the attempts of %s that stay: %w", project, err)
	}
	return out, nil
}

// PruneStates returns the runs of project recorded in run_prunes, each
// with its state (PruneIntent or PruneDone).
func (s *Store) PruneStates(ctx context.Context, project string) (map[int]string, error) {
	out := map[int]string{}
	err := eachRow(ctx, s.db, func(r scanner) error {
		var n int
		var state string
		if err := r.Scan(&n, &state); err != nil {
			return err
		}
		out[n] = state
		return nil
	}, "SELECT run, state FROM run_prunes WHERE project = ?", project)
	if err != nil {
		return nil, fmt.Errorf("read the pruned runs of %s: %w", project, err)
	}
	return out, nil
}

// BeginPrune records the intent to prune runs of project: from now on
// they are not listed, and a prune that stops before PruneRun is finished
// by the next.
func (tx *Tx) BeginPrune(ctx context.Context, project string, runs []int) error {
	for _, n := range runs {
		if _, err := tx.tx.ExecContext(ctx, `INSERT INTO run_prunes (project, run, state, at) VALUES (?, ?, ?, ?)
			ON CONFLICT(project, run) DO NOTHING`, project, n, PruneIntent, formatTime(tx.now)); err != nil {
			return fmt.Errorf("record the prune of run %d of %s: %w", n, project, err)
		}
	}
	return nil
}

// PruneRun deletes the rows of run of project (see pruneTables; gone is
// every run pruned with it) and records it pruned. The attempt numbers
// its tasks used stay taken (task_attempts). Done again, it deletes
// nothing more.
func (tx *Tx) PruneRun(ctx context.Context, project string, run int, gone []int) error {
	_, err := tx.tx.ExecContext(ctx, `INSERT INTO task_attempts (project, task, last)
		SELECT project, task, MAX(attempt) FROM attempts WHERE project = ?1 AND run = ?2 GROUP BY task
		ON CONFLICT(project, task) DO UPDATE SET last = MAX(last, excluded.last)`, project, run)
	if err != nil {
		return fmt.Errorf("keep the attempt numbers of run %d of %s: %w", run, project, err)
	}
	for _, t := range pruneTables(gone) {
		if _, err := tx.tx.ExecContext(ctx, "DELETE FROM "+t[0]+" AS X WHERE "+t[1], project, run); err != nil {
			return fmt.Errorf("delete the %s of run %d of %s: %w", t[0], run, project, err)
		}
	}
	// Spec texts no archived task has any more.
	if _, err := tx.tx.ExecContext(ctx, `DELETE FROM run_snapshots WHERE project = ?1
		AND spec_hash NOT IN (SELECT spec_hash FROM run_tasks WHERE project = ?1)`, project); err != nil {
		return fmt.Errorf("delete the spec texts of run %d of %s: %w", run, project, err)
	}
	_, err = tx.tx.ExecContext(ctx, `INSERT INTO run_prunes (project, run, state, at) VALUES (?, ?, ?, ?)
		ON CONFLICT(project, run) DO UPDATE SET state = excluded.state, at = excluded.at`, project, run, PruneDone, formatTime(tx.now))
	if err != nil {
		return fmt.Errorf("record run %d of %s pruned: %w", run, project, err)
	}
	return nil
}

// RunBranches is what a run of project recorded of the branches it set in
// the operator's repository (git-native projects).
type RunBranches struct {
	Run int
	// Options are the run's stored options (domain.ProjectOptions; its
	// repository is Repo.Dir).
	Options string
	// Final is the commit of the run's result (dispatch/<p>/final), or "".
	Final string
	// Tasks are the run's task IDs, each with the commits its attempts
	// recorded, any of which dispatch/<p>/<ID> was set to.
	Tasks map[string][]string
	// Bases are the commits the run's tasks started from: the nodes'
	// spare checkouts are of these.
	Bases []string
}

// Branches returns, for every run of project whose rows are there (the
// current one included), what it recorded of its branches, by run.
func (s *Store) Branches(ctx context.Context, project string) (map[int]*RunBranches, error) {
	out := map[int]*RunBranches{}
	err := eachRow(ctx, s.db, func(r scanner) error {
		b := &RunBranches{Tasks: map[string][]string{}}
		if err := r.Scan(&b.Run, &b.Options, &b.Final); err != nil {
			return err
		}
		out[b.Run] = b
		return nil
	}, `SELECT run, options, final_commit FROM project_runs WHERE project = ?1
		UNION ALL SELECT run, options, final_commit FROM projects WHERE name = ?1`, project)
	if err != nil {
		return nil, fmt.Errorf("read the runs of %s: %w", project, err)
	}
	// A run's tasks, with the commit of the attempt each ended with, and
	// the commits of every attempt the run made.
	err = eachRow(ctx, s.db, func(r scanner) error {
		var run int
		var id, commit string
		if err := r.Scan(&run, &id, &commit); err != nil {
			return err
		}
		if b := out[run]; b != nil {
			if commit != "" && !slices.Contains(b.Tasks[id], commit) {
				b.Tasks[id] = append(b.Tasks[id], commit)
			} else if _, ok := b.Tasks[id]; !ok {
				b.Tasks[id] = nil
			}
		}
		return nil
	}, `SELECT r.run, r.id, COALESCE(a.result_commit, '') FROM run_tasks r
			LEFT JOIN attempts a ON a.project = r.project AND a.task = r.id AND a.attempt = r.attempt WHERE r.project = ?1
		UNION ALL SELECT `+runOf(0, 1)+`, t.id, COALESCE(a.result_commit, '') FROM tasks t
			LEFT JOIN attempts a ON a.project = t.project AND a.task = t.id AND a.attempt = t.attempt WHERE t.project = ?1
		UNION ALL SELECT run, task, result_commit FROM attempts WHERE project = ?1 AND result_commit != ''`, project)
	if err != nil {
		return nil, fmt.Errorf("read the task commits of %s: %w", project, err)
	}
	err = eachRow(ctx, s.db, func(r scanner) error {
		var run int
		var base string
		if err := r.Scan(&run, &base); err != nil {
			return err
		}
		if b := out[run]; b != nil {
			b.Bases = append(b.Bases, base)
		}
		return nil
	}, `SELECT DISTINCT run, base_commit FROM run_tasks WHERE project = ?1 AND base_commit != ''
		UNION SELECT `+runOf(0, 1)+`, base_commit FROM tasks WHERE project = ?1 AND base_commit != '' ORDER BY 1, 2`, project)
	if err != nil {
		return nil, fmt.Errorf("read the task bases of %s: %w", project, err)
	}
	return out, nil
}
