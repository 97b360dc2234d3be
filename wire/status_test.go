package wire

import (
	"math"
	"testing"
)

func TestStatusClamp(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   Status
		want Status
	}{
		{"sane values stay", Status{RetryAfterSeconds: 120, CostUSD: 0.25, TokensIn: 10, TokensOut: 20, LogBytes: 5},
			Status{RetryAfterSeconds: 120, CostUSD: 0.25, TokensIn: 10, TokensOut: 20, LogBytes: 5}},
		{"forged pause of centuries", Status{RetryAfterSeconds: 9e9}, Status{RetryAfterSeconds: MaxRetryAfterSeconds}},
		{"negative", Status{RetryAfterSeconds: -1, CostUSD: -3, TokensIn: -5, TokensOut: math.MinInt64, LogBytes: -1}, Status{}},
		{"not a number", Status{RetryAfterSeconds: math.NaN(), CostUSD: math.NaN()}, Status{}},
		{"infinite", Status{RetryAfterSeconds: math.Inf(1), CostUSD: math.Inf(1)},
			Status{RetryAfterSeconds: MaxRetryAfterSeconds, CostUSD: MaxCostUSD}},
		{"huge cost", Status{CostUSD: 1e308}, Status{CostUSD: MaxCostUSD}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.in
			got.Clamp()
			if got != tc.want {
				t.Fatalf("Clamp(%+v) = %+v, want %+v", tc.in, got, tc.want)
			}
		})
	}
}
