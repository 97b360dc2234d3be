// Package executor is the seam where a node's attempts start, are watched
// and are killed.
//
// The controller's tick decides, over data, which attempts to start on a
// node, which to kill, and what each attempt's status means; it carries
// those decisions out through one Executor per node and nothing else. The
// executor of an SSH or local node (Wrapper, wrapper.go) starts
// each attempt's detached supervisor with `wrapper run`, reads the status
// files with `wrapper status` and kills with `wrapper kill`, all over the
// node's nodes.Transport. A batch system (a Slurm cluster: issue 36) starts
// the same supervisor inside one job per attempt, and reads the same status
// files; the tick does not change.
//
// Every method is batch-shaped: it takes all of one node's attempts of a
// tick at once, so that an implementation can make one call (one SSH
// session, one sbatch loop, one squeue) however many attempts the node has.
//
// What every implementation guarantees (docs/PROTOCOL.md, "Executors"):
//
//   - Launch is idempotent by attempt: launching an attempt whose
//     supervisor already lives (an earlier call got through) starts no
//     second one, and says so as Uncertain, never as started twice.
//   - The wrapper's status files in the task directory are the source of
//     truth for an attempt; an executor's own view (a batch queue) only adds
//     to them (a pending reason, a job gone without a final status).
//   - Unknown is not failed: an executor that cannot tell (a call that
//     timed out, a queue that did not answer) returns an error from Status
//     or an Uncertain launch, never a failed attempt; the controller waits
//     for the next Status to decide.
//   - Kill stops an attempt for good (tool, supervisor and whatever they
//     started), after its grace, and reports success only once nothing of
//     the attempt runs; a kill that cannot be confirmed is an error and is
//     asked again.
package executor

import (
	"context"
	"time"

	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/wire"
)

// Executor starts, watches and kills the attempts of one node. inst is the
// node's checked wrapper installation (its path and absolute work_dir), as
// the controller's last pull found it; every method may be called from
// several goroutines, one call per lane (launch, pull, collect) at a time.
type Executor interface {
	// Launch starts the attempt of each item (its task directory, spec,
	// launch.json and api_mode environment) and returns one Launched per
	// item, in the items' order. The environment holds secrets: they go
	// to the supervisor without touching argv, logs or a disk another user
	// can read. Launch returns once each attempt is started, refused, or
	// in doubt; it never waits for an attempt to end.
	Launch(ctx context.Context, inst *nodes.Installed, items []wire.LaunchItem) []Launched

	// Status reads the attempts of this node in one call (per tick, never
	// per task) and the node's facts, as `wrapper status` prints them: the
	// task directories' status files, with whatever the executor adds
	// (why a job waits). An error means the node's state is unknown for
	// this tick; a *ReplyError among it means the installation answered
	// wrongly and should be checked again before the next call.
	Status(ctx context.Context, inst *nodes.Installed, q Query) (*wire.NodeStatus, error)

	// Kill stops each attempt and returns one Killed per kill, in order.
	// A Killed without Err means the attempt runs no more (or was never
	// this node's to kill: Elsewhere).
	Kill(ctx context.Context, inst *nodes.Installed, kills []Kill) []Killed

	// Close releases what the executor holds open between calls (a status
	// conversation); the node's transport is closed by its owner.
	Close()
}

// Watcher is an Executor that can also stream the node's changes between
// two Status calls (`wrapper watch`): line gets each line of the stream
// (a wire.Frame) and returns false to end it. Watch returns when ctx ends,
// the stream drops or line returns false. An executor without it is only
// pulled, every poll_interval.
type Watcher interface {
	Watch(ctx context.Context, inst *nodes.Installed, beat time.Duration, line func([]byte) bool) error
}

// Launched is the outcome of one item of a Launch. Exactly one of Run, Err
// and Uncertain is set.
type Launched struct {
	// Run is the supervisor's reply once it is up: the attempt started.
	Run *wire.RunReply
	// Err says why the attempt surely did not start (the node refused it):
	// the controller may launch it again, elsewhere.
	Err error
	// Uncertain says why the executor cannot tell whether the attempt
	// started (the call timed out or broke, a supervisor already holds
	// the task directory): the next Status decides, and the task is not
	// launched anywhere meanwhile.
	Uncertain error
	// SlurmJob is the id of the Slurm job of a submitted attempt.
	SlurmJob string
}

// Query is what one Status call asks about.
type Query struct {
	// Projects are the projects served (all when empty).
	Projects []string
	// Live lists only the node's live attempts and the Named tasks
	// ("project/ID"), not every task directory; Tags are the names'
	// change tags of the last reply (see wire.LiveRequest).
	Live        bool
	Named, Tags []string
	// Running, when not nil, are the tasks ("project/ID") the database
	// has claimed or running on this node as the call goes out: the
	// attempt of any other task was ended by dispatch (cancelled,
	// stopped, preempted, found hung), whatever its node says of how it
	// ended, and whichever controller asked. nil: the database was not
	// read.
	Running []string
}

// Kill is one attempt to stop.
type Kill struct {
	// Dir is the attempt's absolute task directory.
	Dir string
	// Grace is the time between asking the attempt to end (SIGTERM, a
	// batch system's cancel) and forcing it (SIGKILL).
	Grace time.Duration
}

// Killed is the outcome of one Kill.
type Killed struct {
	// Err says why the attempt may still run; the kill is asked again.
	Err error
	// Elsewhere is set when the directory now holds another node's
	// attempt: nothing of this node's was left there to kill.
	Elsewhere bool
	// Reply is the executor's reply for the attempt (`wrapper kill`'s JSON:
	// its final status when it ended under the kill), or nil.
	Reply []byte
}

// ReplyError is a call that ran but did not answer as it should (a reply
// not understood, a failing exit): the node's installation is in doubt.
type ReplyError struct{ Msg string }

func (e *ReplyError) Error() string { return e.Msg }
