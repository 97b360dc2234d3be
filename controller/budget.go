package controller

import (
	"context"

	"github.com/dispatch-tool/dispatch/domain"
)

// budgetStop reports whether the project's budget forbids starting its next
// phase task, and why.
func (c *Controller) budgetStop(ctx context.Context, p domain.Project, opts domain.ProjectOptions) (string, bool, error) {
	if !opts.HasBudget() {
		return "", false, nil
	}
	usd, tokens, err := c.st.Spent(ctx, p.Name)
	if err != nil {
		return "", false, err
	}
	why, reached := opts.BudgetReached(usd, tokens)
	return why, reached, nil
}
