package prune

import (
	"sort"
	"time"

	"github.com/dispatch-tool/dispatch/internal/yamlval"
)

// Run is one run of a project as Decide weighs it.
type Run struct {
	N int
	// Current is the project's current run; Active a run not ended.
	Current, Active bool
	// At is when the run ended (when it began, for one that has no end);
	// zero when unknown.
	At time.Time
}

// Effective is the retention a project keeps: its project.yaml's when
// set, else nodes.yaml's controller.retention.
func Effective(project, controller yamlval.Retention) yamlval.Retention {
	if project.Set {
		return project
	}
	return controller
}

// Decide returns the runs that go, in order: every run but the newest
// r.Runs and those younger than r.Days days. The current run, a run not
// ended and a run of unknown age (when days count) always stay; a
// retention that sets neither keeps every run.
func Decide(runs []Run, r yamlval.Retention, now time.Time) []int {
	if r.Runs <= 0 && r.Days <= 0 {
		return nil
	}
	byNewest := append([]Run(nil), runs...)
	sort.Slice(byNewest, func(i, j int) bool { return byNewest[i].N > byNewest[j].N })
	var out []int
	for i, run := range byNewest {
		switch {
		case run.Current || run.Active:
		case r.Runs > 0 && i < r.Runs:
		case r.Days > 0 && (run.At.IsZero() || now.Sub(run.At).Hours() < float64(r.Days)*24):
		default:
			out = append(out, run.N)
		}
	}
	sort.Ints(out)
	return out
}
