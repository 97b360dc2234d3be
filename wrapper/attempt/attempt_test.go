package attempt

import (
	"syscall"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/agentlog"
	"github.com/dispatch-tool/dispatch/wrapper/limits"
)

// TestDecide drives the final status of an attempt from its ending alone:
// every stop reason, each way the tool can end, and their precedence.
func TestDecide(t *testing.T) {
	t.Parallel()
	ended := time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC)
	failedGate := &wire.GateResult{Error: "exit status 1"}
	passedGate := &wire.GateResult{Passed: true}
	tests := []struct {
		name string
		e    Ending
		want Final
	}{
		{"completed", Ending{Code: 0}, Final{Status: wire.StatusCompleted}},
		{"completed with its commit", Ending{Commit: "c1", Gate: passedGate, GateDecides: true}, Final{Status: wire.StatusCompleted, Commit: "c1"}},
		{"killed beats all", Ending{Reason: ReasonKill, Code: -1, Sig: syscall.SIGKILL, StartErr: "x"}, Final{Status: wire.StatusKilled, Class: wire.ClassKilled, Error: "killed on request"}},
		{"oom", Ending{Reason: limits.ReasonOOM, LimitMsg: "killed: over 64 MiB", Code: -1, Sig: syscall.SIGKILL}, Final{Status: wire.StatusFailed, Class: wire.ClassOOM, Error: "killed: over 64 MiB"}},
		{"pids", Ending{Reason: limits.ReasonPids, LimitMsg: "killed: 9 processes"}, Final{Status: wire.StatusFailed, Class: wire.ClassPids, Error: "killed: 9 processes"}},
		{"stall", Ending{Reason: ReasonStall, Stall: 90 * time.Second, Code: -1, Sig: syscall.SIGTERM}, Final{Status: wire.StatusFailed, Class: wire.ClassStalled, Error: "stalled: the tool wrote nothing for 1m30s"}},
		{"timeout", Ending{Reason: ReasonTimeout, Timeout: time.Hour}, Final{Status: wire.StatusFailed, Class: wire.ClassTimeout, Error: "timed out after 1h0m0s"}},
		{"notice: rate limit", Ending{Reason: ReasonNotice, Notice: agentlog.Notice{Class: wire.ClassRateLimit, Wait: 90 * time.Second}, NoticeAt: ended.Add(-30 * time.Second), Ended: ended},
			Final{Status: wire.StatusFailed, Class: wire.ClassRateLimit, Error: "stopped: the tool was waiting out a rate limit (reset in 1m30s)", RetryAfterSeconds: 60}},
		{"notice: rate limit, no wait", Ending{Reason: ReasonNotice, Notice: agentlog.Notice{Class: wire.ClassRateLimit}}, Final{Status: wire.StatusFailed, Class: wire.ClassRateLimit, Error: "stopped: the tool was waiting out a rate limit"}},
		{"notice: auth", Ending{Reason: ReasonNotice, Notice: agentlog.Notice{Class: wire.ClassAuth, Wait: time.Minute}}, Final{Status: wire.StatusFailed, Class: wire.ClassAuth, Error: "stopped: the tool was retrying an API call the provider refused for its credentials"}},
		{"fork refused", Ending{NprocRefused: true, NprocMsg: "fork refused", Code: 1}, Final{Status: wire.StatusFailed, Class: wire.ClassPids, Error: "fork refused"}},
		{"start", Ending{Code: -1, StartErr: "no bwrap", ToolMissing: true}, Final{Status: wire.StatusFailed, Class: wire.ClassStart, Error: "no bwrap", ToolMissing: true}},
		{"start, permanent", Ending{Code: -1, StartErr: "bad launch", Permanent: true}, Final{Status: wire.StatusFailed, Class: wire.ClassStartPermanent, Error: "bad launch"}},
		{"crash", Ending{Code: -1, Sig: syscall.SIGSEGV}, Final{Status: wire.StatusFailed, Class: wire.ClassCrash, Error: "killed by SIGSEGV"}},
		{"result not recorded", Ending{ResultErr: "git: disk full"}, Final{Status: wire.StatusFailed, Class: wire.ClassCrash, Error: "git: disk full"}},
		{"gate decides", Ending{Commit: "c1", Gate: failedGate, GateDecides: true}, Final{Status: wire.StatusFailed, Class: wire.ClassGate, Error: "the task gate failed: exit status 1", Commit: "c1"}},
		{"gate only reports", Ending{Commit: "c1", Gate: failedGate}, Final{Status: wire.StatusCompleted, Commit: "c1"}},
		{"exit", Ending{Code: 2, LogTail: []byte("boom\n")}, Final{Status: wire.StatusFailed, Class: wire.ClassExit, Error: "exit status 2"}},
		{"exit: rate limit", Ending{Agent: wire.AgentClaude, Code: 1, LogTail: []byte("API Error: 429 rate limit exceeded\n"), Ended: ended}, Final{Status: wire.StatusFailed, Class: wire.ClassRateLimit, Error: "exit status 1"}},
	}
	for _, tc := range tests {
		got := Decide(tc.e)
		if tc.name == "exit: rate limit" {
			got.RetryAfterSeconds = 0 // the default wait is agentlog's (TestAgentReset)
		}
		if got != tc.want {
			t.Errorf("%s:\n got %+v\nwant %+v", tc.name, got, tc.want)
		}
	}
}

// TestCollect: the git result is recorded, and the gate run, only for a
// tool that ended well and was not stopped; the gate only on a recorded
// result.
func TestCollect(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name               string
		e                  ToolEnd
		resultOK           bool
		wantSnap, wantGate bool
	}{
		{"git and gate", ToolEnd{Repo: true, Gate: true}, true, true, true},
		{"result failed", ToolEnd{Repo: true, Gate: true}, false, true, false},
		{"plain task, gate", ToolEnd{Gate: true}, true, false, true},
		{"nothing asked", ToolEnd{}, true, false, false},
		{"exit 1", ToolEnd{Code: 1, Repo: true, Gate: true}, true, false, false},
		{"signal", ToolEnd{Code: -1, Sig: syscall.SIGKILL, Repo: true, Gate: true}, true, false, false},
		{"stopping", ToolEnd{Stopping: true, Repo: true, Gate: true}, true, false, false},
	}
	for _, tc := range tests {
		snap, gate := Collect(tc.e, tc.resultOK)
		if snap != tc.wantSnap || gate != tc.wantGate {
			t.Errorf("%s: Collect = %v, %v; want %v, %v", tc.name, snap, gate, tc.wantSnap, tc.wantGate)
		}
	}
}
