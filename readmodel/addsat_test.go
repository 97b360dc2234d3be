package readmodel

import (
	"math"
	"testing"
)

// TestAddSat: the report's totals saturate at the largest int64 instead of
// wrapping to a negative total (forged token counts from a node).
func TestAddSat(t *testing.T) {
	for _, tc := range []struct{ a, b, want int64 }{
		{1, 2, 3},
		{math.MaxInt64, 1, math.MaxInt64},
		{math.MaxInt64 - 1, math.MaxInt64, math.MaxInt64},
		{0, 0, 0},
	} {
		if got := addSat(tc.a, tc.b); got != tc.want {
			t.Errorf("addSat(%d, %d) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}
