package controller

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
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

// TestInputsOverTheQuota: a dependent whose dependencies' outputs together
// exceed collect_max_bytes fails without retries, with an error naming it
// and the fix; each dependency alone was collected.
func TestInputsOverTheQuota(t *testing.T) {
	yaml := strings.Replace(fastYAML, "  max_retries: 1\n", "  max_retries: 1\n  collect_max_bytes: 3000\n", 1)
	h := newHarness(t, yaml, map[string]string{
		"project.yaml":   "tool: shell\nintegration: false\n",
		"S01-a.md":       "head -c 2000 /dev/zero > a.bin\n",
		"S02-b.md":       "head -c 2000 /dev/zero > b.bin\n",
		"S03-both.md":    "---\ndepends_on: [S01, S02]\n---\nls \"$DISPATCH_INPUTS\"\n",
		"S04-ordered.md": "---\ndepends_on: [S01, S02]\nstart_from: base\n---\ntest -z \"$DISPATCH_INPUTS\"\n",
	})
	h.tickUntil("project to finish", func() bool {
		p, _ := h.st.Project(context.Background(), "p")
		return p.State == domain.ProjectDone
	})
	s3, err := h.st.Task(context.Background(), "p", "S03")
	if err != nil {
		t.Fatal(err)
	}
	if s3.Status != domain.Failed || s3.Attempt != 1 || !strings.Contains(s3.Error, "collect_max_bytes") || !strings.Contains(s3.Error, "S03") {
		t.Errorf("S03 = %s attempt %d %q, want failed at once naming collect_max_bytes: %s", s3.Status, s3.Attempt, s3.Error, h.dump())
	}
	if s4, _ := h.st.Task(context.Background(), "p", "S04"); s4.Status != domain.Completed {
		t.Errorf("S04 (start_from: base) = %s %q, want completed", s4.Status, s4.Error)
	}
}
