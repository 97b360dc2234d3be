package controller

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/control"
	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/internal/sqlitetest"
	"github.com/dispatch-tool/dispatch/readmodel"
	"github.com/dispatch-tool/dispatch/store"
)

// corrupt runs one statement on the harness's database, as a damaged file
// or another program would leave it.
func corrupt(t *testing.T, h *harness, stmt string) {
	t.Helper()
	db, err := sql.Open("sqlite", filepath.Join(h.home, "dispatch.db")+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(stmt); err != nil {
		t.Fatalf("%s: %v", stmt, err)
	}
}

// TestUnreadableProjectOptionsStopTheProject: options that do not parse used
// to read as "no integration, no setup, no halt". Now nothing of the
// project launches on the wrong assumption, and after a few ticks the
// project is stopped with the error as its problem; another project of the
// home runs to its end all the while (the tick used to fail for all).
func TestUnreadableProjectOptionsStopTheProject(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "setup-ran")
	h := newHarness(t, "", map[string]string{
		"project.yaml": fmt.Sprintf("tool: shell\nsetup: touch '%s'\n", marker),
		"S01-a.md":     "echo hi\n",
	})
	h.addProject("q", shellProject(map[string]string{"S01-q.md": "echo q\n"}))
	corrupt(t, h, `UPDATE projects SET options = '{"setup": ' WHERE name = 'p'`)
	h.tickUntil("q to finish and p to be stopped", func() bool {
		p, _ := h.st.Project(context.Background(), "p")
		q, _ := h.st.Project(context.Background(), "q")
		return p.State == domain.ProjectStopped && q.State == domain.ProjectDone
	})
	if s := h.task("S01").Status; s != domain.Pending {
		t.Fatalf("S01 is %s; nothing may start without its options", s)
	}
	p, _ := h.st.Project(context.Background(), "p")
	if !strings.Contains(p.Problem, "project p: read its stored options") {
		t.Fatalf("problem of p = %q, want one naming the project's options", p.Problem)
	}
}

// TestUnreadableVerdictStopsTheFixRound: a verdict that cannot be read back
// used to start the next verification with no issues to check.
func TestUnreadableVerdictStopsTheFixRound(t *testing.T) {
	gate := filepath.Join(t.TempDir(), "go")
	fail := "echo '{\"pass\": false, \"issues\": [\"broken\"]}' > verdict.json\n"
	h := newHarness(t, unsandboxed("", "F01 waits for a file the test writes outside its workspace"), map[string]string{
		"project.yaml": "tool: shell\nmax_fix_rounds: 2\n",
		"S01-x.md":     "echo x > x.txt\n",
		"S99-i.md":     "echo integrated > INTEGRATION.md\n",
		"V01-v.md":     fail,
		"F01-f.md":     fmt.Sprintf("while [ ! -e '%s' ]; do sleep 0.05; done\necho fixed > FIX.md\n", gate),
		"V02-v.md":     fail,
	})
	h.tickUntil("F01 to run", func() bool {
		f, err := h.st.Task(context.Background(), "p", "F01")
		return err == nil && f.Status == domain.Running
	})
	corrupt(t, h, `UPDATE verdicts SET issues = '["broken' WHERE project = 'p'`)
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	h.tickUntil("p to be stopped", func() bool {
		if _, err := h.st.Task(context.Background(), "p", "V02"); err == nil {
			t.Fatal("V02 was started although the issues of round 1 could not be read")
		}
		p, _ := h.st.Project(context.Background(), "p")
		return p.State == domain.ProjectStopped
	})
	if p, _ := h.st.Project(context.Background(), "p"); !strings.Contains(p.Problem, "read the verdict of round 1") {
		t.Fatalf("problem = %q, want one naming the unreadable verdict", p.Problem)
	}
}

// TestRetryWithABrokenSpecFails: retry takes the edited spec; when the
// specs do not load it used to retry with the old snapshot in silence.
func TestRetryWithABrokenSpecFails(t *testing.T) {
	h := newHarness(t, "", shellProject(map[string]string{"S01-a.md": "exit 1\n"}))
	h.tickUntil("S01 to fail for good", func() bool {
		h.clock.Advance(time.Minute)
		return h.task("S01").Status == domain.Failed
	})
	spec := filepath.Join(h.home, "specs", "p", "S01-a.md")
	if err := os.WriteFile(spec, []byte("echo \xff\xfe\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := h.ctl.Retry(context.Background(), "p", []string{"S01"}, false)
	var oe *control.OpError
	if !errors.As(err, &oe) || !strings.Contains(err.Error(), "do not load") {
		t.Fatalf("retry error = %v, want an control.OpError saying the specs do not load", err)
	}
	if s := h.task("S01").Status; s != domain.Failed {
		t.Fatalf("S01 is %s after a refused retry; want failed", s)
	}
}

// TestOneProjectsErrorStopsOnlyThatProject: a project whose phase cannot
// finish (its report.md cannot be written: a directory stands there) used
// to fail every tick, and every project sorted after it never finished, in
// every later controller of the home. Now it is stopped with its reason in
// status and the report; the others finish; fixed and resumed, it finishes.
func TestOneProjectsErrorStopsOnlyThatProject(t *testing.T) {
	h := newHarness(t, "", shellProject(map[string]string{"S01-a.md": "echo a > a.txt\n"}))
	h.addProject("q", shellProject(map[string]string{"S01-q.md": "echo q > q.txt\n"}))
	blocker := filepath.Join(h.home, "runs", "p", "report.md")
	if err := os.MkdirAll(filepath.Join(blocker, "in-the-way"), 0o700); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		res, err := h.ctl.Tick(context.Background())
		if err != nil {
			t.Fatalf("tick %d failed for every project: %v", i, err)
		}
		p, _ := h.st.Project(context.Background(), "p")
		q, _ := h.st.Project(context.Background(), "q")
		if p.State == domain.ProjectStopped && q.State == domain.ProjectDone {
			break
		}
		if p.State == domain.ProjectDone {
			t.Fatalf("p finished although its report could not be written")
		}
		if i > 2000 {
			t.Fatalf("p %s, q %s after %d ticks (last %+v)", p.State, q.State, i, res)
		}
		time.Sleep(20 * time.Millisecond)
	}
	p, _ := h.st.Project(context.Background(), "p")
	if !strings.Contains(p.Problem, "report.md") || !strings.Contains(p.Problem, "3 times in a row") {
		t.Fatalf("problem = %q, want the report that could not be written, after 3 tries", p.Problem)
	}
	ev, ok, err := h.st.LastEvent(context.Background(), "p", "project")
	if err != nil || !ok || !strings.Contains(ev.Message, "dispatch start p resumes") {
		t.Fatalf("last project event = %+v, %v, %v; want the stop with its fix", ev, ok, err)
	}
	r, err := readmodel.BuildReport(context.Background(), h.st, h.cfg, h.home, "p", h.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	if r.Result != domain.ResultStopped || r.Problem != p.Problem || !strings.Contains(r.Markdown(), "Stopped by dispatch:") {
		t.Fatalf("report: result %s, problem %q, markdown:\n%s", r.Result, r.Problem, r.Markdown())
	}
	// Fixed and resumed, it finishes, and the problem is gone.
	if err := os.RemoveAll(blocker); err != nil {
		t.Fatal(err)
	}
	h.addProject("p", nil)
	h.tickUntil("p to finish", func() bool {
		p, _ := h.st.Project(context.Background(), "p")
		return p.State == domain.ProjectDone
	})
	if p, _ := h.st.Project(context.Background(), "p"); p.Problem != "" || p.Result != domain.ResultPassed {
		t.Fatalf("after the fix: result %s, problem %q", p.Result, p.Problem)
	}
}

// TestOneProjectsDamagedTaskStopsOnlyThatProject: a task row of one
// project that does not read back (its depends_on damaged) made every tick
// fail at "apply node status", before any launch or collection, for every
// project of the home. Now it is that project's trouble: the other project
// runs to its end while the damaged one's tasks are left alone, and the
// damaged one is stopped with the error as its problem.
func TestOneProjectsDamagedTaskStopsOnlyThatProject(t *testing.T) {
	h := newHarness(t, "", shellProject(map[string]string{"S01-a.md": "echo a\n", "S02-b.md": "echo b\n"}))
	h.addProject("q", shellProject(map[string]string{"S01-q.md": "echo q\n"}))
	corrupt(t, h, `UPDATE tasks SET depends_on = '["S0' WHERE project = 'p' AND id = 'S02'`)
	h.tickUntil("q to finish and p to be stopped", func() bool {
		p, _ := h.st.Project(context.Background(), "p")
		q, _ := h.st.Project(context.Background(), "q")
		return p.State == domain.ProjectStopped && q.State == domain.ProjectDone
	})
	p, _ := h.st.Project(context.Background(), "p")
	if !strings.Contains(p.Problem, "reading its tasks failed 3 times in a row") || !strings.Contains(p.Problem, "task p/S02: read depends_on") {
		t.Fatalf("problem of p = %q, want the damaged task, after 3 tries", p.Problem)
	}
	if s := h.task("S01").Status; s != domain.Pending {
		t.Fatalf("p/S01 is %s; nothing of a project that does not read back may start", s)
	}
	// Stopped, it is left alone, and the ticks go on.
	for range 5 {
		h.tick()
	}
}

// TestBusyDatabaseStopsNoProject: a "database is busy" error met in one
// project's step is the database's trouble: it fails the tick (tried again
// at the next) and counts against no project, however often it comes.
func TestBusyDatabaseStopsNoProject(t *testing.T) {
	h := newHarness(t, "", shellProject(map[string]string{"S01-a.md": "echo a\n"}))
	busy := sqlitetest.BusyError(t, filepath.Join(h.home, "dispatch.db"))
	if !store.IsBusy(busy) {
		t.Fatalf("no busy error to test with: %v", busy)
	}
	for i := 0; i < 2*troubleLimit; i++ {
		if err := h.ctl.projectTrouble(context.Background(), "p", stepAdvance, fmt.Errorf("advance: %w", busy)); err == nil {
			t.Fatalf("try %d: a busy database was taken for the project's own trouble", i)
		}
	}
	if p, _ := h.st.Project(context.Background(), "p"); p.State != domain.ProjectActive || p.Problem != "" {
		t.Fatalf("p is %s (%q) after busy errors; want active", p.State, p.Problem)
	}
}
