package readmodel

import (
	"fmt"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/domain"
)

// TestTaskAttempts: a task's page lists its attempts of every kept run up
// to the run read, newest first, each with its run (issue 32, item 10:
// after `start --fresh` it said "not run yet" beside "Attempt 2").
func TestTaskAttempts(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	a := func(run, n int, st domain.Status) domain.Attempt {
		return domain.Attempt{Project: "p", Task: "S01", Run: run, Attempt: n, Node: fmt.Sprintf("n%d", n), Status: st,
			StartedAt: at.Add(time.Duration(n) * time.Minute)}
	}
	// Three runs: run 1 failed once and passed, run 2 passed, run 3 runs;
	// the store reads them by attempt.
	three := []domain.Attempt{a(1, 1, domain.Failed), a(1, 2, domain.Completed), a(2, 3, domain.Completed), a(3, 4, domain.Running)}
	tests := []struct {
		name string
		as   []domain.Attempt
		run  int
		want []string // run/attempt/node/status, in order
	}{
		{"none yet", nil, 1, []string{}},
		{"a new run whose task has not run yet lists the earlier run's", three[:2], 2, []string{"1/2/n2/completed", "1/1/n1/failed"}},
		{"every run, newest first", three, 3, []string{"3/4/n4/running", "2/3/n3/completed", "1/2/n2/completed", "1/1/n1/failed"}},
		{"an earlier run read: its attempts and those before, not later ones", three, 2, []string{"2/3/n3/completed", "1/2/n2/completed", "1/1/n1/failed"}},
		{"a pruned run's attempts are gone: the kept ones stay", three[2:], 3, []string{"3/4/n4/running", "2/3/n3/completed"}},
		{"out of order in, newest first out", []domain.Attempt{three[3], three[0], three[2]}, 3, []string{"3/4/n4/running", "2/3/n3/completed", "1/1/n1/failed"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := taskAttempts(tc.as, tc.run)
			if got == nil {
				t.Fatal("taskAttempts = nil; the JSON must say [] rather than null")
			}
			keys := make([]string, len(got))
			for i, v := range got {
				keys[i] = fmt.Sprintf("%d/%d/%s/%s", v.Run, v.Attempt, v.Node, v.Status)
				if v.StartedAt != jsonTime(at.Add(time.Duration(v.Attempt)*time.Minute)) {
					t.Errorf("attempt %d started_at = %q", v.Attempt, v.StartedAt)
				}
			}
			if fmt.Sprint(keys) != fmt.Sprint(tc.want) {
				t.Errorf("taskAttempts(run %d) = %v, want %v", tc.run, keys, tc.want)
			}
		})
	}
}
