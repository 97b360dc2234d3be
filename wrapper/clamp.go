package wrapper

import "math"

// Limits on the numbers a status carries. A status is written where the
// task can rewrite it, and reaches the controller through a node that may
// answer anything, so each number is brought into a sane range before it is
// used or summed.
const (
	// MaxRetryAfterSeconds bounds the pause a rate limit may ask for: a
	// day. A forged 9e9 would pause a shared api_mode for centuries.
	MaxRetryAfterSeconds = 24 * 60 * 60
	// MaxCostUSD bounds one attempt's cost, far above anything real, so
	// that sums over many attempts stay finite.
	MaxCostUSD = 1e9
)

// Clamp brings s's numbers into range: no NaN or infinity, nothing
// negative that counts something, retry_after_seconds at most a day,
// cost at most MaxCostUSD.
func (s *Status) Clamp() {
	s.RetryAfterSeconds = clampFloat(s.RetryAfterSeconds, MaxRetryAfterSeconds)
	s.CostUSD = clampFloat(s.CostUSD, MaxCostUSD)
	s.TokensIn = max(s.TokensIn, 0)
	s.TokensOut = max(s.TokensOut, 0)
	s.LogBytes = max(s.LogBytes, 0)
	// A session id goes back into a tool's command line: only a sane one.
	if !sessionRE.MatchString(s.SessionID) {
		s.SessionID = ""
	}
	// A result commit is a commit id or nothing.
	if s.Commit != "" && !IsCommitID(s.Commit) {
		s.Commit = ""
	}
	// A sandbox is a known word or nothing.
	if s.Sandbox != SandboxBwrap {
		s.Sandbox = ""
	}
}

// Clamp brings the node's facts into range.
func (f *Facts) Clamp() {
	f.MemAvailableBytes = max(f.MemAvailableBytes, 0)
	f.DiskFreeBytes = max(f.DiskFreeBytes, 0)
	f.Load1 = clampFloat(f.Load1, math.MaxFloat32)
}

// clampFloat is v within [0, hi], and 0 for NaN.
func clampFloat(v, hi float64) float64 {
	switch {
	case math.IsNaN(v) || v <= 0:
		return 0
	case v > hi:
		return hi
	}
	return v
}

// AddSat returns a+b for counts that are never negative, saturating at
// the largest int64 instead of wrapping to a negative total.
func AddSat(a, b int64) int64 {
	if b > 0 && a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
