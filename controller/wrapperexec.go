package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/dispatch-tool/dispatch/controller/executor"
	"github.com/dispatch-tool/dispatch/internal/crashpoint"
	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/policy"
	"github.com/dispatch-tool/dispatch/wire"
)

// wrapperExec is the executor of an SSH or local node: each attempt's
// supervisor is started detached by `wrapper run`, the status files are
// read by `wrapper status` (over the node's status conversation when one
// can be held) and streamed by `wrapper watch`, and an attempt is killed
// by `wrapper kill`, all over the node's transport.
type wrapperExec struct {
	conn *nodeConn
	// timeout bounds one call (the controller's callTimeout, which a
	// reload may change).
	timeout func() time.Duration
}

var (
	_ executor.Executor = (*wrapperExec)(nil)
	_ executor.Watcher  = (*wrapperExec)(nil)
)

// newExecutor returns the executor of node cfg, reached over conn. Every
// node is a wrapper node today; a node of another kind (a batch system)
// gets its own executor here, from its cfg.
func (c *Controller) newExecutor(cfg nodes.Node, conn *nodeConn) executor.Executor {
	return &wrapperExec{conn: conn, timeout: c.callTimeout}
}

// newNodeRuntime returns the runtime of node cfg, reached over tr.
func (c *Controller) newNodeRuntime(cfg nodes.Node, tr nodes.Transport) *nodeRuntime {
	conn := &nodeConn{tr: tr, name: cfg.Name, checked: make(chan struct{}, 1)}
	return &nodeRuntime{cfg: cfg, nodeConn: conn, exec: c.newExecutor(cfg, conn)}
}

const (
	// maxLaunchDoc bounds one launch document (the wrapper takes up to
	// 64 MiB on stdin); a spec is at most 8 MiB.
	maxLaunchDoc = 32 << 20
	// minLaunchRate is the slowest link a launch call's deadline allows
	// for: a document's bytes are not cut off for taking long to send.
	minLaunchRate = 128 << 10
)

// Launch starts the items in as few `wrapper run` calls as their size
// allows (one document on stdin each, secrets only in memory). It is
// idempotent: the wrapper refuses a second live supervisor in a task
// directory, and a broken session leaves the launches uncertain, for the
// next pull to settle.
func (w *wrapperExec) Launch(ctx context.Context, inst *nodes.Installed, items []wire.LaunchItem) []executor.Launched {
	outs := make([]executor.Launched, len(items))
	withSecrets := false
	for i := range items {
		withSecrets = withSecrets || len(items[i].Env) > 0
	}
	if withSecrets {
		// The secrets go to the wrapper on its stdin: check again that no
		// one else could have replaced it since the node was checked.
		cctx, cancel := context.WithTimeout(ctx, w.timeout())
		err := nodes.CheckWorkDir(cctx, w.conn.tr, *inst)
		cancel()
		if err != nil {
			for i := range outs {
				outs[i].Err = err
			}
			return outs
		}
	}
	// One call per batch; a batch is cut where its specs would pass
	// maxLaunchDoc, under the wrapper's limit on its stdin.
	for from := 0; from < len(items); {
		to, size := from, 0
		for to < len(items) && (to == from || size+launchItemSize(&items[to]) <= maxLaunchDoc) {
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
		return maxLaunchDoc
	}
	return len(b)
}

// runBatch starts items in one `wrapper run` call and records each outcome
// in outs (the same length).
func (w *wrapperExec) runBatch(ctx context.Context, inst *nodes.Installed, items []wire.LaunchItem, outs []executor.Launched) {
	doc, err := json.Marshal(wire.LaunchBatch{Launches: items})
	if err != nil {
		for i := range outs {
			outs[i].Err = err
		}
		return
	}
	crashpoint.At(crashpoint.AfterPush)
	if testHookBeforeLaunch != nil {
		testHookBeforeLaunch(w.conn.name, inst.Path, doc)
	}
	// A transport failure (node unreachable, deadline) leaves the launches
	// uncertain, for the next pull to settle: the wrapper may have started
	// them. The deadline grows with the batch: its bytes at the slowest
	// rate allowed, and the supervisors, up to launchParallel at a time.
	deadline := w.timeout()*time.Duration(1+len(items)/16) + time.Duration(len(doc)/minLaunchRate)*time.Second
	rctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	res, err := w.conn.tr.Exec(rctx, []string{inst.Path, "run"}, doc)
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
func launchResult(byDir map[string]wire.LaunchResult, dir string) executor.Launched {
	r, ok := byDir[dir]
	switch {
	case !ok:
		return executor.Launched{Uncertain: errors.New("wrapper run: no result for this task")}
	case r.Run != nil && r.Run.PID > 0:
		return executor.Launched{Run: r.Run}
	case r.Kind == wire.KindAlreadyRunning:
		// Another supervisor lives in the task directory: an earlier
		// launch of this attempt got through, or a stale attempt still
		// runs there.
		return executor.Launched{Uncertain: errors.New(r.Error)}
	case r.Error != "":
		// The wrapper answered that it did not start the attempt.
		return executor.Launched{Err: fmt.Errorf("wrapper run: %s", r.Error)}
	}
	return executor.Launched{Uncertain: errors.New("wrapper run: an empty result")}
}

// Status makes the node's status call (see nodeStatus) over its
// conversation when one can be held, else, or when that fails, with Exec.
func (w *wrapperExec) Status(ctx context.Context, inst *nodes.Installed, q executor.Query) (*wire.NodeStatus, error) {
	return w.conn.askStatus(ctx, inst, q.Projects, q.Live, q.Named, q.Tags)
}

// Kill runs `wrapper kill` for each attempt in turn, each call with its own
// deadline: a frozen wrapper takes the grace, then twice the wrapper's 5 s
// margin, before kill has it dead.
func (w *wrapperExec) Kill(ctx context.Context, inst *nodes.Installed, kills []executor.Kill) []executor.Killed {
	outs := make([]executor.Killed, len(kills))
	for i, k := range kills {
		kctx, cancel := context.WithTimeout(ctx, w.timeout()+killSlack+k.Grace)
		res, err := w.conn.tr.Exec(kctx, []string{inst.Path, "kill", "--dir", k.Dir, "--grace", k.Grace.String(), "--node", w.conn.name}, nil)
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
func (w *wrapperExec) Watch(ctx context.Context, inst *nodes.Installed, beat time.Duration, line func([]byte) bool) error {
	argv := []string{inst.Path, "watch", "--root", inst.WorkDir, "--node", w.conn.name, "--beat", beat.String()}
	return w.conn.tr.Stream(ctx, argv, line)
}

// Close closes the node's status conversation, if one is open.
func (w *wrapperExec) Close() { w.conn.conv.close() }
