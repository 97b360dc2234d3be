package controller

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
)

// TestDecideUnlisted: a project a node cannot list is said once per node
// and project, in a warning event, while the node's replies keep naming
// it; a pull that says nothing new of the node (failed, skipped, a
// stream's) keeps it said, and a reply that lists it again forgets it, so
// that the next time is said again.
func TestDecideUnlisted(t *testing.T) {
	p1 := unlistedKey{"n1", "p"}
	served := map[string]bool{"p": true, "q": true}
	for _, tc := range []struct {
		name   string
		pulls  map[string]any
		skip   bool // n1's pull skipped (still busy)
		said   []unlistedKey
		want   string // "node/project ..." after the tick
		events string // "node project, ..."
	}{
		{name: "new: said", pulls: map[string]any{"n1": unlistedReply{unlisted: []string{"p"}}},
			want: "n1/p", events: "n1 p"},
		{name: "said before: not again", pulls: map[string]any{"n1": unlistedReply{unlisted: []string{"p"}}},
			said: []unlistedKey{p1}, want: "n1/p"},
		{name: "listed again: forgotten", pulls: map[string]any{"n1": unlistedReply{}}, said: []unlistedKey{p1}},
		{name: "a failed pull keeps it", pulls: map[string]any{"n1": errors.New("down")}, said: []unlistedKey{p1}, want: "n1/p"},
		{name: "a skipped pull keeps it", pulls: map[string]any{"n1": unlistedReply{}}, skip: true, said: []unlistedKey{p1}, want: "n1/p"},
		{name: "a stream's pull keeps it", pulls: map[string]any{"n1": streamSaid{}}, said: []unlistedKey{p1}, want: "n1/p"},
		{name: "a node no longer pulled drops it", pulls: map[string]any{"n2": unlistedReply{}}, said: []unlistedKey{p1}},
		{name: "a project not served is not said", pulls: map[string]any{"n1": unlistedReply{unlisted: []string{"other"}}}},
		{name: "each node and project once, in order",
			pulls: map[string]any{"n2": unlistedReply{unlisted: []string{"q", "p"}}, "n1": unlistedReply{unlisted: []string{"q", "p"}}},
			said:  []unlistedKey{p1}, want: "n1/p n1/q n2/p n2/q", events: "n1 q, n2 p, n2 q"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pulls := nodeSays(tc.pulls)
			if tc.skip {
				pulls["n1"].skipped = true
			}
			said := map[unlistedKey]bool{}
			for _, k := range tc.said {
				said[k] = true
			}
			now, events := decideUnlisted(pulls, said, served)
			var got []string
			for _, k := range slices.SortedFunc(maps.Keys(now), func(a, b unlistedKey) int {
				return strings.Compare(a.node+"/"+a.project, b.node+"/"+b.project)
			}) {
				got = append(got, k.node+"/"+k.project)
			}
			if strings.Join(got, " ") != tc.want {
				t.Errorf("unlisted after the tick %q, want %q", strings.Join(got, " "), tc.want)
			}
			var evs []string
			for _, ev := range events {
				evs = append(evs, ev.Node+" "+ev.Project)
				if ev.Kind != "warning" || !strings.Contains(ev.Message, "chmod 700 /w/"+ev.Project+"/tasks") {
					t.Errorf("event %+v: want a warning naming the fix", ev)
				}
			}
			if strings.Join(evs, ", ") != tc.events {
				t.Errorf("events %q, want %q", strings.Join(evs, ", "), tc.events)
			}
		})
	}
}
