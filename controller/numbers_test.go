package controller

import (
	"math"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/wrapper"
)

func TestTrustedReset(t *testing.T) {
	tests := []struct {
		name    string
		tool    string
		seconds float64
		want    time.Duration
	}{
		{"claude's reset", "claude", 90, 90 * time.Second},
		{"codex's reset", "codex", 3600, time.Hour},
		{"gemini's reset", "gemini", 20, 20 * time.Second},
		{"a day from claude is kept", "claude", 86400, 24 * time.Hour},
		{"more than a day from claude is a day", "claude", 9e9, 24 * time.Hour},
		{"a shell task's reset is not trusted", "shell", 86400, 0},
		{"a custom tool's reset is not trusted", "mytool", 120, 0},
		{"none named", "claude", 0, 0},
		{"negative", "claude", -5, 0},
		{"not a number", "claude", math.NaN(), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := trustedReset(tt.tool, tt.seconds); got != tt.want {
				t.Errorf("trustedReset(%s, %g) = %s, want %s", tt.tool, tt.seconds, got, tt.want)
			}
		})
	}
}

func TestRatePause(t *testing.T) {
	tests := []struct {
		name                       string
		reset, backoff, backoffMax time.Duration
		want                       time.Duration
	}{
		{"a trusted reset", 3 * time.Hour, 10 * time.Second, 5 * time.Minute, 3 * time.Hour},
		{"no reset: at least a minute", 0, 10 * time.Second, 5 * time.Minute, time.Minute},
		{"no reset: the backoff", 0, 4 * time.Minute, 5 * time.Minute, 4 * time.Minute},
		{"no reset: never past retry_backoff_max", 0, 6 * time.Minute, 5 * time.Minute, 5 * time.Minute},
		{"no reset: a short retry_backoff_max wins over the minute", 0, 100 * time.Millisecond, time.Second, time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ratePause(tt.reset, tt.backoff, tt.backoffMax); got != tt.want {
				t.Errorf("ratePause = %s, want %s", got, tt.want)
			}
		})
	}
}

func TestAttemptUsage(t *testing.T) {
	tests := []struct {
		name    string
		tool    string
		st      wrapper.Status
		in, out int64
		usd     float64
		over    bool
	}{
		{"claude's figures", "claude", wrapper.Status{TokensIn: 150, TokensOut: 50, CostUSD: 0.0125}, 150, 50, 0.0125, false},
		{"codex's tokens", "codex", wrapper.Status{TokensOut: 1000}, 0, 1000, 0, false},
		{"a cost at the ceiling", "claude", wrapper.Status{CostUSD: 50}, 0, 0, 50, false},
		{"a forged cost counts as the ceiling", "claude", wrapper.Status{CostUSD: 1e9}, 0, 0, 50, true},
		{"an infinite cost counts as the ceiling", "claude", wrapper.Status{CostUSD: math.Inf(1)}, 0, 0, 50, true},
		{"a negative cost is none", "claude", wrapper.Status{CostUSD: -3, TokensIn: -1}, 0, 0, 0, false},
		{"NaN is none", "claude", wrapper.Status{CostUSD: math.NaN()}, 0, 0, 0, false},
		{"a shell task's figures count for nothing", "shell", wrapper.Status{TokensIn: 5, TokensOut: 5, CostUSD: 1e9}, 0, 0, 0, false},
		{"a custom tool's figures count for nothing", "mytool", wrapper.Status{CostUSD: 0.5}, 0, 0, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in, out, usd, over := attemptUsage(tt.tool, tt.st, 50)
			if in != tt.in || out != tt.out || usd != tt.usd || over != tt.over {
				t.Errorf("attemptUsage = %d, %d, %g, %v; want %d, %d, %g, %v", in, out, usd, over, tt.in, tt.out, tt.usd, tt.over)
			}
		})
	}
}
