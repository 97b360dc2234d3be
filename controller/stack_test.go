package controller

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/gitrepo"
	"github.com/dispatch-tool/dispatch/internal/gittest"
	"github.com/dispatch-tool/dispatch/policy"
	"github.com/dispatch-tool/dispatch/wire"
)

// TestStackBranches: a stacked task's dependencies are merged in
// dependency order then ID, each its current attempt's commit counted
// from where that attempt started; a dependency without a result is an
// error, never a start without it.
func TestStackBranches(t *testing.T) {
	t.Parallel()
	done := func(id string, attempt int, deps ...string) domain.Task {
		return domain.Task{ID: id, Status: domain.Completed, Attempt: attempt, DependsOn: deps, BaseCommit: "base"}
	}
	tasks := []domain.Task{done("S01", 1), done("S02", 2, "S03"), done("S03", 1),
		{ID: "S04", Status: domain.Failed, Attempt: 1, BaseCommit: "base"}, done("S05", 1)}
	runs := []domain.Attempt{{Task: "S01", Attempt: 1, Commit: "c1"}, {Task: "S02", Attempt: 1, Commit: "old"},
		{Task: "S02", Attempt: 2, Commit: "c2", BaseCommit: "c3"}, {Task: "S03", Attempt: 1, Commit: "c3"},
		{Task: "S04", Attempt: 1}, {Task: "S05", Attempt: 1}}
	tests := []struct {
		name string
		deps []string
		want string // ID:commit:base of each, or the error's text
	}{
		{"one dependency", []string{"S01"}, "S01:c1:base"},
		{"dependency order, then ID", []string{"S02", "S01", "S03"}, "S01:c1:base S03:c3:base S02:c2:c3"},
		{"a duplicate counts once", []string{"S01", "S01"}, "S01:c1:base"},
		{"a dependency that failed", []string{"S01", "S04"}, "dependency S04 has no result commit (failed)"},
		{"a dependency without a commit", []string{"S05"}, "dependency S05 has no result commit (completed)"},
		{"a dependency the project lacks", []string{"S01", "S09"}, "depends on a task the project does not have"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := stackBranches(domain.Task{ID: "S10", DependsOn: tc.deps}, tasks, runs)
			var s []string
			for _, b := range got {
				s = append(s, b.ID+":"+b.Commit+":"+b.Base)
			}
			text := strings.Join(s, " ")
			if err != nil {
				text = err.Error()
			}
			if !strings.Contains(text, tc.want) || (err == nil && text != tc.want) {
				t.Errorf("%q, want %q", text, tc.want)
			}
		})
	}
}

// TestStacked: which tasks start on their dependencies' results.
func TestStacked(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		task domain.Task
		want bool
	}{
		{"git, with dependencies", domain.Task{ID: "S02", BaseCommit: "c", DependsOn: []string{"S01"}}, true},
		{"git, start_from: dependencies", domain.Task{ID: "S02", BaseCommit: "c", DependsOn: []string{"S01"}, StartFrom: domain.StartDependencies}, true},
		{"git, start_from: base", domain.Task{ID: "S02", BaseCommit: "c", DependsOn: []string{"S01"}, StartFrom: domain.StartBase}, false},
		{"git, no dependencies", domain.Task{ID: "S02", BaseCommit: "c"}, false},
		{"a phase task", domain.Task{ID: domain.IntegrationID, BaseCommit: "c", DependsOn: []string{"S01"}}, false},
		{"plain", domain.Task{ID: "S02", DependsOn: []string{"S01"}}, false},
	} {
		if got := stacked(tc.task); got != tc.want {
			t.Errorf("%s: stacked = %v, want %v", tc.name, got, tc.want)
		}
		if !waitsForCollection(tc.task) && len(tc.task.DependsOn) > 0 && tc.task.StartFrom != domain.StartBase && !domain.IsPhaseID(tc.task.ID) {
			t.Errorf("%s: does not wait for its dependencies' collection", tc.name)
		}
	}
}

// TestConflictSection: an agent's prompt lists each conflict with its
// tasks; a shell task's script is never added to.
func TestConflictSection(t *testing.T) {
	t.Parallel()
	conflicts := []gitrepo.Conflict{{Path: "shared.txt", Tasks: []string{"S01", "S02"}}}
	got := string(conflictSection(wire.AgentClaude, conflicts))
	for _, want := range []string{"## Conflicts between the tasks this one depends on", "<<<<<<<", "- `shared.txt`: S01, S02\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("the section lacks %q:\n%s", want, got)
		}
	}
	if s := conflictSection(policy.ToolShell, conflicts); s != nil {
		t.Errorf("a shell script gains %q", s)
	}
	if s := conflictSection(wire.AgentClaude, nil); s != nil {
		t.Errorf("no conflict, yet %q", s)
	}
}

// stackedConflictProject is an operator repository and specs where S01
// and S02 change the same line and S03 depends on both; S03's tool copies
// its prompt into its workspace.
func stackedConflictProject(t *testing.T, onConflict string) (*gittest.Repo, map[string]string) {
	op := gittest.New(t)
	op.Write("shared.txt", "one\ntwo\nthree\n")
	op.Commit("base")
	return op, map[string]string{
		"project.yaml": "tool: shell\nintegration: false\nrepo: " + op.Dir + "\n" + onConflict,
		"S01-one.md":   "sed -i 's/^two$/two by S01/' shared.txt\n",
		"S02-two.md":   "sed -i 's/^two$/two by S02/' shared.txt\n",
		"S03-after.md": "---\ndepends_on: [S01, S02]\ntool: promptcopy\n---\n# After both\n",
	}
}

// stackedYAML has a custom tool that copies its prompt into the
// workspace, as prompt.md.
const stackedYAML = `
controller:
  retry_backoff: 10s
  max_retries: 2
nodes:
  - name: local
    slots: 2
    spares: 0
    work_dir: WORK
tools:
  promptcopy: {command: [/bin/cp, "{spec}", prompt.md]}
`

// TestStackedConflictStartsWithMarkers: a task whose dependencies'
// results conflict starts on their merge, git's markers committed, its
// prompt listing the path and the tasks; its result is one commit on that
// merge, accepted.
func TestStackedConflictStartsWithMarkers(t *testing.T) {
	op, specs := stackedConflictProject(t, "")
	h := newHarness(t, stackedYAML, specs)
	h.tickUntil("S03 to be collected", func() bool {
		return h.task("S03").Status == domain.Completed && h.collected("S03")
	})
	s03 := op.Git("rev-parse", "refs/heads/"+taskBranch("p", "S03"))
	start := op.Git("rev-parse", s03+"^")
	if parents := strings.Fields(op.Git("log", "-1", "--format=%P", start)); len(parents) != 2 ||
		parents[0] != op.Git("rev-parse", "refs/heads/"+taskBranch("p", "S01")) || parents[1] != op.Git("rev-parse", "refs/heads/"+taskBranch("p", "S02")) {
		t.Errorf("S03 started on %s with parents %v, want the merge of S01 and S02", start, parents)
	}
	shared := op.Git("show", s03+":shared.txt")
	if !strings.Contains(shared, "<<<<<<<") || !strings.Contains(shared, "two by S01") || !strings.Contains(shared, "two by S02") {
		t.Errorf("S03's shared.txt holds no markers:\n%s", shared)
	}
	prompt := op.Git("show", s03+":prompt.md")
	if !strings.HasPrefix(prompt, "# After both") || !strings.Contains(prompt, "## Conflicts between the tasks this one depends on") ||
		!strings.Contains(prompt, "- `shared.txt`: S01, S02") {
		t.Errorf("S03's prompt:\n%s", prompt)
	}
	runs, err := h.st.Attempts(t.Context(), "p", "S03")
	if err != nil || len(runs) != 1 || runs[0].BaseCommit != start {
		t.Errorf("S03's attempts %+v %v, want one that started on %s", runs, err, start)
	}
}

// TestOnConflictFail: with on_conflict: fail, a task whose dependencies'
// results conflict fails at once as start_permanent, naming the path and
// the tasks, and is not retried; its dependencies' results stay.
func TestOnConflictFail(t *testing.T) {
	op, specs := stackedConflictProject(t, "on_conflict: fail\n")
	h := newHarness(t, stackedYAML, specs)
	h.tickUntil("S03 to fail", func() bool { return h.task("S03").Status == domain.Failed })
	tk := h.task("S03")
	if tk.ErrorClass != wire.ClassStartPermanent || !strings.Contains(tk.Error, "on_conflict: fail") || !strings.Contains(tk.Error, "shared.txt (S01, S02)") {
		t.Errorf("S03: %s %q", tk.ErrorClass, tk.Error)
	}
	// Past any retry's backoff, it is still its first attempt.
	h.clock.Advance(10 * time.Minute)
	h.tick()
	h.tick()
	if tk := h.task("S03"); tk.Attempt != 1 || tk.Status != domain.Failed {
		t.Errorf("S03: attempt %d %s; want no retry", tk.Attempt, tk.Status)
	}
	if refs := op.Git("for-each-ref", "--format=%(refname)", "refs/heads/dispatch/"); refs != fmt.Sprintf("refs/heads/%s\nrefs/heads/%s", taskBranch("p", "S01"), taskBranch("p", "S02")) {
		t.Errorf("branches:\n%s", refs)
	}
	if _, err := os.Stat(filepath.Join(h.work, "p", "tasks", "S03")); err == nil {
		t.Error("S03 has a task directory: it was launched")
	}
}

// collected reports whether task id's current attempt is collected.
func (h *harness) collected(id string) bool {
	tk := h.task(id)
	runs, err := h.st.Attempts(h.t.Context(), "p", id)
	if err != nil {
		h.t.Fatal(err)
	}
	for _, r := range runs {
		if r.Attempt == tk.Attempt {
			return !r.CollectedAt.IsZero()
		}
	}
	return false
}
