package executor

import (
	"encoding/json"
	"testing"

	"github.com/dispatch-tool/dispatch/wire"
)

// TestLastRequest: a status request is encoded again only when the query
// differs from the last one in what the request carries (a steady pull
// names the same tasks with the same tags every tick); what is sent is
// always what encoding the query would give.
func TestLastRequest(t *testing.T) {
	named := []string{"p/A", "p/B"}
	steady := Query{Projects: []string{"p"}, Live: true, Named: named, Tags: []string{"ta", "tb"}, Running: named}
	cases := []struct {
		name string
		q    Query
	}{
		{"first", steady},
		{"the same again", steady},
		{"the same in new slices, Running changed", Query{Projects: []string{"p"}, Live: true, Named: []string{"p/A", "p/B"},
			Tags: []string{"ta", "tb"}}},
		{"a tag changed", Query{Projects: []string{"p"}, Live: true, Named: named, Tags: []string{"ta", "tc"}}},
		{"no tags held", Query{Projects: []string{"p"}, Live: true, Named: named}},
		{"no task named (null)", Query{Projects: []string{"p"}, Live: true}},
		{"no task named ([])", Query{Projects: []string{"p"}, Live: true, Named: []string{}}},
		{"a full call", Query{Projects: []string{"p"}}},
		{"another project", Query{Projects: []string{"q"}}},
		{"every project", Query{}},
	}
	var last lastRequest
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req := wire.StatusRequest{Projects: tc.q.Projects, Live: tc.q.Live}
			if tc.q.Live {
				req.LiveRequest = wire.LiveRequest{Tasks: tc.q.Named, Tags: tc.q.Tags}
			}
			want, _ := json.Marshal(req)
			got, err := last.encode(tc.q)
			if err != nil || string(got) != string(want) {
				t.Errorf("encode = %s (%v), want %s", got, err, want)
			}
		})
	}
	last.encode(steady)
	if allocs := testing.AllocsPerRun(10, func() { last.encode(steady) }); allocs > 0 {
		t.Errorf("the same query encoded again with %.0f allocations, want its last request as it was", allocs)
	}
}
