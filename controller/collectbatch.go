package controller

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/store"
)

// testHookCollectTx, when set, is told of each transaction that records
// collections: how many attempts it held and how it ended.
var testHookCollectTx func(records int, err error)

// txFunc is what a collection leaves to record, run in a transaction.
type txFunc func(tx *store.Tx) error

// collected is the outcome of one attempt's collection: what to record of
// it and, when it failed, the error the tick reports.
type collected struct {
	task   string // taskKey, held in inCollection until recorded
	record txFunc
	err    error
}

// collectBatch gathers what the nodes of a tick collected so that it is
// recorded in one transaction (close). A node that outlives the tick's
// wait for the collections records its own when it ends.
type collectBatch struct {
	// mu guards closed and done.
	mu     sync.Mutex
	closed bool
	done   []collected
}

// add keeps a node's outcomes for close, or records them at once when the
// tick has already closed the batch.
func (b *collectBatch) add(ctx context.Context, c *Controller, done []collected) {
	b.mu.Lock()
	if !b.closed {
		b.done = append(b.done, done...)
		b.mu.Unlock()
		return
	}
	b.mu.Unlock()
	if err := errors.Join(c.recordCollected(ctx, done)...); err != nil {
		c.log.Warn("collect outputs", "err", err)
	}
}

// close records what the batch holds in one transaction and returns the
// errors of the collections and of recording them.
func (b *collectBatch) close(ctx context.Context, c *Controller) []error {
	b.mu.Lock()
	b.closed = true
	done := b.done
	b.done = nil
	b.mu.Unlock()
	return c.recordCollected(ctx, done)
}

// recordCollected writes done in one transaction. When that fails, each
// attempt is recorded in a transaction of its own, so that one whose
// record fails holds up no other. The tasks leave inCollection once
// recorded (or not: collected again next tick).
func (c *Controller) recordCollected(ctx context.Context, done []collected) []error {
	var errs []error
	defer func() {
		for _, d := range done {
			c.inCollection.Delete(d.task)
		}
	}()
	var records []txFunc
	for _, d := range done {
		if d.err != nil {
			errs = append(errs, d.err)
		}
		if d.record != nil {
			records = append(records, d.record)
		}
	}
	if len(records) == 0 {
		return errs
	}
	err := c.st.Update(ctx, func(tx *store.Tx) error {
		for _, rec := range records {
			if err := rec(tx); err != nil {
				return err
			}
		}
		return nil
	})
	if testHookCollectTx != nil {
		testHookCollectTx(len(records), err)
	}
	if err == nil || len(records) == 1 {
		return append(errs, err)
	}
	for _, rec := range records {
		if err := c.st.Update(ctx, func(tx *store.Tx) error { return rec(tx) }); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// collectNode collects the finished attempts runs of node n: in one
// stream when its transport can (see collectStream), else one by one.
// p is the node's pull of this tick.
func (c *Controller) collectNode(ctx context.Context, n *nodeRuntime, runs []domain.Attempt, roles map[string]collectRole, p *pull, round *roomRound) []collected {
	var todo []domain.Attempt
	for _, r := range runs {
		if c.collectWait(collectKey(r)) {
			continue // a failed try waits a little before the next
		}
		c.inCollection.Store(taskKey(r.Project, r.Task), true)
		todo = append(todo, r)
	}
	if ef, ok := n.tr.(nodes.ExecToer); ok && len(todo) > 0 {
		return c.collectStream(ctx, n, ef, todo, roles, round)
	}
	out := make([]collected, 0, len(todo))
	for _, r := range todo {
		role := roles[collectKey(r)]
		rec, err := c.collect(ctx, n, r, role, p, round)
		out = append(out, c.outcome(ctx, r, role.current, rec, err))
	}
	return out
}

// outcome is what the collection of r, which left rec to record and
// failed with err (or not), records and reports.
func (c *Controller) outcome(ctx context.Context, r domain.Attempt, current bool, rec txFunc, err error) collected {
	d := collected{task: taskKey(r.Project, r.Task), record: rec}
	if ctx.Err() != nil {
		return d
	}
	if errors.Is(err, errNotReached) {
		return collected{task: d.task}
	}
	if errors.Is(err, errRoomBusy) {
		c.waitingNow.Store(collectKey(r), true)
		d.record = c.waitingForRoom(ctx, r, current, err)
		return d
	}
	if _, waited := c.roomWaits.LoadAndDelete(collectKey(r)); waited && err == nil && current {
		d.record = func(tx *store.Tx) error {
			if rec != nil {
				if err := rec(tx); err != nil {
					return err
				}
			}
			return clearWarning(ctx, tx, r)
		}
	}
	if err == nil {
		return d
	}
	failed := c.collectFailed(ctx, collectKey(r), r, current, err)
	d.record = func(tx *store.Tx) error {
		if rec != nil {
			if err := rec(tx); err != nil {
				return err
			}
		}
		return failed(tx)
	}
	d.err = fmt.Errorf("collect %s/%s attempt %d from %s: %w", r.Project, r.Task, r.Attempt, r.Node, err)
	return d
}

// collectRole is what collectAll read of an attempt to collect: whether
// it is its task's current attempt, and whether that task starts from a
// commit (git-native, see gitTask).
type collectRole struct{ current, based bool }

func collectKey(r domain.Attempt) string {
	return fmt.Sprintf("%s#%d", taskKey(r.Project, r.Task), r.Attempt)
}

// goneRecord records that nothing of attempt r is left on its node (its
// directory was reused by another attempt or removed).
func goneRecord(ctx context.Context, r domain.Attempt) txFunc {
	return func(tx *store.Tx) error {
		if err := tx.Event(ctx, store.Event{Project: r.Project, Task: r.Task, Attempt: r.Attempt, Kind: "warning",
			Node: r.Node, Message: "files of this attempt are gone from the node; nothing collected"}); err != nil {
			return err
		}
		return tx.SetAttempt(ctx, r.Project, r.Task, r.Attempt, store.AttemptPatch{CollectedAt: new(tx.Now())})
	}
}

// collectedRecord is what to record of attempt r once its files are in
// place: its manifest (when current) and that it is collected. A refused
// output/ records an empty manifest and is returned as the collection's
// failure.
func (c *Controller) collectedRecord(ctx context.Context, r domain.Attempt, current bool, manifest []store.File, refused error) (txFunc, error) {
	if refused != nil {
		return func(tx *store.Tx) error {
			return tx.ReplaceFiles(ctx, r.Project, r.Task, r.Attempt, nil)
		}, refused
	}
	return func(tx *store.Tx) error {
		if current {
			if err := tx.ReplaceFiles(ctx, r.Project, r.Task, r.Attempt, manifest); err != nil {
				return err
			}
			if err := clearCollectWarning(ctx, tx, r); err != nil {
				return err
			}
		}
		return tx.SetAttempt(ctx, r.Project, r.Task, r.Attempt, store.AttemptPatch{CollectedAt: new(tx.Now())})
	}, nil
}
