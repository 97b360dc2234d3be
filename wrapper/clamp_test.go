package wrapper

import (
	"math"
	"testing"
)

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
