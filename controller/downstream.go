package controller

import (
	"fmt"
	"slices"
	"strings"

	"github.com/dispatch-tool/dispatch/domain"
)

// decideDownstream is what `dispatch retry --downstream` of ids does over
// the project's tasks byID: retry is ids and every author task after them
// (domain.Downstream); waiting are the tasks after them that wait to run
// already (pending, lost), left as they are since they take the new
// results when they run. A running one stays in retry, which refuses it
// with the fix (cancel it first).
func decideDownstream(byID map[string]domain.Task, ids []string) (retry, waiting []string) {
	tasks := make([]domain.Task, 0, len(byID))
	for _, t := range byID {
		tasks = append(tasks, t)
	}
	for _, id := range domain.Downstream(tasks, ids) {
		t := byID[id]
		if !slices.Contains(ids, id) && (t.Status == domain.Pending || t.Status == domain.Lost) {
			waiting = append(waiting, id)
			continue
		}
		retry = append(retry, id)
	}
	return retry, waiting
}

// withDownstream is ids with the tasks after them that retry --downstream
// reruns, and what it says of them; an unknown ID is refused (exit 2).
func withDownstream(project string, byID map[string]domain.Task, ids []string) ([]string, string, error) {
	for _, id := range ids {
		if _, ok := byID[id]; !ok {
			return nil, "", unknownTask(project, id, byID)
		}
	}
	retry, waiting := decideDownstream(byID, ids)
	return retry, downstreamNote(ids, retry, waiting), nil
}

// downstreamNote says what retry --downstream added to the tasks named.
func downstreamNote(named, retry, waiting []string) string {
	var notes []string
	if more := len(retry) - len(named); more > 0 {
		notes = append(notes, fmt.Sprintf("--downstream: %s after them", strings.Join(retry[len(named):], ", ")))
	}
	if len(waiting) > 0 {
		notes = append(notes, fmt.Sprintf("%s already wait(s) to run and will take the new results", strings.Join(waiting, ", ")))
	}
	return strings.Join(notes, "; ")
}
