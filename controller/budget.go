package controller

import (
	"context"
	"fmt"
	"strings"

	"github.com/dispatch-tool/dispatch/store"
)

// budgetReached says whether a project's spending has reached its budget
// (project.yaml budget:, start --budget-usd), and how, for status and the
// report. A zero limit is no limit.
func budgetReached(opts ProjectOptions, usd float64, tokens int64) (string, bool) {
	switch {
	case opts.BudgetUSD > 0 && usd >= opts.BudgetUSD:
		return fmt.Sprintf("budget reached: $%.2f spent of $%.2f", usd, opts.BudgetUSD), true
	case opts.BudgetTokens > 0 && tokens >= opts.BudgetTokens:
		return fmt.Sprintf("budget reached: %d tokens used of %d", tokens, opts.BudgetTokens), true
	}
	return "", false
}

// budgetStop reports whether the project's budget forbids starting its next
// phase task, and why.
func (c *Controller) budgetStop(ctx context.Context, p store.Project, opts ProjectOptions) (string, bool, error) {
	if opts.BudgetUSD <= 0 && opts.BudgetTokens <= 0 {
		return "", false, nil
	}
	usd, tokens, err := c.st.Spent(ctx, p.Name)
	if err != nil {
		return "", false, err
	}
	why, reached := budgetReached(opts, usd, tokens)
	return why, reached, nil
}

// budgetLine describes a project's budget and its state for report.md; ""
// when it has none.
func budgetLine(p store.Project, t Totals) string {
	opts, err := projectOptions(p)
	if err != nil || opts.BudgetUSD <= 0 && opts.BudgetTokens <= 0 {
		return ""
	}
	var parts []string
	if opts.BudgetUSD > 0 {
		parts = append(parts, fmt.Sprintf("$%.2f", opts.BudgetUSD))
	}
	if opts.BudgetTokens > 0 {
		parts = append(parts, fmt.Sprintf("%d tokens", opts.BudgetTokens))
	}
	line := "Budget: " + strings.Join(parts, " or ")
	if why, reached := budgetReached(opts, t.CostUSD, t.TokensIn+t.TokensOut); reached {
		line += " — " + why + "; nothing new started after that."
	} else {
		line += " — not reached."
	}
	return line
}

// budgetNote is the status note of a project whose budget is reached.
func budgetNote(ctx context.Context, st *store.Store, p store.Project) (string, error) {
	opts, err := projectOptions(p)
	if err != nil || opts.BudgetUSD <= 0 && opts.BudgetTokens <= 0 {
		return "", nil
	}
	usd, tokens, err := st.Spent(ctx, p.Name)
	if err != nil {
		return "", err
	}
	why, reached := budgetReached(opts, usd, tokens)
	if !reached {
		return "", nil
	}
	return why + "; nothing new starts", nil
}
