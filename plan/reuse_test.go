package plan

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/dispatch-tool/dispatch/domain"
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
		return reuseCandidate{ID: id, DependsOn: deps, Status: domain.Completed, FromRun: 1, Ran: ran(spec, depResults),
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
			c[0].Status = domain.Failed
			c[3].Ran = nil
			return append(c, reuseCandidate{ID: "S05", New: true})
		}, "", map[string]string{"S01": "failed in run 1", "S02": "depends on S01", "S03": "depends on S02",
			"S04": "its last run recorded no inputs", "S05": "new task"}},
		{"a dependency's result differs from the one its dependent ran with", func(c []reuseCandidate) []reuseCandidate {
			c[1].Result = "attempt 2: S02" // retried after S03 had run
			return c
		}, "", map[string]string{"S03": "S02's result changed after it ran"}},
		{"a dependency added or dropped", func(c []reuseCandidate) []reuseCandidate {
			c[2].DependsOn = []string{"S01"}
			return c
		}, "", map[string]string{"S03": "its dependencies changed"}},
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

// TestArchiveRunDir: an ended run's files go to run-<N>/, a reused task's
// stay and are linked there, every task's attempts/ (a task removed since
// included) stay in place, and an archive done again after a crash links
// back what the new decision keeps.
func TestArchiveRunDir(t *testing.T) {
	dir := t.TempDir()
	write := func(rel, text string) {
		t.Helper()
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	exists := func(rel string) bool { _, err := os.Stat(filepath.Join(dir, rel)); return err == nil }
	for _, f := range []string{"S01/output/a.txt", "S01/task.log", "S01/attempts/1/task.log", "S02/output/b.txt", "S02/attempts/1/task.log",
		"S07/output/old.txt", "S07/attempts/3/task.log", "final/a.txt", "report.md", "S99.md"} {
		write(f, f+"\n")
	}
	tasks := map[string]domain.Task{"S01": {ID: "S01"}, "S02": {ID: "S02"}}
	if err := archiveRunDir(dir, 1, map[string]int{"S01": 1}, tasks, false); err != nil {
		t.Fatal(err)
	}
	for rel, want := range map[string]bool{
		"S01/output/a.txt": true, "run-1/S01/output/a.txt": true, "S01/task.log": true, "run-1/S01/task.log": true,
		"S01/attempts/1/task.log": true, "run-1/S01/attempts": false,
		"S02/output/b.txt": false, "run-1/S02/output/b.txt": true, "S02/attempts/1/task.log": true,
		"S07/attempts/3/task.log": true, "run-1/S07/output/old.txt": true, "S07/output": false,
		"final/a.txt": false, "run-1/final/a.txt": true, "report.md": false, "run-1/report.md": true, "run-1/S99.md": true,
	} {
		if exists(rel) != want {
			t.Errorf("after the archive, %s exists: %v, want %v", rel, !want, want)
		}
	}
	// Linked, not copied: the same file.
	a, _ := os.Stat(filepath.Join(dir, "S01/output/a.txt"))
	b, _ := os.Stat(filepath.Join(dir, "run-1/S01/output/a.txt"))
	if !os.SameFile(a, b) {
		t.Error("a reused task's output is copied into the archive, not linked")
	}
	// Done again, now keeping everything (a start killed after the first
	// archive, and the next one reusing every task): linked back.
	if err := archiveRunDir(dir, 1, map[string]int{"S01": 1, "S02": 1}, tasks, true); err != nil {
		t.Fatal(err)
	}
	for _, rel := range []string{"S02/output/b.txt", "final/a.txt", "report.md", "S01/output/a.txt", "run-1/S02/output/b.txt"} {
		if !exists(rel) {
			t.Errorf("after the second archive, %s is missing", rel)
		}
	}
}
