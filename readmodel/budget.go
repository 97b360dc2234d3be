package readmodel

import (
	"fmt"

	"github.com/dispatch-tool/dispatch/domain"
)

// BudgetStop is how a project's budget stopped it (project.yaml budget:,
// start --budget-usd): what was spent of what was allowed and how many
// tasks were canceled for it. The first lines of status and the report
// say it, and what to do.
type BudgetStop struct {
	// Spent and Allowed are "$0.06" and "$0.05", or "1200 tokens" and
	// "1000 tokens": the limit that was reached.
	Spent, Allowed string
	// Canceled counts the tasks that never started.
	Canceled int
	// USD is set when the dollar limit was reached: start --budget-usd
	// raises it; a token limit is raised in project.yaml only.
	USD bool
	// Ended is set once the project has finished.
	Ended bool
}

// budgetStopOf says whether the project's budget stopped it: the budget
// is reached and the project did not pass. nil otherwise.
func budgetStopOf(p domain.Project, usd float64, tokens int64, canceled int) *BudgetStop {
	opts, err := p.ParseOptions()
	if err != nil || !opts.HasBudget() || p.Result == domain.ResultPassed {
		return nil
	}
	b := &BudgetStop{Canceled: canceled, Ended: p.Result != ""}
	switch {
	case opts.BudgetUSD > 0 && usd >= opts.BudgetUSD:
		b.Spent, b.Allowed, b.USD = fmt.Sprintf("$%.2f", usd), fmt.Sprintf("$%.2f", opts.BudgetUSD), true
	case opts.BudgetTokens > 0 && tokens >= opts.BudgetTokens:
		b.Spent, b.Allowed = fmt.Sprintf("%d tokens", tokens), fmt.Sprintf("%d tokens", opts.BudgetTokens)
	default:
		return nil
	}
	return b
}

// Summary is the stop in a phrase: "stopped by its budget: $0.06 spent of
// $0.05 allowed, 2 tasks canceled".
func (b *BudgetStop) Summary() string {
	s := "stopped by its budget: "
	if !b.Ended {
		s = "budget reached, nothing new starts: "
	}
	s += b.Spent + " spent of " + b.Allowed + " allowed"
	switch b.Canceled {
	case 0:
	case 1:
		s += ", 1 task canceled"
	default:
		s += fmt.Sprintf(", %d tasks canceled", b.Canceled)
	}
	return s
}

// Next says how to raise the budget and run what it stopped.
func (b *BudgetStop) Next(project string) string {
	raise := fmt.Sprintf("raise budget: in specs/%s/project.yaml", project)
	if b.USD {
		raise = fmt.Sprintf("run `dispatch start --budget-usd <USD> %s` with a higher amount (or %s and `dispatch start %s`)", project, raise, project)
	} else {
		raise += fmt.Sprintf(" and run `dispatch start %s`", project)
	}
	if !b.Ended {
		return "running tasks finish and are collected; then " + raise +
			": the new run reuses the completed tasks and runs the rest."
	}
	return raise + ": the new run reuses the completed tasks and runs the rest."
}
