package store

import (
	"context"

	"github.com/dispatch-tool/dispatch/domain"
)

// NodeWork counts, by node, the attempts a controller must still reach
// there: those claimed or running, and those ended whose results are not
// collected yet. A node removed from nodes.yaml, or reached anew, keeps
// its old connection while it has any.
func (s *Store) NodeWork(ctx context.Context) (map[string]int, error) {
	return countBy(ctx, s.db, "count the work left on each node", `SELECT node, COUNT(*) FROM (
		SELECT node FROM tasks WHERE status IN (?, ?)
		UNION ALL SELECT node FROM attempts WHERE collected_at = '' AND status IN (?, ?, ?)) GROUP BY node`,
		domain.Claimed, domain.Running, domain.Completed, domain.Failed, domain.Killed)
}
