package controller

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/home"
)

// TestLaunchTrees: what a task's launch receives: in output/, its base
// directory, its files: (at their path in the spec directory) and, with
// start_from: dependencies, its dependencies' outputs; in inputs/, one
// directory per dependency (the default in a plain project); nothing of
// its dependencies in a git-native project, a phase task or with
// start_from: base.
func TestLaunchTrees(t *testing.T) {
	spec, runs := "/specs/p/S01-a.md", "/runs/p"
	out := func(id string) string { return filepath.Join(runs, id, "output") }
	deps := []string{"S01.1", "S01.2"}
	tests := []struct {
		name         string
		task         domain.Task
		base, inputs tree
	}{
		{"nothing", domain.Task{ID: "S01", SpecFile: spec}, tree{}, tree{}},
		{"base only", domain.Task{ID: "S01", SpecFile: spec, BaseDir: "/specs/p/base"}, tree{Dirs: []treeDir{{Dir: "/specs/p/base"}}}, tree{}},
		{"files", domain.Task{ID: "S01", SpecFile: spec, Files: []string{"data/in.csv", "b.txt"}},
			tree{Files: map[string]string{"data/in.csv": "/specs/p/data/in.csv", "b.txt": "/specs/p/b.txt"}}, tree{}},
		{"inputs by default", domain.Task{ID: "S02", SpecFile: spec, DependsOn: deps, BaseDir: "/b"},
			tree{Dirs: []treeDir{{Dir: "/b"}}}, tree{Dirs: []treeDir{{out("S01.1"), "S01.1"}, {out("S01.2"), "S01.2"}}}},
		{"start_from inputs", domain.Task{ID: "S02", SpecFile: spec, DependsOn: deps, StartFrom: domain.StartInputs},
			tree{}, tree{Dirs: []treeDir{{out("S01.1"), "S01.1"}, {out("S01.2"), "S01.2"}}}},
		{"start_from dependencies: the later first, over the base", domain.Task{ID: "S02", SpecFile: spec, DependsOn: deps, BaseDir: "/b", StartFrom: domain.StartDependencies},
			tree{Dirs: []treeDir{{Dir: out("S01.2")}, {Dir: out("S01.1")}, {Dir: "/b"}}}, tree{}},
		{"start_from base", domain.Task{ID: "S02", SpecFile: spec, DependsOn: deps, StartFrom: domain.StartBase}, tree{}, tree{}},
		{"git-native", domain.Task{ID: "S02", SpecFile: spec, DependsOn: deps, BaseCommit: "abc"}, tree{}, tree{}},
		{"phase task", domain.Task{ID: "S99", SpecFile: spec, DependsOn: deps, BaseDir: "/m"}, tree{Dirs: []treeDir{{Dir: "/m"}}}, tree{}},
	}
	same := func(a, b tree) bool { return slices.Equal(a.Dirs, b.Dirs) && maps.Equal(a.Files, b.Files) }
	for _, tc := range tests {
		base, inputs := launchTrees(tc.task, runs)
		if !same(base, tc.base) || !same(inputs, tc.inputs) {
			t.Errorf("%s: launchTrees = %+v, %+v, want %+v, %+v", tc.name, base, inputs, tc.base, tc.inputs)
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
