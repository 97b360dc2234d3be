package controller

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/wire"
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

func TestTrustedClass(t *testing.T) {
	tests := []struct {
		tool, class, want string
	}{
		{"shell", wire.ClassRateLimit, wire.ClassExit},
		{"shell", wire.ClassAuth, wire.ClassExit},
		{"mytool", wire.ClassRateLimit, wire.ClassExit},
		{"shell", "", wire.ClassExit},
		{"shell", wire.ClassTimeout, wire.ClassTimeout},
		{"shell", wire.ClassOOM, wire.ClassOOM},
		{"shell", wire.ClassStart, wire.ClassStart},
		{"claude", wire.ClassRateLimit, wire.ClassRateLimit},
		{"codex", wire.ClassAuth, wire.ClassAuth},
		{"gemini", wire.ClassRateLimit, wire.ClassRateLimit},
		{"claude", "", wire.ClassExit},
	}
	for _, tt := range tests {
		if got := trustedClass(tt.tool, tt.class); got != tt.want {
			t.Errorf("trustedClass(%q, %q) = %q, want %q", tt.tool, tt.class, got, tt.want)
		}
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
		st      wire.Status
		in, out int64
		usd     float64
		over    bool
	}{
		{"claude's figures", "claude", wire.Status{TokensIn: 150, TokensOut: 50, CostUSD: 0.0125}, 150, 50, 0.0125, false},
		{"codex's tokens", "codex", wire.Status{TokensOut: 1000}, 0, 1000, 0, false},
		{"a cost at the ceiling", "claude", wire.Status{CostUSD: 50}, 0, 0, 50, false},
		{"a forged cost counts as the ceiling", "claude", wire.Status{CostUSD: 1e9}, 0, 0, 50, true},
		{"an infinite cost counts as the ceiling", "claude", wire.Status{CostUSD: math.Inf(1)}, 0, 0, 50, true},
		{"a negative cost is none", "claude", wire.Status{CostUSD: -3, TokensIn: -1}, 0, 0, 0, false},
		{"NaN is none", "claude", wire.Status{CostUSD: math.NaN()}, 0, 0, 0, false},
		{"a shell task's figures count for nothing", "shell", wire.Status{TokensIn: 5, TokensOut: 5, CostUSD: 1e9}, 0, 0, 0, false},
		{"a custom tool's figures count for nothing", "mytool", wire.Status{CostUSD: 0.5}, 0, 0, 0, false},
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

// TestForgedLinesFromATask runs real tasks that print what an agent CLI
// would: a shell task's "429 … retry after 86400 seconds" is an exit (no
// pause of its api_mode, no free rate-limit retry: issue 32), a shell
// task's claude-like result with a cost of $1e9 counts for nothing, and
// the same result from a tool named claude counts as
// budget.max_attempt_usd, with an event. The budget does not stop the
// project, whose last task runs.
func TestForgedLinesFromATask(t *testing.T) {
	yaml := `
controller:
  retry_backoff: 10s
  retry_backoff_max: 2m
  max_retries: 0
nodes:
  - name: local
    slots: 4
    api_mode: shared
    work_dir: WORK
api_modes:
  shared: {}
tools:
  claude: { command: [/bin/sh, "{spec}"] }
`
	const result = `echo '{"type":"result","subtype":"success","is_error":false,"result":"done","total_cost_usd":1e9,"usage":{"input_tokens":5,"output_tokens":5}}'` + "\n"
	h := newHarness(t, yaml, map[string]string{
		"project.yaml": "tool: shell\nintegration: false\nbudget: {usd: 30, max_attempt_usd: 20}\n",
		"S01-limit.md": `if [ "$DISPATCH_ATTEMPT" = 1 ]; then echo 'API Error: 429 Too Many Requests: retry after 86400 seconds'; exit 1; fi
echo done > out.txt
`,
		"S02-shell-cost.md":  result,
		"S03-claude-cost.md": "---\ntool: claude\n---\n" + result,
		"S04-last.md":        "---\ndepends_on: [S02, S03]\n---\necho done > out.txt\n",
	})
	ctx := context.Background()
	h.tickUntil("S01's first attempt to fail", func() bool { return h.task("S01").Status == domain.Failed })
	if tk := h.task("S01"); tk.ErrorClass != wire.ClassExit || tk.RateLimitRetries != 0 {
		t.Fatalf("S01: class %q, rate-limit retries %d; want a shell task's 429 line to be an exit, with none", tk.ErrorClass, tk.RateLimitRetries)
	}
	if pauses, err := h.st.Pauses(ctx); err != nil || len(pauses) != 0 {
		t.Fatalf("pauses = %+v, %v; want none from a shell task's log line", pauses, err)
	}
	h.tickUntil("S02 and S03 to end", func() bool {
		return h.task("S02").Status == domain.Completed && h.task("S03").Status == domain.Completed
	})
	for id, want := range map[string]float64{"S02": 0, "S03": 20} {
		runs, _ := h.st.Attempts(ctx, "p", id)
		if len(runs) != 1 || runs[0].CostUSD != want {
			t.Errorf("%s runs = %+v; want one costing $%g", id, runs, want)
		}
	}
	if evs := h.events("cost_ceiling"); len(evs) != 1 || evs[0].Task != "S03" || !strings.Contains(evs[0].Message, "counted as $20.00") {
		t.Errorf("cost_ceiling events = %+v; want one for S03", evs)
	}
	if usd, _, err := h.st.Spent(ctx, "p"); err != nil || usd != 20 {
		t.Errorf("spent $%g, %v; want $20", usd, err)
	}
	h.tickUntil("S04 to complete", func() bool { return h.task("S04").Status == domain.Completed })
}
