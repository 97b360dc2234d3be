package controller

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/store"
	"github.com/dispatch-tool/dispatch/wire"
)

// An attempt's output/ is collected once, after its final status, as the
// node lists it then: a process the task left behind (escaped from its
// process group) may go on writing there, and what it changes after the
// listing is not taken, nor is the attempt collected again for it. The
// collection records a warning naming what changed.

// errPastListing stops the copy of a file that has grown since it was
// listed: its listed size is what is collected.
var errPastListing = errors.New("the file grew past its listed size")

// listedWriter passes the first left bytes of a file and fails with
// errPastListing when more come, counting in refused those it was given
// past them (a floor of what the file has past them: the copy stops).
type listedWriter struct {
	w       io.Writer
	left    int64
	refused int64
}

func (l *listedWriter) Write(p []byte) (int, error) {
	if int64(len(p)) <= l.left {
		n, err := l.w.Write(p)
		l.left -= int64(n)
		return n, err
	}
	n, err := l.w.Write(p[:l.left])
	l.left -= int64(n)
	if err != nil {
		return n, err
	}
	l.refused += int64(len(p) - n)
	return n, errPastListing
}

// changedWarning is the warning of an attempt whose output/ changed while
// it was collected (the files changed, named up to wire.CollectMaxChanged),
// "" when nothing did.
func changedWarning(end wire.CollectEnd) string {
	if len(end.Changed) == 0 && end.More == 0 {
		return ""
	}
	var names []string
	for _, c := range end.Changed[:min(len(end.Changed), wire.CollectMaxChanged)] {
		switch {
		case c.Now < 0:
			names = append(names, fmt.Sprintf("%s (removed or replaced: not taken)", c.Path))
		case c.Now > c.Listed:
			names = append(names, fmt.Sprintf("%s (grew past the %d bytes listed: those taken)", c.Path, c.Listed))
		default:
			names = append(names, fmt.Sprintf("%s (%d bytes when listed, %d when taken)", c.Path, c.Listed, c.Now))
		}
	}
	if more := len(end.Changed) - len(names) + end.More; more > 0 {
		names = append(names, fmt.Sprintf("and %d more", more))
	}
	return "output/ changed after the attempt's final status, while it was collected (a process the task left behind " +
		"still writing there?): it is collected as it was listed, once; later changes on the node are not taken: " +
		strings.Join(names, ", ")
}

// logChange is how an attempt's task.log changed between the reading of
// its size for its collection and its copy, which takes no more than that
// size: grown past it (a process the task left behind still writing to
// it), the rest stays on the node; cut short of it (truncated), it is
// collected short.
type logChange struct {
	grew    int64  // bytes it had past the size read, left on the node
	atLeast bool   // grew is a floor: the log was replaced or cut before its size could be read again
	shrank  int64  // bytes it had fewer than the size read: collected short
	path    string // the log on its node
}

// logChangedWarning is the warning of an attempt whose task.log on node
// changed as lc says; "" when it did not.
func logChangedWarning(lc logChange, node string) string {
	switch {
	case lc.grew > 0:
		by := fmt.Sprintf("%d", lc.grew)
		if lc.atLeast {
			by = "at least " + by
		}
		return fmt.Sprintf("task.log grew by %s bytes after it was read for collection (a process the task left behind "+
			"still writing to it?): the log as it was read is collected, once; the rest stays on node %s at %s", by, node, lc.path)
	case lc.shrank > 0:
		return fmt.Sprintf("task.log shrank by %d bytes after its size was read for collection (truncated on node %s "+
			"at %s?): what it held when it was copied is collected, once, short of the size read", lc.shrank, node, lc.path)
	}
	return ""
}

// withChangedWarning is rec, recording as well the warnings of an attempt
// r whose output/ changed while it was collected, as end says, or whose
// task.log did, as lc says. A refused output/ is not collected: pass an
// end without its changes, the task.log's warning still holds.
func withChangedWarning(ctx context.Context, r domain.Attempt, end wire.CollectEnd, lc logChange, rec txFunc) txFunc {
	var msgs []string
	for _, m := range []string{changedWarning(end), logChangedWarning(lc, r.Node)} {
		if m != "" {
			msgs = append(msgs, m)
		}
	}
	if len(msgs) == 0 || rec == nil {
		return rec
	}
	return func(tx *store.Tx) error {
		if err := rec(tx); err != nil {
			return err
		}
		for _, m := range msgs {
			if err := tx.Event(ctx, store.Event{Project: r.Project, Task: r.Task, Attempt: r.Attempt, Kind: "warning", Node: r.Node, Message: m}); err != nil {
				return err
			}
		}
		return nil
	}
}
