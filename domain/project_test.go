package domain

import "testing"

func TestBudgetReached(t *testing.T) {
	tests := []struct {
		name    string
		opts    ProjectOptions
		usd     float64
		tokens  int64
		reached bool
		want    string
	}{
		{"no budget", ProjectOptions{}, 100, 1e9, false, ""},
		{"under", ProjectOptions{BudgetUSD: 20}, 19.99, 0, false, ""},
		{"at the usd limit", ProjectOptions{BudgetUSD: 20}, 20, 0, true, "budget reached: $20.00 spent of $20.00"},
		{"over tokens", ProjectOptions{BudgetTokens: 1000}, 0, 1200, true, "budget reached: 1200 tokens used of 1000"},
		{"usd checked first", ProjectOptions{BudgetUSD: 1, BudgetTokens: 1000}, 2, 5000, true, "budget reached: $2.00 spent of $1.00"},
		{"tokens only, cost ignored", ProjectOptions{BudgetTokens: 1000}, 50, 10, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			why, reached := tt.opts.BudgetReached(tt.usd, tt.tokens)
			if reached != tt.reached || why != tt.want {
				t.Errorf("BudgetReached = %q, %v; want %q, %v", why, reached, tt.want, tt.reached)
			}
		})
	}
}
