package controller

import (
	"time"

	"github.com/dispatch-tool/dispatch/domain"
)

// An attempt's hung clock (heartbeat_timeout) runs from its last beat the
// controller saw. A tick that does not see the attempt cannot tell
// whether it beat: its node could not list its project (unlisted.go), or
// the node was not heard at all, its pull failed or still out (a laptop
// asleep, a VM paused, a network cut). A node asleep or paused freezes
// its supervisors too, and a supervisor cannot beat into a tasks
// directory made unreadable: the first reply once the node is back,
// before the next beat, shows the beat from before. So the hung clock
// counts from no earlier than the last tick that did not see the attempt
// (applier.unseen, kept in memory: a controller restart restarts every
// clock anyway). A stream's partial pull heard the node and says nothing
// of an attempt it does not name: no reprieve. The reprieve is at most
// node_offline_timeout past the last beat, so that a node that answers
// every other pull does not keep a truly hung attempt alive for ever: it
// is hung by node_offline_timeout + heartbeat_timeout after its last beat
// (a node unheard longer has its attempts lost anyway).

// notSeen notes that this tick did not see t's attempt (see above).
func (a *applier) notSeen(t *domain.Task) {
	a.unseen[attemptKey{t.Project, t.ID, t.Attempt}] = a.now
}

// hungSince is when t's hung clock starts: its last beat, no earlier than
// this controller's start, nor than the last tick that did not see the
// attempt, by at most node_offline_timeout (see above).
func (a *applier) hungSince(t *domain.Task) time.Time {
	from := later(t.HeartbeatAt, a.c.started)
	unseen := a.unseen[attemptKey{t.Project, t.ID, t.Attempt}]
	if most := from.Add(a.c.config().Controller.NodeOfflineTimeout); unseen.After(most) {
		unseen = most
	}
	return later(from, unseen)
}

// stillUnseen is the part of unseen (see applier.unseen) that can still
// matter at now: the attempts not seen less than heartbeat_timeout ago. A
// new map: the plan's, filled by the tick.
func stillUnseen(unseen map[attemptKey]time.Time, now time.Time, timeout time.Duration) map[attemptKey]time.Time {
	out := map[attemptKey]time.Time{}
	for k, at := range unseen {
		if now.Sub(at) < timeout {
			out[k] = at
		}
	}
	return out
}
