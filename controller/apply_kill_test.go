package controller

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"github.com/dispatch-tool/dispatch/domain"
)

func TestDecideKills(t *testing.T) {
	a := staleAttempt{node: "n1", project: "p", task: "S01", dir: "/w/p/tasks/S01", attempt: 1}
	b := staleAttempt{node: "n2", project: "p", task: "S02", dir: "/w/p/tasks/S02", attempt: 2}
	tests := []struct {
		name      string
		prev      map[string]int
		stale     []staleAttempt
		tried     map[staleAttempt]bool
		failed    map[staleAttempt]string
		failures  map[string]int
		holdNodes map[string]bool
		givenUp   []staleAttempt
	}{
		{name: "killed: nothing held", stale: []staleAttempt{a}, tried: map[staleAttempt]bool{a: true},
			failures: map[string]int{}, holdNodes: map[string]bool{}},
		{name: "first failure holds node and task", stale: []staleAttempt{a},
			tried: map[staleAttempt]bool{a: true}, failed: map[staleAttempt]string{a: "refused"},
			failures: map[string]int{killKey(a): 1}, holdNodes: map[string]bool{"n1": true}},
		{name: "not tried (node busy) holds without counting", prev: map[string]int{killKey(a): 2}, stale: []staleAttempt{a},
			failures: map[string]int{killKey(a): 2}, holdNodes: map[string]bool{"n1": true}},
		{name: "third failure gives up", prev: map[string]int{killKey(a): 2}, stale: []staleAttempt{a, b},
			tried: map[staleAttempt]bool{a: true, b: true}, failed: map[staleAttempt]string{a: "refused", b: "timeout"},
			failures: map[string]int{killKey(a): 3, killKey(b): 1}, holdNodes: map[string]bool{"n2": true}, givenUp: []staleAttempt{a}},
		{name: "after giving up nothing is held", prev: map[string]int{killKey(a): 3}, stale: []staleAttempt{a},
			tried: map[staleAttempt]bool{a: true}, failed: map[staleAttempt]string{a: "refused"},
			failures: map[string]int{killKey(a): 4}, holdNodes: map[string]bool{}},
		{name: "gone stale attempts are forgotten", prev: map[string]int{killKey(a): 2},
			failures: map[string]int{}, holdNodes: map[string]bool{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := decideKills(tc.prev, tc.stale, tc.tried, tc.failed)
			if !reflect.DeepEqual(d.failures, tc.failures) {
				t.Errorf("failures = %v, want %v", d.failures, tc.failures)
			}
			if !reflect.DeepEqual(d.holdNodes, tc.holdNodes) {
				t.Errorf("held nodes = %v, want %v", d.holdNodes, tc.holdNodes)
			}
			if len(d.holdTasks) != len(d.holdNodes) {
				t.Errorf("held tasks = %v, want one per held node", d.holdTasks)
			}
			if !reflect.DeepEqual(d.givenUp, tc.givenUp) {
				t.Errorf("given up = %v, want %v", d.givenUp, tc.givenUp)
			}
		})
	}
}

// TestUnkilledStaleAttemptHoldsItsNodeBack: a node where an attempt that
// must die is still alive takes no launch until the kill is confirmed — or
// until it has failed maxKillFailures times, when an event says so and the
// node goes back to work. The stale attempt here is one no wrapper can
// kill: its lock is held but it has no process record (as a supervisor of
// a wrapper too old to keep one).
func TestUnkilledStaleAttemptHoldsItsNodeBack(t *testing.T) {
	h := newHarness(t, "", shellProject(map[string]string{"S01-a.md": "echo hi\n"}))
	dir := filepath.Join(h.work, "p", "tasks", "Z09")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	st := `{"task":"Z09","attempt":1,"status":"running","pid":0,"wrapper_version":"old"}`
	if err := os.WriteFile(filepath.Join(dir, "status.json"), []byte(st), 0o644); err != nil {
		t.Fatal(err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	for i := 1; i < maxKillFailures; i++ {
		h.tick()
		if s := h.task("S01").Status; s != domain.Pending {
			t.Fatalf("tick %d: S01 is %s while its node holds an unkilled stale attempt; want pending", i, s)
		}
	}
	if evs := h.events("stale"); len(evs) != 1 {
		t.Fatalf("want one stale event so far, got %v", evs)
	}
	h.tickUntil("S01 to start once the kill is given up", func() bool { return h.task("S01").Status != domain.Pending })
	var said bool
	for _, ev := range h.events("stale") {
		said = said || strings.Contains(ev.Message, "could not be killed")
	}
	if !said {
		t.Fatalf("no event says the stale attempt could not be killed: %v", h.events("stale"))
	}
	h.tickUntil("S01 to complete", func() bool { return h.task("S01").Status == domain.Completed })
}
