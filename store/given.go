package store

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/dispatch-tool/dispatch/domain"
)

// EncodeGiven is the given column of an attempt that received gs: ""
// for none.
func EncodeGiven(gs []domain.Given) string {
	if len(gs) == 0 {
		return ""
	}
	b, err := json.Marshal(gs)
	if err != nil {
		return ""
	}
	return string(b)
}

// DecodeGiven reads the given column; a damaged one reads as nothing
// recorded (never stale, no inputs named).
func DecodeGiven(s string) []domain.Given {
	if s == "" {
		return nil
	}
	var gs []domain.Given
	if json.Unmarshal([]byte(s), &gs) != nil {
		return nil
	}
	return gs
}

// Given returns, by task, what each task's current attempt received of its
// dependencies (the tasks that recorded something).
func (s *Store) Given(ctx context.Context, project string) (map[string][]domain.Given, error) {
	out := map[string][]domain.Given{}
	err := eachRow(ctx, s.db, func(r scanner) error {
		var task, given string
		if err := r.Scan(&task, &given); err != nil {
			return err
		}
		if gs := DecodeGiven(given); len(gs) > 0 {
			out[task] = gs
		}
		return nil
	}, `SELECT r.task, r.given FROM attempts AS r JOIN `+s.table("tasks")+
		` ON tasks.project = r.project AND tasks.id = r.task AND tasks.attempt = r.attempt
		WHERE r.project = ? AND r.given != ''`, project)
	if err != nil {
		return nil, fmt.Errorf("read what the tasks of %s were given: %w", project, err)
	}
	return out, nil
}

// Results returns, by task, the current attempt of each of ids and its
// final message, for the prompt of a dependent (a task without an attempt
// is left out).
func (s *Store) Results(ctx context.Context, project string, ids []string) (map[string]domain.Attempt, error) {
	out := map[string]domain.Attempt{}
	for _, id := range ids {
		as, err := s.queryAttempts(ctx, project, attemptSelect+` WHERE project = ? AND task = ?
			AND attempt = (SELECT attempt FROM tasks WHERE project = ? AND id = ?)`, project, id, project, id)
		if err != nil {
			return nil, err
		}
		if len(as) == 1 {
			out[id] = as[0]
		}
	}
	return out, nil
}
