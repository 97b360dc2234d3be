package controller

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"time"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/home"
	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/store"
)

// Transfers (SPEC §7 steps 6 and 7) are bounded by progress, not by a fixed
// deadline: a file of any size moves as long as bytes keep moving, and fails
// when none moved for transferIdle. A failed transfer is tried again a
// bounded number of times, with an event and a status line for each failure.

// maxPushTries is how many times a launch pushes its files (base tree,
// spec.md, launch.json) before the attempt fails with error_class start,
// which uses a retry.
const maxPushTries = 3

// maxCollectTries is how many times the collection of an attempt is tried
// before the controller gives up on it: the task is then failed with
// error_class collect (not retried: the operator decides, with `dispatch
// retry`).
const maxCollectTries = 3

// collectRetryWait is the pause, on the controller's clock, before the next
// try of a collection that failed.
const collectRetryWait = 10 * time.Second

// classCollect is the error_class of a task whose outputs could not be
// collected.
const classCollect = "collect"

// collectFreeMargin is the free space a collection must leave on the
// controller's disk under runs/: enough for the database and the report to
// go on being written, small enough that a nearly full laptop still
// collects small outputs (as nodes keep minDiskFree).
const collectFreeMargin = 64 << 20

// maxStatusSize caps a status.json read by the controller.
const maxStatusSize = 64 << 10

// diskFree returns the bytes available to the controller under dir; tests
// replace it.
var diskFree = func(dir string) (int64, error) {
	var fs syscall.Statfs_t
	if err := syscall.Statfs(dir, &fs); err != nil {
		return 0, err
	}
	return int64(fs.Bavail) * int64(fs.Bsize), nil
}

// transferIdle is how long a transfer may go without moving a byte before
// it fails: as long as one remote call may take (3 × ssh_connect_timeout, at
// least 5 s).
func (c *Controller) transferIdle() time.Duration { return c.callTimeout() }

var errOverQuota = errors.New("over the collect_max_bytes quota")

// limitWriter passes at most left bytes, then fails with errOverQuota.
type limitWriter struct {
	w    io.Writer
	left int64
}

func (l *limitWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > l.left {
		return 0, errOverQuota
	}
	n, err := l.w.Write(p)
	l.left -= int64(n)
	return n, err
}

// permanentError is a collection failure that trying again cannot fix.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

func permanent(err error) error { return &permanentError{err} }

func isPermanent(err error) bool {
	var pe *permanentError
	return errors.As(err, &pe) || errors.Is(err, errOverQuota) || errors.Is(err, nodes.ErrNotFollowed)
}

// checkQuota refuses an output/ over collect_max_files or collect_max_bytes,
// from the node's listing, before anything is copied.
func (c *Controller) checkQuota(files []nodes.FileInfo) error {
	var total int64
	for _, f := range files {
		if f.Mode.IsRegular() {
			total += f.Size
		}
	}
	return c.quotaError(len(files), total)
}

// quotaError refuses an output/ of files entries (regular files and
// links) and total bytes of regular files over the quotas.
func (c *Controller) quotaError(files int, total int64) error {
	q := c.config().Controller
	fix := "\n  fix: have the task write less into output/, or raise the quota under controller: in nodes.yaml, then `dispatch retry`"
	if files > q.CollectMaxFiles {
		return permanent(fmt.Errorf("output/ holds %d files, over collect_max_files (%d): nothing of it collected%s", files, q.CollectMaxFiles, fix))
	}
	if total > q.CollectMaxBytes {
		return permanent(fmt.Errorf("output/ holds %s, over collect_max_bytes (%s): nothing of it collected%s", mib(total), mib(q.CollectMaxBytes), fix))
	}
	return nil
}

// claimListed claims for room what a task.log of log bytes and an
// output/'s listing (files) need, together, before anything of them is
// copied; refused when the room has less left: as not enough free space,
// or as errRoomBusy when only what other collections hold is in the way.
// The sizes are the node's word: what is actually copied draws from the
// claim, and past it from the room.
func (c *Controller) claimListed(room *roomClaim, project string, log int64, files []nodes.FileInfo) error {
	need := log
	for _, f := range files {
		if f.Mode.IsRegular() {
			need += f.Size
		}
	}
	err := room.claim(need)
	if !errors.Is(err, errRoomSpent) {
		return err
	}
	what := "task.log and output/"
	switch {
	case log == need:
		what = "task.log"
	case log == 0:
		what = "output/"
	}
	free, others := room.view()
	return roomShort(home.RunsDir(c.opts.Home, project), what, need, free, others)
}

// freeRoom refuses to write need bytes of what under dir when that would
// leave less than collectFreeMargin free, and returns the bytes that may
// be written there.
func (c *Controller) freeRoom(dir, what string, need int64) (int64, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, err
	}
	free, err := diskFree(dir)
	if err != nil {
		return 0, fmt.Errorf("free space under %s: %w", dir, err)
	}
	return roomFrom(dir, what, need, free)
}

// roomFrom is freeRoom's decision over free, the bytes free under dir.
func roomFrom(dir, what string, need, free int64) (int64, error) {
	if free-need < collectFreeMargin {
		return 0, roomShort(dir, what, need, free, 0)
	}
	return free - collectFreeMargin, nil
}

// roomShort is the refusal of what, need bytes, under dir, whose disk has
// free bytes free, of which other collections in flight hold held: both
// figures the disk's and the ledger's, so the operator knows how much to
// free.
func roomShort(dir, what string, need, free, held int64) error {
	others := ""
	if held > 0 {
		others = fmt.Sprintf(", other collections in flight hold %s of it", mib(held))
	}
	return fmt.Errorf("not enough free space under %s: %s needs %s; the disk has %s free%s, and %s must stay free\n  fix: free space on the controller's disk; it is tried again",
		dir, what, mib(need), mib(free), others, mib(collectFreeMargin))
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// collectWait reports whether the collection of attempt key must wait
// after a failed try.
func (c *Controller) collectWait(key string) bool {
	v, ok := c.collectNext.Load(key)
	return ok && c.now().Before(v.(time.Time))
}

// collectFailed is what to record of a failed collection of run r: an event, and a
// warning on the task's status line; after maxCollectTries (or at once when
// trying again cannot help) it gives up: the run is settled, and the task,
// when this was its completed current attempt, fails with error_class
// collect.
func (c *Controller) collectFailed(ctx context.Context, key string, r domain.Attempt, current bool, cerr error) txFunc {
	msg := cerr.Error()
	return func(tx *store.Tx) error {
		tries, err := tx.CountEvents(ctx, r.Project, r.Task, r.Attempt, "collect_failed")
		if err != nil {
			return err
		}
		tries++
		t, err := tx.Task(ctx, r.Project, r.Task)
		if err != nil {
			return err
		}
		mine := current && t.Attempt == r.Attempt
		if !isPermanent(cerr) && tries < maxCollectTries {
			c.collectNext.Store(key, tx.Now().Add(collectRetryWait))
			note := fmt.Sprintf("collecting the outputs failed (try %d of %d), trying again in %s: %s", tries, maxCollectTries, collectRetryWait, msg)
			if err := tx.Event(ctx, store.Event{Project: r.Project, Task: r.Task, Attempt: r.Attempt, Kind: "collect_failed", Node: r.Node, Message: note}); err != nil {
				return err
			}
			if mine {
				return tx.SetTask(ctx, r.Project, r.Task, store.TaskPatch{Warning: new(note)})
			}
			return nil
		}
		c.collectNext.Delete(key)
		note := fmt.Sprintf("collecting the outputs failed (try %d of %d), giving up: %s", tries, maxCollectTries, msg)
		if isPermanent(cerr) {
			note = "collecting the outputs failed: " + msg
		}
		if err := tx.Event(ctx, store.Event{Project: r.Project, Task: r.Task, Attempt: r.Attempt, Kind: "collect_failed", Node: r.Node, Message: note}); err != nil {
			return err
		}
		set := store.AttemptPatch{CollectedAt: new(tx.Now())}
		if r.Status == domain.Completed {
			set.Status, set.ErrorClass, set.Error = new(domain.Failed), new(classCollect), new(note)
		}
		if err := tx.SetAttempt(ctx, r.Project, r.Task, r.Attempt, set); err != nil {
			return err
		}
		if !mine || t.Status != domain.Completed {
			return nil
		}
		_, _, err = tx.Transition(ctx, store.Change{Project: r.Project, Task: r.Task, From: domain.Completed, To: domain.Failed,
			Message: note, Set: store.TaskPatch{ErrorClass: new(classCollect), Error: new(note), Warning: new("")}})
		return err
	}
}

// clearCollectWarning removes the note of an earlier failed try once the
// collection succeeded.
func clearCollectWarning(ctx context.Context, tx *store.Tx, r domain.Attempt) error {
	n, err := tx.CountEvents(ctx, r.Project, r.Task, r.Attempt, "collect_failed")
	if err != nil || n == 0 {
		return err
	}
	return tx.SetTask(ctx, r.Project, r.Task, store.TaskPatch{Warning: new("")})
}

// clearWarning removes the status line's note of r's collection, when r
// is still its task's attempt.
func clearWarning(ctx context.Context, tx *store.Tx, r domain.Attempt) error {
	t, err := tx.Task(ctx, r.Project, r.Task)
	if err != nil || t.Attempt != r.Attempt {
		return err
	}
	return tx.SetTask(ctx, r.Project, r.Task, store.TaskPatch{Warning: new("")})
}

// waitingForRoomNow reports whether an attempt was refused room that
// other collections hold since the current collection round began, and
// is not being collected again: a stream past its claim's deadline is
// cut only then. An attempt that waited once and is now being collected
// (slowly, over a slow link) does not count, nor one whose node is down.
func (c *Controller) waitingForRoomNow() bool {
	waiting := false
	c.waitingNow.Range(func(any, any) bool {
		waiting = true
		return false
	})
	return waiting
}

// waitingForRoom is what to record of a collection of r refused only
// because other collections hold the room it needs: no try is counted
// (it is collected in a later round, as they end); a warning event when
// it starts waiting, and the note on its task's status line while it
// waits.
func (c *Controller) waitingForRoom(ctx context.Context, r domain.Attempt, current bool, wait error) txFunc {
	note := "collecting the outputs: " + wait.Error()
	prev, waited := c.roomWaits.Swap(collectKey(r), note)
	return func(tx *store.Tx) error {
		if !waited {
			if err := tx.Event(ctx, store.Event{Project: r.Project, Task: r.Task, Attempt: r.Attempt, Kind: "warning", Node: r.Node, Message: note}); err != nil {
				return err
			}
		}
		if !current || prev == note {
			return nil
		}
		t, err := tx.Task(ctx, r.Project, r.Task)
		if err != nil || t.Attempt != r.Attempt {
			return err
		}
		return tx.SetTask(ctx, r.Project, r.Task, store.TaskPatch{Warning: new(note)})
	}
}
