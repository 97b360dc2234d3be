package controller

import (
	"fmt"
	"testing"

	"github.com/dispatch-tool/dispatch/wire"
)

// TestListStateDoneAllocs: a steady live reply (every entry unchanged but
// its heartbeat, as 20 nodes of 50 running tasks answer every tick) is
// recorded without an allocation per entry. A wire.TaskStatus is over the
// 128 bytes a Go map keeps in place, so holding the entries by value cost
// one allocation per entry and call (with their keys, 1.3 -> 1.7 MiB
// allocated per steady tick once the Slurm fields were added).
func TestListStateDoneAllocs(t *testing.T) {
	const tasks = 50
	running := &wire.Status{Attempt: 1, Status: wire.StatusRunning}
	full := &wire.NodeStatus{}
	for i := range tasks {
		full.Tasks = append(full.Tasks, wire.TaskStatus{Project: "p", Task: fmt.Sprintf("T%03d", i), Alive: true,
			Status: running, Heartbeat: "0", Tag: fmt.Sprintf("tag%d", i)})
	}
	var l listState
	l.done(full, false, t0)
	const runs = 20
	replies := make([]*wire.NodeStatus, runs+2)
	for r := range replies {
		same := &wire.Same{}
		for i := range tasks {
			same.Add(taskKey("p", fmt.Sprintf("T%03d", i)), fmt.Sprint(r))
		}
		// As converseStatus decodes a live reply: room for the entries named.
		replies[r] = &wire.NodeStatus{Listing: wire.ListingLive, Tasks: make([]wire.TaskStatus, 0, tasks+8), Same: same}
	}
	l.done(replies[0], true, t0) // the map of the call before last exists from here
	next := 1
	allocs := testing.AllocsPerRun(runs, func() {
		st := replies[next]
		next++
		l.done(st, true, t0)
		if len(st.Tasks) != tasks || st.Tasks[7].Task != "T007" || st.Tasks[7].Heartbeat != fmt.Sprint(next-1) {
			t.Fatalf("restored %d entries, want %d with the new heartbeat", len(st.Tasks), tasks)
		}
	})
	if allocs > 3 {
		t.Errorf("a steady reply of %d unchanged entries made %.0f allocations, want at most 3 (none per entry)", tasks, allocs)
	}
	if live, seen := l.next(false, t0); !live || len(seen) != tasks {
		t.Errorf("next = %v with %d seen, want a live call naming %d", live, len(seen), tasks)
	}
}
