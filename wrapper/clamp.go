package wrapper

import "math"

// AddSat returns a+b for counts that are never negative, saturating at
// the largest int64 instead of wrapping to a negative total.
func AddSat(a, b int64) int64 {
	if b > 0 && a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
