package attempt

import (
	"syscall"
	"time"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/agentlog"
	"github.com/dispatch-tool/dispatch/wrapper/limits"
	"github.com/dispatch-tool/dispatch/wrapper/proc"
)

// Why an attempt is being stopped by the supervisor (besides the
// watchdog's limits.ReasonOOM and limits.ReasonPids).
const (
	ReasonKill    = "kill"
	ReasonTimeout = "timeout"
	// ReasonNotice: the tool announced a retry of a rate limit or of a
	// refused key (see agentlog.RetryNotice).
	ReasonNotice = "notice"
	// ReasonStall: the tool wrote nothing for stall_seconds.
	ReasonStall = "stall"
)

// ToolEnd is how the tool ended, as far as collecting its result goes.
type ToolEnd struct {
	Code     int
	Sig      syscall.Signal
	Stopping bool // a stop was asked for
	Repo     bool // a git-native task: its result is a commit
	Gate     bool // launch.json has a gate
}

// Collect says what is collected once the tool has ended: the git result
// (snapshot) when it ended well and was not stopped; the gate when, on
// top of that, the result was recorded (resultOK) — it runs after the
// snapshot, on the commit.
func Collect(e ToolEnd, resultOK bool) (snapshot, gate bool) {
	well := e.Code == 0 && e.Sig == 0 && !e.Stopping
	return e.Repo && well, e.Gate && well && resultOK
}

// Ending is everything the final status depends on, read once when the
// attempt has ended.
type Ending struct {
	Reason   string // the stop reason ("" when nothing stopped it)
	LimitMsg string // the watchdog's message, with ReasonOOM or ReasonPids

	Code        int
	Sig         syscall.Signal
	StartErr    string // the tool never ran, and why
	Permanent   bool   // with StartErr: no retry mends it
	ToolMissing bool   // with StartErr: the tool's executable is not here
	ResultErr   string // recording the git result failed
	Commit      string // the git result

	Gate        *wire.GateResult // the gate's result, when it ran
	GateDecides bool             // a failed gate fails the attempt

	NprocRefused bool   // RLIMIT_NPROC, the pids backstop, refused a fork
	NprocMsg     string // what to say then

	Notice   agentlog.Notice // what the tool announced, with ReasonNotice
	NoticeAt time.Time

	Agent   string
	LogTail []byte // the end of task.log, for the exit class
	Stall   time.Duration
	Timeout time.Duration
	Ended   time.Time
}

// Final is the part of the final status an ending decides.
type Final struct {
	Status, Class, Error string
	Commit               string
	ToolMissing          bool
	RetryAfterSeconds    float64
}

// Decide is the final status of an ending: a stop reason first (kill,
// notice, limits, stall, timeout), then a refused fork, a start that
// failed, a crash, a result not recorded, a failed deciding gate, and
// last the tool's own exit status, classed by what it printed.
func Decide(e Ending) Final {
	switch {
	case e.Reason == ReasonKill:
		return Final{Status: wire.StatusKilled, Class: wire.ClassKilled, Error: "killed on request"}
	case e.Reason == ReasonNotice:
		return noticeFinal(e)
	case e.Reason == limits.ReasonOOM:
		return Final{Status: wire.StatusFailed, Class: wire.ClassOOM, Error: e.LimitMsg}
	case e.Reason == limits.ReasonPids:
		return Final{Status: wire.StatusFailed, Class: wire.ClassPids, Error: e.LimitMsg}
	case e.Reason == ReasonStall:
		return Final{Status: wire.StatusFailed, Class: wire.ClassStalled, Error: "stalled: the tool wrote nothing for " + e.Stall.String()}
	case e.Reason == ReasonTimeout:
		return Final{Status: wire.StatusFailed, Class: wire.ClassTimeout, Error: "timed out after " + e.Timeout.String()}
	case e.NprocRefused:
		return Final{Status: wire.StatusFailed, Class: wire.ClassPids, Error: e.NprocMsg}
	case e.StartErr != "":
		f := Final{Status: wire.StatusFailed, Class: wire.ClassStart, Error: e.StartErr, ToolMissing: e.ToolMissing}
		if e.Permanent {
			f.Class = wire.ClassStartPermanent
		}
		return f
	case e.Sig != 0:
		return Final{Status: wire.StatusFailed, Class: wire.ClassCrash, Error: proc.ExitError(e.Code, e.Sig)}
	case e.ResultErr != "":
		return Final{Status: wire.StatusFailed, Class: wire.ClassCrash, Error: e.ResultErr}
	case e.Gate != nil && !e.Gate.Passed && e.GateDecides:
		return Final{Status: wire.StatusFailed, Class: wire.ClassGate, Error: "the task gate failed: " + e.Gate.Error, Commit: e.Commit}
	case e.Code == 0:
		return Final{Status: wire.StatusCompleted, Commit: e.Commit}
	}
	f := Final{Status: wire.StatusFailed, Class: agentlog.ExitClass(e.Agent, e.Code, e.LogTail), Error: proc.ExitError(e.Code, 0)}
	if f.Class == wire.ClassRateLimit {
		f.RetryAfterSeconds = agentlog.RetrySeconds(agentlog.AgentReset(e.Agent, e.LogTail, e.Ended))
	}
	return f
}

// noticeFinal is the final status of a tool stopped for what it announced:
// retrying a refused key, or waiting out a rate limit (until when, if it
// said).
func noticeFinal(e Ending) Final {
	f := Final{Status: wire.StatusFailed, Class: e.Notice.Class}
	if e.Notice.Class == wire.ClassAuth {
		f.Error = "stopped: the tool was retrying an API call the provider refused for its credentials"
		return f
	}
	f.Error = "stopped: the tool was waiting out a rate limit"
	if e.Notice.Wait > 0 {
		f.RetryAfterSeconds = agentlog.RetrySeconds(agentlog.Until(e.NoticeAt.Add(e.Notice.Wait), e.Ended))
		f.Error += " (reset in " + e.Notice.Wait.Round(time.Second).String() + ")"
	}
	return f
}
