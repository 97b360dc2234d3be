package controller

import (
	"testing"

	"github.com/dispatch-tool/dispatch/store"
)

// TestDecideReuse: which tasks of a new run reuse their result, and why
// the others run again, decided over data alone.
func TestDecideReuse(t *testing.T) {
	ran := func(spec string, deps map[string]string) *inputs {
		return &inputs{Spec: spec, Base: "c1", Tool: "claude", Mode: "team", Env: []string{"KEY"}, Deps: deps}
	}
	now := func(spec string) inputs {
		return inputs{Spec: spec, Base: "c1", Tool: "claude", Mode: "team", Env: []string{"KEY"}}
	}
	done := func(id, spec string, deps []string, depResults map[string]string) reuseCandidate {
		return reuseCandidate{ID: id, DependsOn: deps, Status: store.Completed, FromRun: 1, Ran: ran(spec, depResults),
			Now: now(spec), Result: "attempt 1: " + id}
	}
	base := func() []reuseCandidate {
		return []reuseCandidate{
			done("S01", "a", nil, nil),
			done("S02", "b", []string{"S01"}, map[string]string{"S01": "attempt 1: S01"}),
			done("S03", "c", []string{"S02"}, map[string]string{"S02": "attempt 1: S02"}),
			done("S04", "d", nil, nil),
		}
	}
	for _, tc := range []struct {
		name  string
		edit  func(c []reuseCandidate) []reuseCandidate
		fresh string
		want  map[string]string // ID → reason; absent: reused
	}{
		{"nothing changed", func(c []reuseCandidate) []reuseCandidate { return c }, "", map[string]string{}},
		{"a spec changed: its dependents follow", func(c []reuseCandidate) []reuseCandidate {
			c[0].Now.Spec = "a2"
			return c
		}, "", map[string]string{"S01": "spec changed", "S02": "depends on S01", "S03": "depends on S02"}},
		{"the base moved", func(c []reuseCandidate) []reuseCandidate {
			c[3].Now.Base = "c2"
			return c
		}, "", map[string]string{"S04": "the repository's commit changed"}},
		{"the base tree changed", func(c []reuseCandidate) []reuseCandidate {
			c[3].Ran.Base, c[3].Now.Base = "tree:1", "tree:2"
			return c
		}, "", map[string]string{"S04": "base tree changed"}},
		{"tool and model", func(c []reuseCandidate) []reuseCandidate {
			c[0].Now.Tool = "codex"
			c[3].Now.Model = "big"
			return c
		}, "", map[string]string{"S01": "tool changed (claude → codex)", "S02": "depends on S01", "S03": "depends on S02",
			"S04": "model changed (default → big)"}},
		{"api_mode variables, not values", func(c []reuseCandidate) []reuseCandidate {
			c[3].Now.Env = []string{"KEY", "ORG"}
			return c
		}, "", map[string]string{"S04": "api_mode team's variables changed"}},
		{"api_mode gone", func(c []reuseCandidate) []reuseCandidate {
			c[3].ModeGone, c[3].Now.Env = true, nil
			return c
		}, "", map[string]string{"S04": "api_mode team is no longer in nodes.yaml"}},
		{"failed, new, not recorded", func(c []reuseCandidate) []reuseCandidate {
			c[0].Status = store.Failed
			c[3].Ran = nil
			return append(c, reuseCandidate{ID: "S05", New: true})
		}, "", map[string]string{"S01": "failed in run 1", "S02": "depends on S01", "S03": "depends on S02",
			"S04": "its last run recorded no inputs", "S05": "new task"}},
		{"a dependency's result differs from the one its dependent ran with", func(c []reuseCandidate) []reuseCandidate {
			c[1].Result = "attempt 2: S02" // retried after S03 had run
			return c
		}, "", map[string]string{"S03": "S02's result changed after it ran"}},
		{"--fresh", func(c []reuseCandidate) []reuseCandidate { return c }, "--fresh",
			map[string]string{"S01": "--fresh", "S02": "--fresh", "S03": "--fresh", "S04": "--fresh"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := decideReuse(tc.edit(base()), tc.fresh)
			for id, d := range got {
				want, rerun := tc.want[id]
				switch {
				case rerun && (d.Reuse || d.Reason != want):
					t.Errorf("%s: %+v, want it to run again: %s", id, d, want)
				case !rerun && !d.Reuse:
					t.Errorf("%s: runs again (%s), want it reused", id, d.Reason)
				}
			}
			for id := range tc.want {
				if _, ok := got[id]; !ok {
					t.Errorf("%s: no decision", id)
				}
			}
		})
	}
}
