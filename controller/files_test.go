package controller

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"testing"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/home"
)

// TestBaseTreeDecision: what a plain task's launch receives in output/:
// its base directory, and its files: at their path in the spec directory.
func TestBaseTreeDecision(t *testing.T) {
	spec := "/specs/p/S01-a.md"
	tests := []struct {
		name string
		task domain.Task
		want tree
	}{
		{"nothing", domain.Task{SpecFile: spec}, tree{}},
		{"base only", domain.Task{SpecFile: spec, BaseDir: "/specs/p/base"}, tree{Dir: "/specs/p/base"}},
		{"files", domain.Task{SpecFile: spec, Files: []string{"data/in.csv", "b.txt"}},
			tree{Files: map[string]string{"data/in.csv": "/specs/p/data/in.csv", "b.txt": "/specs/p/b.txt"}}},
		{"base and files", domain.Task{SpecFile: spec, BaseDir: "/specs/p/base", Files: []string{"b.txt"}},
			tree{Dir: "/specs/p/base", Files: map[string]string{"b.txt": "/specs/p/b.txt"}}},
	}
	for _, tc := range tests {
		got := baseTree(tc.task)
		if got.Dir != tc.want.Dir || !maps.Equal(got.Files, tc.want.Files) {
			t.Errorf("%s: baseTree = %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// TestFilesReachTheWorkspace: a task's files: are in its output/ before
// the tool starts, at their path, over the base tree's file of that name;
// a task without files: gets the base alone.
func TestFilesReachTheWorkspace(t *testing.T) {
	h := newHarness(t, fastYAML, map[string]string{
		"project.yaml":  "tool: shell\nbase: tree\nintegration: false\n",
		"tree/same.txt": "from base\n",
		"tree/keep.txt": "kept\n",
		"data/in.csv":   "a,b\n",
		"same.txt":      "from files\n",
		"S01-use.md":    "---\nfiles: [data/in.csv, same.txt]\n---\ncat data/in.csv same.txt keep.txt > seen.txt\n",
		"S02-none.md":   "cat same.txt > seen.txt; test ! -e data\n",
	})
	h.tickUntil("project to finish", func() bool {
		p, _ := h.st.Project(context.Background(), "p")
		return p.State == domain.ProjectDone
	})
	if p, _ := h.st.Project(context.Background(), "p"); p.Result != domain.ResultPassed {
		t.Fatalf("result %s: %s", p.Result, h.dump())
	}
	runs := home.RunsDir(h.home, "p")
	for id, want := range map[string]string{"S01": "a,b\nfrom files\nkept\n", "S02": "from base\n"} {
		if b, err := os.ReadFile(filepath.Join(runs, id, "output", "seen.txt")); string(b) != want {
			t.Errorf("%s saw %q (%v), want %q", id, b, err, want)
		}
	}
}
