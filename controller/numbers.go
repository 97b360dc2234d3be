package controller

import (
	"time"

	"github.com/dispatch-tool/dispatch/wire"
)

// The numbers a finished attempt's status carries (a reset time, usage and
// cost) are the wrapper's reading of the tool's output, in a file the task
// can rewrite: each is taken only from a tool whose output dispatch reads
// for it, and bounded, before it pauses an account or counts against a
// budget.

// maxTrustedReset bounds a reset an agent CLI named: a weekly limit is not
// worth more than a day's pause of a shared account, after which the next
// attempt tells again.
const maxTrustedReset = wire.MaxRetryAfterSeconds * time.Second

// trustedReset is the reset a rate-limited attempt of tool named, as its
// status gives it: only an agent CLI's word counts (the wrapper reads it
// from the CLI's own events), capped at a day. 0: none, or not trusted.
func trustedReset(tool string, retryAfterSeconds float64) time.Duration {
	if !wire.IsAgent(tool) || !(retryAfterSeconds > 0) {
		return 0
	}
	return min(time.Duration(min(retryAfterSeconds, wire.MaxRetryAfterSeconds)*float64(time.Second)), maxTrustedReset)
}

// textClasses are the error classes the wrapper judges from a tool's
// output text (wrapper.Classify): only an agent CLI has an account whose
// rate limit or login its log may report.
var textClasses = map[string]bool{wire.ClassRateLimit: true, wire.ClassAuth: true}

// trustedClass is the class a failed attempt of tool counts as, from the
// one its status.json gives: a class judged from output text is an exit
// for any tool but an agent CLI (a task may print, or write into
// status.json, what it likes; a shell task has no account to pause), and
// no class at all is an exit.
func trustedClass(tool, class string) string {
	if class == "" || textClasses[class] && !wire.IsAgent(tool) {
		return wire.ClassExit
	}
	return class
}

// ratePause is how long a rate limit pauses its api_mode: the trusted
// reset, or else the backoff of the task's rate-limit retry (at least
// unknownResetPause, since a limit is seldom over sooner) but never more
// than retry_backoff_max: no judgement from a log line pauses the account
// for longer.
func ratePause(reset, backoff, backoffMax time.Duration) time.Duration {
	if reset > 0 {
		return reset
	}
	return min(max(backoff, unknownResetPause), backoffMax)
}

// attemptUsage is what a finished attempt of tool counts as using: the
// status's figures for an agent CLI, nothing for any other tool (a shell
// task's output is its own to write, and the wrapper reads none of it),
// and a cost above ceiling (budget.max_attempt_usd) counted as the ceiling;
// over reports that.
func attemptUsage(tool string, st wire.Status, ceiling float64) (in, out int64, usd float64, over bool) {
	if !wire.IsAgent(tool) {
		return 0, 0, 0, false
	}
	in, out, usd = max(st.TokensIn, 0), max(st.TokensOut, 0), st.CostUSD
	if !(usd > 0) {
		usd = 0
	}
	if usd > ceiling {
		return in, out, ceiling, true
	}
	return in, out, usd, false
}
