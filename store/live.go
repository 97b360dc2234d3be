package store

import (
	"context"
	"fmt"

	"github.com/dispatch-tool/dispatch/domain"
)

// liveSQL reads the claimed and running tasks of every node through the
// tasks_status_node index (migration 0005): a node's status call names
// them, so that it costs what runs there, not what the projects hold.
const liveSQL = `SELECT node, project, id FROM tasks WHERE status IN (?, ?) ORDER BY node, project, id`

// Live lists by node, as "project/ID", the tasks of projects (every
// project when none is given) that are claimed or running there: those
// whose status the node must report whatever its own index of live
// attempts says. One read serves every node's status call of a tick.
func (s *Store) Live(ctx context.Context, projects []string) (map[string][]string, error) {
	served := make(map[string]bool, len(projects))
	for _, p := range projects {
		served[p] = true
	}
	out := map[string][]string{}
	err := eachRow(ctx, s.db, func(r scanner) error {
		var node, project, id string
		if err := r.Scan(&node, &project, &id); err != nil {
			return err
		}
		if len(served) == 0 || served[project] {
			out[node] = append(out[node], project+"/"+id)
		}
		return nil
	}, liveSQL, domain.Claimed, domain.Running)
	if err != nil {
		return nil, fmt.Errorf("list the live tasks of the nodes: %w", err)
	}
	return out, nil
}

// Version returns the database's change counter: it moves with every
// change to a task row (but a heartbeat), an attempt row or a dependency,
// in any project (migrations 0019, 0020). What was read after it was
// read is current while it has not moved.
func (s *Store) Version(ctx context.Context) (int64, error) {
	var n int64
	if err := s.db.QueryRowContext(ctx, `SELECT n FROM task_version`).Scan(&n); err != nil {
		return 0, fmt.Errorf("read the change counter: %w", err)
	}
	return n, nil
}
