package controller

import (
	"fmt"
	"slices"
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

// TestNamedOnce: the tasks a live call names are the last call's live
// ones and the database's, each once and in their first order, and the
// set that tells them apart is not made again at every call.
func TestNamedOnce(t *testing.T) {
	var l listState
	cases := []struct {
		name     string
		in, want []string
	}{
		{name: "empty"},
		{name: "both lists the same", in: []string{"p/A", "p/B", "p/A", "p/B"}, want: []string{"p/A", "p/B"}},
		{name: "the database names one more", in: []string{"p/B", "p/A", "p/C"}, want: []string{"p/B", "p/A", "p/C"}},
		{name: "a name the earlier call held is not kept", in: []string{"p/C", "p/C"}, want: []string{"p/C"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := l.namedOnce(slices.Clone(tc.in)); !slices.Equal(got, tc.want) {
				t.Errorf("namedOnce(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
	in := make([]string, 0, 100)
	for i := range 50 {
		in = append(in, taskKey("p", fmt.Sprint(i)), taskKey("p", fmt.Sprint(i)))
	}
	buf := make([]string, len(in))
	if allocs := testing.AllocsPerRun(10, func() { copy(buf, in); l.namedOnce(buf) }); allocs > 0 {
		t.Errorf("namedOnce of 100 names made %.0f allocations, want none once its set exists", allocs)
	}
}
