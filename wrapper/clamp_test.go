package wrapper

import (
	"math"
	"testing"

	"github.com/dispatch-tool/dispatch/wire"
)

func TestStatusClamp(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   wire.Status
		want wire.Status
	}{
		{"sane values stay", wire.Status{RetryAfterSeconds: 120, CostUSD: 0.25, TokensIn: 10, TokensOut: 20, LogBytes: 5},
			wire.Status{RetryAfterSeconds: 120, CostUSD: 0.25, TokensIn: 10, TokensOut: 20, LogBytes: 5}},
		{"forged pause of centuries", wire.Status{RetryAfterSeconds: 9e9}, wire.Status{RetryAfterSeconds: wire.MaxRetryAfterSeconds}},
		{"negative", wire.Status{RetryAfterSeconds: -1, CostUSD: -3, TokensIn: -5, TokensOut: math.MinInt64, LogBytes: -1}, wire.Status{}},
		{"not a number", wire.Status{RetryAfterSeconds: math.NaN(), CostUSD: math.NaN()}, wire.Status{}},
		{"infinite", wire.Status{RetryAfterSeconds: math.Inf(1), CostUSD: math.Inf(1)},
			wire.Status{RetryAfterSeconds: wire.MaxRetryAfterSeconds, CostUSD: wire.MaxCostUSD}},
		{"huge cost", wire.Status{CostUSD: 1e308}, wire.Status{CostUSD: wire.MaxCostUSD}},
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

func TestAddSat(t *testing.T) {
	for _, tc := range []struct{ a, b, want int64 }{
		{1, 2, 3},
		{math.MaxInt64, 1, math.MaxInt64},
		{math.MaxInt64 - 1, math.MaxInt64, math.MaxInt64},
		{0, 0, 0},
	} {
		if got := AddSat(tc.a, tc.b); got != tc.want {
			t.Errorf("AddSat(%d, %d) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}
