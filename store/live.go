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
func (s *Store) Version(ctx context.Context) (int64, error) { return version(ctx, s.db) }

func version(ctx context.Context, q querier) (int64, error) {
	var n int64
	if err := q.QueryRowContext(ctx, `SELECT n FROM task_version`).Scan(&n); err != nil {
		return 0, fmt.Errorf("read the change counter: %w", err)
	}
	return n, nil
}

// LiveCounts are what a tick counts of the claimed and running work of
// every project, as the database had it at the change counter Version:
// the busy slots of each node (claimed and running tasks) and the live
// attempts of each api_mode. The maps are shared by every tick that reads
// the same counter: a caller copies one before changing it.
type LiveCounts struct {
	Version int64
	Busy    map[string]int
	Modes   map[string]int
}

// LiveCounts returns last when the change counter has not moved since it
// was read, else the counts read anew: a steady tick reads the counter
// alone, where the two counts each go through every live row (1,000
// running tasks: about a twentieth of a steady tick's CPU). The counter
// moves with every change to a task's status or node and to an attempt
// row (migrations 0019, 0020), all the counts depend on. A caller keeps
// what it is given only once tx commits: a counter read in a transaction
// rolled back may come again with other rows.
func (tx *Tx) LiveCounts(ctx context.Context, last *LiveCounts) (*LiveCounts, error) {
	v, err := version(ctx, tx.tx)
	if err != nil {
		return nil, err
	}
	if last != nil && last.Version == v {
		return last, nil
	}
	c := &LiveCounts{Version: v}
	if c.Busy, err = busy(ctx, tx.tx); err != nil {
		return nil, err
	}
	if c.Modes, err = liveModes(ctx, tx.tx); err != nil {
		return nil, err
	}
	return c, nil
}
