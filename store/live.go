package store

import (
	"context"
	"fmt"

	"github.com/dispatch-tool/dispatch/domain"
)

// liveOnSQL reads the claimed and running tasks of one node through the
// tasks_status_node index (migration 0005): a node's status call names
// them, so that it costs what runs there, not what the projects hold.
const liveOnSQL = `SELECT project, id FROM tasks WHERE status IN (?, ?) AND node = ? ORDER BY project, id`

// LiveOn lists as "project/ID" the tasks of projects (every project when
// none is given) that are claimed or running on node: those whose status
// the node must report whatever its own index of live attempts says.
func (s *Store) LiveOn(ctx context.Context, node string, projects []string) ([]string, error) {
	served := make(map[string]bool, len(projects))
	for _, p := range projects {
		served[p] = true
	}
	var out []string
	err := eachRow(ctx, s.db, func(r scanner) error {
		var project, id string
		if err := r.Scan(&project, &id); err != nil {
			return err
		}
		if len(served) == 0 || served[project] {
			out = append(out, project+"/"+id)
		}
		return nil
	}, liveOnSQL, domain.Claimed, domain.Running, node)
	if err != nil {
		return nil, fmt.Errorf("list the live tasks of node %s: %w", node, err)
	}
	return out, nil
}
