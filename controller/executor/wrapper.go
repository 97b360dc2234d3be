package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/dispatch-tool/dispatch/internal/crashpoint"
	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/policy"
	"github.com/dispatch-tool/dispatch/wire"
)

// Wrapper is the executor of an SSH or local node: each attempt's
// supervisor is started detached by `wrapper run`, the status files are
// read by `wrapper status` (over the node's status conversation when one
// can be held: statusconv.go) and streamed by `wrapper watch`, and an
// attempt is killed by `wrapper kill`, all over the node's transport. A
// batch system whose login host reaches the task directories can use one
// for what it does not change (the status files).
type Wrapper struct {
	tr nodes.Transport
	// node is the node's name: its wrapper acts on that node's attempts
	// alone (--node), as the work_dir may hold another node's too.
	node string
	// timeout bounds one call (the controller's call timeout, which a
	// reload may change).
	timeout func() time.Duration
	conv    heldConv
	// req is the last request over conv.
	req lastRequest
	// runs is the node's launch conversation (`run --serve`).
	runs heldConv
	// collects is the node's collect conversation (`collect --serve`,
	// collectconv.go).
	collects heldConv
	// BeforeRun, when set, is called with each `wrapper run` document
	// just before it is sent (the tests break the session there).
	BeforeRun func(bin string, doc []byte)
}

var (
	_ Executor = (*Wrapper)(nil)
	_ Watcher  = (*Wrapper)(nil)
)

// NewWrapper returns the executor of node over tr, each call bounded by
// timeout() (grown with a launch's size, a kill's grace).
func NewWrapper(tr nodes.Transport, node string, timeout func() time.Duration) *Wrapper {
	return &Wrapper{tr: tr, node: node, timeout: timeout, conv: heldConv{argv: statusArgv}, runs: heldConv{argv: runArgv},
		collects: heldConv{argv: collectArgv}}
}

const (
	// MaxLaunchDoc bounds one launch document (the wrapper takes up to
	// 64 MiB on stdin); a spec is at most 8 MiB.
	MaxLaunchDoc = 32 << 20
	// minLaunchRate is the slowest link a launch call's deadline allows
	// for: a document's bytes are not cut off for taking long to send.
	minLaunchRate = 128 << 10
)

// Launch starts the items in as few `wrapper run` calls as their size
// allows (one document on stdin each, secrets only in memory). It is
// idempotent: the wrapper refuses a second live supervisor in a task
// directory, and a broken session leaves the launches uncertain, for the
// next pull to settle.
func (w *Wrapper) Launch(ctx context.Context, inst *nodes.Installed, items []wire.LaunchItem) []Launched {
	outs := make([]Launched, len(items))
	withSecrets := false
	for i := range items {
		withSecrets = withSecrets || len(items[i].Env) > 0
	}
	if withSecrets {
		// The secrets go to the wrapper on its stdin: check again that no
		// one else could have replaced it since the node was checked.
		cctx, cancel := context.WithTimeout(ctx, w.timeout())
		err := nodes.CheckWorkDir(cctx, w.tr, *inst)
		cancel()
		if err != nil {
			for i := range outs {
				outs[i].Err = err
			}
			return outs
		}
	}
	// One call per batch; a batch is cut where its specs would pass
	// MaxLaunchDoc, under the wrapper's limit on its stdin.
	for from := 0; from < len(items); {
		to, size := from, 0
		for to < len(items) && (to == from || size+launchItemSize(&items[to]) <= MaxLaunchDoc) {
			size += launchItemSize(&items[to])
			to++
		}
		w.runBatch(ctx, inst, items[from:to], outs[from:to])
		from = to
	}
	return outs
}

// launchItemSize is an item's share of the document: its JSON, whose
// escapes may make it several times the spec's size.
func launchItemSize(item *wire.LaunchItem) int {
	b, err := json.Marshal(item)
	if err != nil {
		return MaxLaunchDoc
	}
	return len(b)
}

// runBatch starts items in one `wrapper run` call and records each outcome
// in outs (the same length).
func (w *Wrapper) runBatch(ctx context.Context, inst *nodes.Installed, items []wire.LaunchItem, outs []Launched) {
	doc, err := json.Marshal(wire.LaunchBatch{Launches: items})
	if err != nil {
		for i := range outs {
			outs[i].Err = err
		}
		return
	}
	crashpoint.At(crashpoint.AfterPush)
	// A transport failure (node unreachable, deadline) leaves the launches
	// uncertain, for the next pull to settle: the wrapper may have started
	// them. The deadline grows with the batch: its bytes at the slowest
	// rate allowed, and the supervisors, up to launchParallel at a time.
	deadline := w.timeout()*time.Duration(1+len(items)/16) + time.Duration(len(doc)/minLaunchRate)*time.Second
	rctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	secrets := false
	for i := range items {
		secrets = secrets || len(items[i].Env) > 0
	}
	res, err := w.run(rctx, inst, doc, secrets)
	if err != nil {
		err = fmt.Errorf("run: %w", err)
		for i := range outs {
			if errors.Is(err, nodes.ErrUnreachable) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
				outs[i].Uncertain = err
			} else {
				outs[i].Err = err
			}
		}
		return
	}
	crashpoint.At(crashpoint.AfterRun)
	var reply wire.LaunchReply
	if res.ExitCode != 0 || json.Unmarshal(res.Stdout, &reply) != nil {
		// No answer we understand (the wrapper killed, a broken reply): the
		// supervisors may have started; the next pull decides.
		for i := range outs {
			outs[i].Uncertain = fmt.Errorf("wrapper run: %s", policy.ReplyError(res, nil))
		}
		return
	}
	byDir := map[string]wire.LaunchResult{}
	for _, r := range reply.Results {
		byDir[r.Dir] = r
	}
	for i := range items {
		outs[i] = launchResult(byDir, items[i].Dir)
	}
}

// launchResult reads the wrapper's result for the item of task directory
// dir.
func launchResult(byDir map[string]wire.LaunchResult, dir string) Launched {
	r, ok := byDir[dir]
	switch {
	case !ok:
		return Launched{Uncertain: errors.New("wrapper run: no result for this task")}
	case r.Run != nil && r.Run.PID > 0:
		return Launched{Run: r.Run}
	case r.Kind == wire.KindAlreadyRunning:
		// Another supervisor lives in the task directory: an earlier
		// launch of this attempt got through, or a stale attempt still
		// runs there.
		return Launched{Uncertain: errors.New(r.Error)}
	case r.Error != "":
		// The wrapper answered that it did not start the attempt.
		return Launched{Err: fmt.Errorf("wrapper run: %s", r.Error)}
	}
	return Launched{Uncertain: errors.New("wrapper run: an empty result")}
}

// KillSlack is what a kill may take beyond a call and the attempt's grace:
// the wrapper's margins for a supervisor that does not respond.
const KillSlack = 15 * time.Second

// Kill runs `wrapper kill` for each attempt in turn, each call with its own
// deadline: a frozen wrapper takes the grace, then twice the wrapper's 5 s
// margin, before kill has it dead.
func (w *Wrapper) Kill(ctx context.Context, inst *nodes.Installed, kills []Kill) []Killed {
	outs := make([]Killed, len(kills))
	for i, k := range kills {
		kctx, cancel := context.WithTimeout(ctx, w.timeout()+KillSlack+k.Grace)
		res, err := w.tr.Exec(kctx, []string{inst.Path, "kill", "--dir", k.Dir, "--grace", k.Grace.String(), "--node", w.node}, nil)
		cancel()
		switch {
		case err != nil:
			outs[i].Err = err
		case res.ExitCode != 0 && replyKind(res) == wire.KindOtherNode:
			outs[i].Elsewhere = true
		case res.ExitCode != 0:
			outs[i].Err = errors.New(policy.ReplyError(res, nil))
		default:
			outs[i].Reply = res.Stdout
		}
	}
	return outs
}

// Watch reads the node's `wrapper watch` stream, a frame a line.
func (w *Wrapper) Watch(ctx context.Context, inst *nodes.Installed, beat time.Duration, line func([]byte) bool) error {
	argv := []string{inst.Path, "watch", "--root", inst.WorkDir, "--node", w.node, "--beat", beat.String()}
	return w.tr.Stream(ctx, argv, line)
}

// Close closes the node's conversations, those open.
func (w *Wrapper) Close() { w.conv.close(); w.runs.close(); w.collects.close() }

// run sends one launch document to inst's wrapper: over the node's launch
// conversation when one can be held (no new SSH session, no new wrapper
// process a tick), else with Exec. A conversation that failed before the
// document was written (ErrConversationClosed, ErrNotSent) falls back to
// Exec; one
// that failed after it is a transport failure: the wrapper may have
// started the attempts, and a second document could start one again
// after it ended, so the launches stay uncertain for the next pull.
//
// A document with secrets (an api_mode's environment) goes with Exec: to
// the wrapper binary Launch has just checked (nodes.CheckWorkDir), not to
// a process started from it ticks ago.
func (w *Wrapper) run(ctx context.Context, inst *nodes.Installed, doc []byte, secrets bool) (nodes.Result, error) {
	var conv nodes.Conversation
	var answered bool
	if !secrets {
		conv, answered = w.runs.open(ctx, w.tr, inst, w.node)
	}
	if w.BeforeRun != nil {
		w.BeforeRun(inst.Path, doc)
	}
	if conv != nil {
		line, err := conv.Call(ctx, doc, nodes.MaxExecOutput)
		var refused wire.ErrorReply
		if err == nil && json.Unmarshal(line, &refused) == nil && refused.Error != "" {
			// The wrapper refused the document and ended, as `run` exits
			// 1 with its error: the conversation is over.
			w.runs.done(conv, answered, errors.New(refused.Error))
			return nodes.Result{Stdout: line, ExitCode: 1}, nil
		}
		w.runs.done(conv, answered, err)
		switch {
		case err == nil:
			return nodes.Result{Stdout: line}, nil
		case !errors.Is(err, nodes.ErrConversationClosed) && !errors.Is(err, nodes.ErrNotSent):
			return nodes.Result{}, fmt.Errorf("%w: %w", nodes.ErrUnreachable, err)
		}
	}
	return w.tr.Exec(ctx, []string{inst.Path, "run"}, doc)
}

// replyKind is the kind of a wrapper's error reply, or "".
func replyKind(res nodes.Result) string {
	var e wire.ErrorReply
	if json.Unmarshal(res.Stdout, &e) != nil {
		return ""
	}
	return e.Kind
}
