package readmodel

import (
	"slices"

	"github.com/dispatch-tool/dispatch/domain"
)

// taskAttempts are a task's attempts (as, of every run the store keeps)
// as its page lists them: those of run and of the runs before it, newest
// first. A new run of the project (`start --fresh`, a schedule) counts
// the task's attempts on from the last, so the earlier runs' attempts are
// its history, not another task's; a run pruned by retention has taken
// its attempts with it.
func taskAttempts(as []domain.Attempt, run int) []AttemptView {
	out := []AttemptView{}
	for _, a := range as {
		if a.Run <= run {
			out = append(out, attemptView(a))
		}
	}
	// Attempt numbers go on across runs: the highest is the newest.
	slices.SortStableFunc(out, func(a, b AttemptView) int { return b.Attempt - a.Attempt })
	return out
}
