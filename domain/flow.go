package domain

import (
	"fmt"
	"slices"
	"sort"
)

// Given is one dependency's result an attempt received: the dependency's
// task and the attempt that made it, recorded when the attempt was claimed
// (status and report JSON: "inputs").
type Given struct {
	Task    string `json:"task"`
	Attempt int    `json:"attempt"`
}

// Stale decides which tasks hold a result made from a dependency's result
// that is no longer the dependency's: a dependency retried or run again
// after the task was given one of its attempts, or a dependency of the task
// that is stale itself. given is what each task's current attempt received.
// Only completed and running tasks can be stale (a waiting task takes the
// new result when it runs). The answer is each stale task's ID with why.
func Stale(tasks []Task, given map[string][]Given) map[string]string {
	byID := make(map[string]Task, len(tasks))
	for _, t := range tasks {
		byID[t.ID] = t
	}
	out := map[string]string{}
	done := map[string]bool{}
	var visit func(id string)
	visit = func(id string) {
		if done[id] {
			return
		}
		done[id] = true // a cycle (never valid) ends here
		t, ok := byID[id]
		if !ok || (t.Status != Completed && t.Status != Running) {
			return
		}
		for _, g := range given[id] {
			if why := givenStale(g, byID); why != "" {
				out[id] = why
				return
			}
		}
		for _, d := range t.DependsOn {
			visit(d)
			if _, stale := out[d]; stale {
				out[id] = fmt.Sprintf("its dependency %s is stale", d)
				return
			}
		}
	}
	for _, t := range tasks {
		visit(t.ID)
	}
	return out
}

// givenStale says why the result g names is no longer its task's, or "".
// A dependency gone from the project (a later run dropped it) says nothing.
func givenStale(g Given, byID map[string]Task) string {
	d, ok := byID[g.Task]
	switch {
	case !ok:
		return ""
	case d.Attempt != g.Attempt:
		return fmt.Sprintf("%s ran again (attempt %d) after this one was given attempt %d", g.Task, d.Attempt, g.Attempt)
	case d.Status != Completed:
		return fmt.Sprintf("%s is %s again after this one was given attempt %d", g.Task, d.Status, g.Attempt)
	}
	return ""
}

// Downstream is ids with every author task that depends on one of them,
// directly or through others: what `dispatch retry --downstream` reruns.
// The named tasks come first, as given, then the others in status order.
// Phase tasks are left to the retry (an author task retried starts the
// integration phase over).
func Downstream(tasks []Task, ids []string) []string {
	dependents := map[string][]string{}
	for _, t := range tasks {
		if IsPhaseID(t.ID) {
			continue
		}
		for _, d := range t.DependsOn {
			dependents[d] = append(dependents[d], t.ID)
		}
	}
	seen := map[string]bool{}
	for _, id := range ids {
		seen[id] = true
	}
	var more []string
	queue := slices.Clone(ids)
	for len(queue) > 0 {
		id := queue[0]
		queue = queue[1:]
		for _, dep := range dependents[id] {
			if !seen[dep] {
				seen[dep] = true
				more = append(more, dep)
				queue = append(queue, dep)
			}
		}
	}
	sort.Slice(more, func(i, j int) bool { return CompareIDs(more[i], more[j]) < 0 })
	return append(slices.Clone(ids), more...)
}
