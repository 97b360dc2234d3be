package prune

import (
	"fmt"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/internal/yamlval"
)

func TestDecide(t *testing.T) {
	now := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	day := 24 * time.Hour
	// Runs 1..5, run n ended 6-n days ago; run 5 is current.
	five := func() []Run {
		var rs []Run
		for n := 1; n <= 5; n++ {
			rs = append(rs, Run{N: n, At: now.Add(-time.Duration(6-n) * day), Current: n == 5})
		}
		return rs
	}
	tests := []struct {
		name string
		runs []Run
		keep yamlval.Retention
		want []int
	}{
		{"unset keeps everything", five(), yamlval.Retention{}, nil},
		{"zeroes keep everything", five(), yamlval.Retention{Set: true}, nil},
		{"newest two", five(), yamlval.Retention{Runs: 2, Set: true}, []int{1, 2, 3}},
		{"newest one is the current", five(), yamlval.Retention{Runs: 1, Set: true}, []int{1, 2, 3, 4}},
		{"more than there are", five(), yamlval.Retention{Runs: 9, Set: true}, nil},
		{"younger than three days", five(), yamlval.Retention{Days: 3, Set: true}, []int{1, 2, 3}},
		{"exactly days old goes", five(), yamlval.Retention{Days: 5, Set: true}, []int{1}},
		{"either rule keeps", five(), yamlval.Retention{Runs: 4, Days: 2, Set: true}, []int{1}},
		{"the current run stays however old", []Run{{N: 1, At: now.Add(-90 * day)}, {N: 2, At: now.Add(-80 * day), Current: true}},
			yamlval.Retention{Days: 1, Set: true}, []int{1}},
		{"a run not ended stays", []Run{{N: 1, At: now.Add(-90 * day), Active: true}, {N: 2, At: now, Current: true}},
			yamlval.Retention{Runs: 1, Set: true}, nil},
		{"unknown age stays when days count", []Run{{N: 1}, {N: 2, Current: true}}, yamlval.Retention{Days: 1, Set: true}, nil},
		{"unknown age goes by count", []Run{{N: 1}, {N: 2, Current: true}}, yamlval.Retention{Runs: 1, Set: true}, []int{1}},
		{"gaps of pruned runs", []Run{{N: 4, At: now.Add(-9 * day)}, {N: 7, At: now.Add(-8 * day)}, {N: 9, Current: true}},
			yamlval.Retention{Runs: 2, Set: true}, []int{4}},
		{"no runs", nil, yamlval.Retention{Runs: 1, Set: true}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Decide(tc.runs, tc.keep, now)
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("Decide = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestEffective(t *testing.T) {
	ctl := yamlval.Retention{Runs: 20, Set: true}
	if got := Effective(yamlval.Retention{}, ctl); got != ctl {
		t.Errorf("unset project = %+v, want the controller's", got)
	}
	p := yamlval.Retention{Days: 3, Set: true}
	if got := Effective(p, ctl); got != p {
		t.Errorf("set project = %+v, want its own", got)
	}
}
