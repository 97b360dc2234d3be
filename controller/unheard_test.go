package controller

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/store"
	"github.com/dispatch-tool/dispatch/wire"
)

// TestUnheardNodeAttemptSeenAgainIsNotHung: a node the controller cannot
// hear for a while (a laptop asleep, a VM paused: its pulls fail or are
// still out), past heartbeat_timeout (2m) and within node_offline_timeout
// (10m here), froze its supervisors too: its first reply shows each
// attempt's beat from before. That used to fail every attempt there as
// hung, killed and retried; the hung clock now counts from the last tick
// that did not hear the node, as for an attempt taken for unknown. A
// stream's partial pull hears the node (it only did not name the attempt)
// and gives no reprieve. A node that answers every other pull keeps a
// truly hung attempt alive no longer than node_offline_timeout +
// heartbeat_timeout after its last beat. Ticks come every 30s from the
// last beat (beat); the supervisor never beats again.
func TestUnheardNodeAttemptSeenAgainIsNotHung(t *testing.T) {
	down := errors.New("dial tcp: connect: no route to host")
	seen := runningStatus("S01", 1, "1", true)
	awaiting := wire.TaskStatus{Project: "p", Task: "S01", Heartbeat: "1", Alive: true, StatusError: "status.json missing"}
	stream := streamSaid{}
	times := func(n int, w any) []any {
		out := make([]any, n)
		for i := range out {
			out[i] = w
		}
		return out
	}
	then := func(parts ...[]any) []any {
		var out []any
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	var flapping []any
	for range 15 {
		flapping = append(flapping, down, []wire.TaskStatus{seen})
	}
	for _, tc := range []struct {
		name  string
		words []any         // n1's word at beat+30s, beat+1m, ...
		hung  time.Duration // after beat, when first failed as hung; 0: never
	}{
		{name: "heard throughout: hung after heartbeat_timeout",
			words: times(8, []wire.TaskStatus{seen}), hung: 2 * time.Minute},
		{name: "pulls failed 3m, then the beat from before: hung 2m after the last failed one, not at once",
			words: then(times(6, down), times(8, []wire.TaskStatus{seen})), hung: 5 * time.Minute},
		{name: "its calls still out 3m, then the beat from before: the same",
			words: then(times(6, stillOut{}), times(8, []wire.TaskStatus{seen})), hung: 5 * time.Minute},
		{name: "pulls failed 3m, then its status.json unreadable: awaited, the same",
			words: then(times(6, down), times(8, []wire.TaskStatus{awaiting})), hung: 5 * time.Minute},
		{name: "pulls failed 3m, then it beats: running",
			words: then(times(6, down), times(8, []wire.TaskStatus{runningStatus("S01", 1, "2", true)}))},
		{name: "heard through its stream 3m, which did not name it: no reprieve",
			words: then(times(6, stream), times(8, []wire.TaskStatus{seen})), hung: 3*time.Minute + 30*time.Second},
		{name: "flapping: hung node_offline_timeout + heartbeat_timeout after its last beat",
			words: flapping, hung: 12 * time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := decider(t, decideNodes)
			beat := t0
			got := hungAt(t, c, beat, tc.words)
			if got.IsZero() != (tc.hung == 0) || !got.IsZero() && !got.Equal(beat.Add(tc.hung)) {
				t.Fatalf("failed as hung %s, want %s", whenHung(beat, got), whenHung(beat, beat.Add(tc.hung)))
			}
		})
	}
}

// whenHung says when at is, after beat; "never" for the zero time.
func whenHung(beat, at time.Time) string {
	if at.IsZero() || at.Equal(beat) {
		return "never"
	}
	return "at beat+" + at.Sub(beat).String()
}

// hungAt runs a tick every 30s from beat+30s, n1 saying words in turn of
// attempt 1 of p/S01 running there, last beat ("1") at beat; it returns
// when the attempt was failed as hung, zero if it never was.
func hungAt(t *testing.T, c *Controller, beat time.Time, words []any) time.Time {
	t.Helper()
	prev := map[string]store.Node{}
	for i, w := range words {
		now := beat.Add(time.Duration(i+1) * 30 * time.Second)
		tk := decideTask("S01", domain.Running, "n1", 1)
		tk.HeartbeatAt = beat
		plan := c.decideApply(wholeSnapshot([]domain.Task{tk}, projectFacts{}, nil),
			nodeSays(map[string]any{"n1": w}), prev, nil, now)
		c.unlistedSince, c.unseenAt = plan.unlisted, plan.unseen
		for _, n := range plan.nodes {
			prev[n.Name] = n
		}
		for _, o := range plan.ops {
			if s := o.String(); strings.Contains(s, "S01 running→failed: attempt 1 failed (hung)") {
				return now
			}
			if s := o.String(); strings.Contains(s, "running→") {
				t.Fatalf("at beat+%s: %s, want running or hung", now.Sub(beat), s)
			}
		}
	}
	return time.Time{}
}

// TestUncollectedOutputsWaitForTheOfflineTimeout: a completed attempt whose
// outputs are not collected yet (a collection waiting for room, a large
// transfer) is requeued only once its node has been offline for
// node_offline_timeout (10m here), counted from its first failed pull. A
// node online until then has no offline time recorded, and it was counted
// from the controller's start: a controller running for an hour requeued
// the finished work at the node's first failed pull.
func TestUncollectedOutputsWaitForTheOfflineTimeout(t *testing.T) {
	down := errors.New("dial tcp: connect: no route to host")
	c := decider(t, decideNodes)
	c.started = t0.Add(-time.Hour)
	prev := map[string]store.Node{}
	for i := range 25 {
		now := t0.Add(time.Duration(i) * 30 * time.Second)
		tk := decideTask("S01", domain.Completed, "n1", 1)
		plan := c.decideApply(wholeSnapshot([]domain.Task{tk}, projectFacts{}, nil), nodeSays(map[string]any{"n1": down}), prev, nil, now)
		for _, n := range plan.nodes {
			prev[n.Name] = n
		}
		for _, o := range plan.ops {
			if s := o.String(); strings.Contains(s, "completed→pending") {
				if at := now.Sub(t0); at != 10*time.Minute {
					t.Fatalf("requeued %s after the node's first failed pull (%s), want after node_offline_timeout (10m)", at, s)
				}
				return
			}
		}
	}
	t.Fatal("never requeued while its node stayed offline")
}
