package main

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/dispatch-tool/dispatch/internal/termtext"
	"github.com/dispatch-tool/dispatch/store"
)

// offlineRemindMax is the longest a start stays silent while none of its
// nodes can be reached (issue 39: it said so once, then nothing for 14
// minutes).
const offlineRemindMax = time.Minute

// allOffline returns the nodes start uses (used; nil: every node) when
// every one of them was found offline since start began, sorted by name;
// nil when one is online or not found yet.
func allOffline(ns []store.Node, used map[string]bool, start time.Time) []store.Node {
	var off []store.Node
	for _, n := range ns {
		if used != nil && !used[n.Name] {
			continue
		}
		if n.UpdatedAt.Before(start) || n.State != store.NodeOffline {
			return nil
		}
		off = append(off, n)
	}
	if len(off) == 0 || (used != nil && len(off) < len(used)) {
		return nil
	}
	slices.SortFunc(off, func(a, b store.Node) int { return strings.Compare(a.Name, b.Name) })
	return off
}

// offlineDue decides whether start says again that no node is reachable:
// first is when it found them all offline (and said so, node by node),
// last when it last said so. The silence between two reminders doubles
// from one poll up to offlineRemindMax, so that a short outage is told
// often and a long one every minute.
func offlineDue(first, last, now time.Time, poll time.Duration) bool {
	gap := min(max(last.Sub(first), poll), offlineRemindMax)
	return now.Sub(last) >= gap
}

// offlineLines are the reminder: how long no node has been reachable,
// what dispatch does meanwhile and how to stop it, then each node with its
// last error.
func offlineLines(off []store.Node, now time.Time, poll time.Duration) []string {
	var since time.Time
	for _, n := range off {
		if n.OfflineSince.After(since) {
			since = n.OfflineSince
		}
	}
	out := []string{fmt.Sprintf("no node is reachable (for %s); dispatch tries each again every %s and starts the tasks once one answers (Ctrl-C stops it; tasks already on a node keep running there):",
		now.Sub(since).Round(time.Second), poll)}
	for _, n := range off {
		msg, _ := nodeFix(n.State, n.LastError)
		msg = strings.TrimPrefix(msg, "node "+n.Name+" ") // the line names it
		out = append(out, fmt.Sprintf("  %s (offline since %s): %s", n.Name, n.OfflineSince.Local().Format("15:04:05"), termtext.Clean(msg)))
	}
	return out
}

// offlineReminder says again, now and then, that none of start's nodes
// can be reached (see offlineDue); ns are the nodes' records.
func (p *progress) offlineReminder(ns []store.Node, now time.Time) {
	off := allOffline(ns, p.nodes, p.start)
	switch {
	case off == nil:
		p.offlineFirst = time.Time{}
		return
	case p.offlineFirst.IsZero():
		// nodeProblems has just said so, node by node.
		p.offlineFirst, p.offlineLast = now, now
		return
	case !offlineDue(p.offlineFirst, p.offlineLast, now, p.poll):
		return
	}
	p.offlineLast = now
	lines := offlineLines(off, now, p.poll)
	fmt.Fprintf(p.e.out, "%s %s\n", p.e.styles.dim.Render(now.Format("15:04:05")), p.e.styles.warn.Render(lines[0]))
	for _, l := range lines[1:] {
		fmt.Fprintln(p.e.out, l)
	}
}
