package controller

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/nodes/sshnode"
	"github.com/dispatch-tool/dispatch/store"
	"github.com/dispatch-tool/dispatch/wire"
)

// A node may be unable to list one project's tasks directory: an
// unconfined task can `chmod 000` the directory above its own. Its status
// reply then names that project unlisted (wire.NodeStatus.Unlisted) and
// lists the others as usual. The tick takes the project's attempts that
// the reply lacks for unknown, neither gone nor crashed (applier.task),
// for node_offline_timeout from when the node first named the project
// unlisted (or the attempt last beat, if later): then they are lost, as
// an offline node's are (unlistedGone). The node's other projects go on,
// no new task of the project is placed there (decideClaims), and the
// operator is told once per node and project, in a warning event, until a
// full listing lists it again. The attempts' supervisors cannot beat
// meanwhile (they write in that directory): such an attempt is not seen
// (see unseen.go), and the first reply that sees it again, with the beat
// from before, does not make it hung.

// unlistedKey is a project a node could not list.
type unlistedKey struct{ node, project string }

// decideUnlisted returns, for the served projects, when each node first
// named each unlisted once this tick is recorded, and a warning event for
// each one new (since: the last recorded tick's). It is cleared only by a
// full listing that lists the project: a live one may read the named
// tasks of a tasks/ it cannot list (mode --x) and not name it. A node
// without a full word this tick (its pull failed, was skipped or came from
// its stream) keeps what it had; one no longer pulled has none.
func decideUnlisted(pulls map[string]*pull, since map[unlistedKey]time.Time, served map[string]bool, now time.Time) (map[unlistedKey]time.Time, []store.Event) {
	out := map[unlistedKey]time.Time{}
	for k, at := range since {
		if p := pulls[k.node]; p != nil && served[k.project] && !listedAgain(p, k.project) {
			out[k] = at
		}
	}
	var events []store.Event
	for _, node := range slices.Sorted(maps.Keys(pulls)) {
		p := pulls[node]
		if !heard(p) {
			continue
		}
		for _, project := range slices.Sorted(maps.Keys(p.unlisted)) {
			k := unlistedKey{node, project}
			if _, known := out[k]; known || !served[project] {
				continue
			}
			out[k] = now
			events = append(events, store.Event{Project: project, Node: node, Kind: "warning",
				Message: unlistedMessage(node, project, p.unlisted[project])})
		}
	}
	return out, events
}

// listedAgain reports whether p is a full listing that lists project.
func listedAgain(p *pull, project string) bool {
	_, unlisted := p.unlisted[project]
	return heard(p) && p.status.Listing != wire.ListingLive && !unlisted
}

// unlistedMessage is the warning for a project node cannot list: the
// directory is the controller's own path for it (the node's word is not
// pasted into a command), quoted for a shell, and the chmod advice is
// given only for a permission error.
func unlistedMessage(node, project string, u wire.Unlisted) string {
	msg := fmt.Sprintf("node %s cannot list the tasks of project %s (%s): its attempts there are unknown until it can, and lost (run again) after node_offline_timeout; one that ends meanwhile cannot record how it ended; no new task of %s starts there; its other projects go on", node, project, u.Error, project)
	if !strings.Contains(strings.ToLower(u.Error), "permission denied") {
		return msg + ". Fix: on " + node + ", see to that directory (" + quotedPath(u.Dir) + ")"
	}
	return msg + ". Fix: on " + node + ", give the node's user that directory back: chmod 700 " + quotedPath(u.Dir)
}

// quotedPath is dir as a shell word: a leading "~/" stays outside the
// quotes, so that the shell expands it.
func quotedPath(dir string) string {
	if rest, ok := strings.CutPrefix(dir, "~/"); ok {
		return "~/" + sshnode.ShellQuote([]string{rest})
	}
	return sshnode.ShellQuote([]string{dir})
}

// unlistedGone handles an attempt of t the reply lacks while its node
// cannot list its project (since: first named so): unknown until
// node_offline_timeout has passed since then, or since the attempt last
// beat if later (a live listing may still read it), then lost as an
// offline node's attempt is.
func (a *applier) unlistedGone(t *domain.Task, u wire.Unlisted) {
	since, ok := a.unlisted[unlistedKey{t.Node, t.Project}]
	if !ok {
		since = a.now
	}
	from := later(since, t.HeartbeatAt)
	timeout := a.c.config().Controller.NodeOfflineTimeout
	if a.now.Sub(from) < timeout {
		a.notSeen(t)
		a.dueAt(from.Add(timeout))
		return
	}
	a.lose(t, fmt.Sprintf("node %s cannot list the tasks of project %s since %s: %s", t.Node, t.Project, since.Format(time.RFC3339), u.Error))
}

// heard reports whether p is a node's whole word of this tick: a status
// call that answered (not one the stream stood in for).
func heard(p *pull) bool {
	return !p.skipped && p.err == nil && !p.partial && p.status != nil
}
