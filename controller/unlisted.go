package controller

import (
	"cmp"
	"fmt"
	"maps"
	"slices"

	"github.com/dispatch-tool/dispatch/store"
)

// A node may be unable to list one project's tasks directory: an
// unconfined task can `chmod 000` the directory above its own. Its status
// reply then names that project unlisted (wire.NodeStatus.Unlisted) and
// lists the others as usual. The tick takes the project's attempts that
// the reply lacks for unknown, neither gone nor crashed (applier.task),
// the node's other projects go on, and the operator is told once per node
// and project, in a warning event, until a reply lists it again.

// unlistedKey is a project a node could not list.
type unlistedKey struct{ node, project string }

// decideUnlisted returns the projects the nodes cannot list once this
// tick is recorded, and a warning event for each of the served ones not
// said before (said: the last recorded tick's). A node without a new full
// word this tick (its pull failed, was skipped or came from its stream)
// keeps what it had; one no longer pulled has none.
func decideUnlisted(pulls map[string]*pull, said map[unlistedKey]bool, served map[string]bool) (map[unlistedKey]bool, []store.Event) {
	now := map[unlistedKey]bool{}
	for k := range said {
		if p := pulls[k.node]; p != nil && !heard(p) {
			now[k] = true
		}
	}
	var events []store.Event
	for _, node := range slices.Sorted(maps.Keys(pulls)) {
		p := pulls[node]
		if !heard(p) {
			continue
		}
		for _, project := range slices.Sorted(maps.Keys(p.unlisted)) {
			if !served[project] {
				continue
			}
			k := unlistedKey{node, project}
			now[k] = true
			if said[k] {
				continue
			}
			u := p.unlisted[project]
			events = append(events, store.Event{Project: project, Node: node, Kind: "warning",
				Message: fmt.Sprintf("node %s cannot list the tasks of project %s (%s): its attempts there are unknown, not lost, until it can; its other projects go on. Fix: on %s, give the node's user that directory back (chmod 700 %s)",
					node, project, u.Error, node, cmp.Or(u.Dir, "<work_dir>/"+project+"/tasks"))})
		}
	}
	return now, events
}

// heard reports whether p is a node's whole word of this tick: a status
// call that answered (not one the stream stood in for).
func heard(p *pull) bool {
	return !p.skipped && p.err == nil && !p.partial && p.status != nil
}
