package controller

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/control"
	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/notify"
	"github.com/dispatch-tool/dispatch/plan"
	"github.com/dispatch-tool/dispatch/service"
	"github.com/dispatch-tool/dispatch/spec"
	"github.com/dispatch-tool/dispatch/store"
)

// TestSchedulesOnTheControllersClock: the daemon's schedule checks, on an
// injected clock (no sleeping through minutes): the first run when due, a
// skip while a run still runs, every task afresh, the backoff after a
// failure, one catch-up for occurrences missed, disable and enable, and a
// schedule removed from project.yaml.
func TestSchedulesOnTheControllersClock(t *testing.T) {
	h := newHarness(t, "", shellProject(map[string]string{"S01-a.md": "echo a\n"}))
	ctx := context.Background()
	h.tickUntil("p to finish", func() bool { p, _ := h.st.Project(ctx, "p"); return p.State == domain.ProjectDone })
	q := filepath.Join(h.home, "specs", "q")
	write := func(name, text string) {
		t.Helper()
		if err := os.MkdirAll(q, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(q, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("project.yaml", "tool: shell\nintegration: false\nschedule: {every: 30s}\n")
	write("S01-a.md", "---\nmax_retries: 0\n---\necho a > a.txt\n")
	sch := &service.Schedules{St: h.st, SpecsDir: filepath.Join(h.home, "specs"), Log: h.ctl.log, Now: h.ctl.now}
	var told []service.Notice
	sch.Notify = func(_ context.Context, ns []service.Notice) { told = append(told, ns...) }
	check := func() store.ScheduleState {
		t.Helper()
		if _, err := sch.Check(ctx, h.ctl.startProject); err != nil {
			t.Fatal(err)
		}
		scs, err := h.st.Schedules(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range scs {
			if s.Project == "q" {
				return s
			}
		}
		return store.ScheduleState{}
	}
	runs := func() int {
		p, err := h.st.Project(ctx, "q")
		if err != nil {
			return 0
		}
		return p.Run
	}
	finishQ := func() domain.Project {
		h.tickUntil("q to finish", func() bool { p, _ := h.st.Project(ctx, "q"); return p.State == domain.ProjectDone })
		p, _ := h.st.Project(ctx, "q")
		return p
	}

	t0 := h.clock.Now()
	if s := check(); !s.Enabled || !s.NextAt.Equal(t0.Add(30*time.Second)) || runs() != 0 {
		t.Fatalf("a new schedule: %+v, %d runs; want the first run due in 30s", s, runs())
	}
	h.clock.Advance(29 * time.Second)
	if s := check(); runs() != 0 || !s.UpdatedAt.Equal(t0) {
		t.Fatalf("a check before the run is due: %+v, %d runs; want nothing started and nothing written", s, runs())
	}
	h.clock.Advance(time.Second)
	if s := check(); runs() != 1 || s.LastRun != 1 || s.LastResult != "" || !s.NextAt.Equal(t0.Add(60*time.Second)) {
		t.Fatalf("due: %+v, %d runs", s, runs())
	}
	// Due again while run 1 still runs (nothing ticked): skipped, recorded.
	h.clock.Advance(30 * time.Second)
	if s := check(); runs() != 1 || s.Skipped != 1 {
		t.Fatalf("due while run 1 runs: %+v, %d runs; want a skip", s, runs())
	}
	if len(told) != 1 || told[0].Event != notify.ScheduleSkipped || told[0].Project != "q" || !strings.Contains(told[0].Message, "still runs") {
		t.Fatalf("the skip is told: %+v; want one schedule_skipped", told)
	}
	// Started by hand meanwhile, it is resumed: still the schedule's run.
	startQ := func() {
		t.Helper()
		p, err := spec.Load(filepath.Join(h.home, "specs"), "q")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := plan.AddProject(ctx, h.st, h.cfg, h.home, p, control.StartOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	startQ()
	if p := finishQ(); p.Result != domain.ResultPassed {
		t.Fatalf("run 1 = %+v", p)
	}
	// The next run runs every task afresh (no reuse: true).
	h.clock.Advance(30 * time.Second)
	if s := check(); runs() != 2 || s.LastResult != "" || s.Failures != 0 {
		t.Fatalf("run 2: %+v", s)
	}
	finishQ()
	if tk, _ := h.st.Task(ctx, "q", "S01"); tk.Attempt != 2 || tk.ReusedFrom != 0 {
		t.Errorf("a scheduled run reused S01: attempt %d, reused from %d", tk.Attempt, tk.ReusedFrom)
	}

	// A failed run backs the next start off: 60 s after its end, doubling.
	write("S01-a.md", "---\nmax_retries: 0\n---\nexit 3\n")
	h.clock.Advance(30 * time.Second)
	check()
	if p := finishQ(); p.Result != domain.ResultFailed || p.Run != 3 {
		t.Fatalf("run 3 = %+v", p)
	}
	end := h.clock.Now()
	if s := check(); s.LastResult != domain.ResultFailed || s.Failures != 1 || !s.NextAt.Equal(end.Add(60*time.Second)) {
		t.Fatalf("after a failed run: %+v; want the next run 60s after its end (%s)", s, end.Add(60*time.Second))
	}
	h.clock.Advance(30 * time.Second) // the next occurrence by every: 30s, backed off
	if check(); runs() != 3 {
		t.Fatal("a run started within the backoff")
	}
	h.clock.Advance(30 * time.Second)
	check()
	finishQ()
	end = h.clock.Now()
	if s := check(); s.Failures != 2 || !s.NextAt.Equal(end.Add(120*time.Second)) {
		t.Fatalf("after two failed runs: %+v; want the next run 120s after the end", s)
	}

	// Missed occurrences while no check ran (the daemon down): one
	// catch-up run, recorded.
	write("S01-a.md", "---\nmax_retries: 0\n---\necho a > a.txt\n")
	h.clock.Advance(10 * time.Minute)
	before := runs()
	if s := check(); runs() != before+1 || s.CatchUps != 1 {
		t.Fatalf("after 10 minutes without a check: %+v, runs %d → %d; want one catch-up run", s, before, runs())
	}
	if p := finishQ(); p.Result != domain.ResultPassed {
		t.Fatalf("the catch-up run = %+v", p)
	}
	if s := check(); s.Failures != 0 || s.LastResult != domain.ResultPassed {
		t.Errorf("after a passed run: %+v; want the failures reset", s)
	}
	hist, _ := h.st.RunHistory(ctx, "q")
	var triggers []string
	for _, r := range hist {
		o, _ := r.Project.ParseOptions()
		triggers = append(triggers, o.Trigger)
	}
	if got := strings.Join(triggers, " "); got != "schedule schedule schedule schedule catch-up" {
		t.Errorf("triggers = %s", got)
	}

	// A run the operator stopped stays stopped: the next due run is
	// skipped, saying how to resume it.
	h.clock.Advance(30 * time.Second)
	check()
	stoppedRun := runs()
	if _, err := h.ctl.Stop(ctx, "q", false); err != nil {
		t.Fatal(err)
	}
	h.clock.Advance(30 * time.Second)
	if s := check(); runs() != stoppedRun || s.Skipped != 2 {
		t.Fatalf("due while run %d is stopped: %+v, %d runs; want a skip", stoppedRun, s, runs())
	}
	if p, _ := h.st.Project(ctx, "q"); p.State != domain.ProjectStopped {
		t.Fatalf("the schedule resumed a stopped run: %+v", p)
	}
	if ev, ok, _ := h.st.LastEvent(ctx, "q", service.ScheduleEvent); !ok || !strings.Contains(ev.Message, "was stopped by the operator (dispatch start q resumes it)") {
		t.Errorf("the skip of a stopped run says %q", ev.Message)
	}
	startQ()
	finishQ()
	check()

	// Disabled: nothing starts; enabled again: from now, no catch-up.
	if _, err := service.SetEnabled(ctx, h.st, filepath.Join(h.home, "specs"), "q", false, h.clock.Now()); err != nil {
		t.Fatal(err)
	}
	before = runs()
	h.clock.Advance(5 * time.Minute)
	if s := check(); runs() != before || s.Enabled {
		t.Fatalf("disabled: %+v, runs %d → %d", s, before, runs())
	}
	if _, err := service.SetEnabled(ctx, h.st, filepath.Join(h.home, "specs"), "q", true, h.clock.Now()); err != nil {
		t.Fatal(err)
	}
	if s := check(); runs() != before || !s.NextAt.Equal(h.clock.Now().Add(30*time.Second)) {
		t.Fatalf("enabled again: %+v, runs %d → %d; want the next run in 30s", s, before, runs())
	}
	if _, err := service.SetEnabled(ctx, h.st, filepath.Join(h.home, "specs"), "p", true, h.clock.Now()); err == nil ||
		!strings.Contains(err.Error(), "has no schedule") {
		t.Errorf("enable of a project without a schedule: %v", err)
	}

	// A schedule broken in project.yaml while the daemon runs: kept as it
	// was recorded, no run starts, until it is fixed.
	write("project.yaml", "tool: shell\nintegration: false\nschedule: {every: 5s}\n")
	before = runs()
	h.clock.Advance(time.Hour)
	if s := check(); s.Project != "q" || runs() != before {
		t.Errorf("a broken schedule: %+v, runs %d → %d; want it kept and nothing started", s, before, runs())
	}

	// The schedule removed from project.yaml: forgotten.
	write("project.yaml", "tool: shell\nintegration: false\n")
	if s := check(); s.Project != "" {
		t.Errorf("a removed schedule is still recorded: %+v", s)
	}
	evs, _ := h.st.Events(ctx, "q", 0, 0)
	kinds := 0
	for _, e := range evs {
		if e.Kind == service.ScheduleEvent {
			kinds++
		}
	}
	if kinds == 0 {
		t.Error("no schedule events")
	}
}
