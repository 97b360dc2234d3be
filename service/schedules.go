package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/dispatch-tool/dispatch/control"
	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/notify"
	"github.com/dispatch-tool/dispatch/schedule"
	"github.com/dispatch-tool/dispatch/spec"
	"github.com/dispatch-tool/dispatch/store"
)

// The daemon (`dispatch serve`, issue 14): a controller that does not end
// when its projects are finished, and starts the runs of the projects
// whose project.yaml has a schedule: when they are due. Each check reads
// the schedules from project.yaml, decides with package schedule (pure,
// on the controller's clock), records the decision, then acts.

// scheduleCheckGap is how often the daemon reads the projects' schedules
// at most (a tick can come every few hundred milliseconds).
const scheduleCheckGap = time.Second

// ScheduleEvent is the kind of the events a schedule writes: a run begun,
// a catch-up, a skip, an enable or disable, a schedule dropped.
const ScheduleEvent = "schedule"

// keyProject is the log key of a project's name.
const keyProject = "project"

// Schedules checks the schedules of a home's projects for the daemon's
// control loop, which alone calls its methods.
type Schedules struct {
	St       *store.Store
	SpecsDir string
	Log      *slog.Logger
	Now      func() time.Time

	// nextSchedule is when the daemon checks the schedules next, and
	// badSchedules what it last logged of each unreadable one.
	nextSchedule time.Time
	badSchedules map[string]string
	// runBegun is set by a schedule check that began a run.
	runBegun bool

	// Notify, when set, sends the notifications of a check (a run
	// skipped, a schedule disabled by its failures), once it is recorded.
	Notify func(ctx context.Context, notices []Notice)
	// Backoff, when set, replaces schedule.FailureBackoff (tests).
	Backoff time.Duration
	// notices are those of the check under way.
	notices []Notice
}

// Notice is a notification a schedule check calls for.
type Notice struct {
	Project, Event, Message string
}

// notice notes a notification of the check under way.
func (c *Schedules) notice(project, event, message string) {
	c.notices = append(c.notices, Notice{Project: project, Event: event, Message: message})
}

// sendNotices hands the check's notifications to Notify.
func (c *Schedules) sendNotices(ctx context.Context) {
	ns := c.notices
	c.notices = nil
	if len(ns) > 0 && c.Notify != nil {
		c.Notify(ctx, ns)
	}
}

// BrokenReason is why the circuit breaker disabled a schedule, with the
// command that enables it again.
func BrokenReason(project string, failures, lastRun int) string {
	last := ""
	if lastRun > 0 {
		last = fmt.Sprintf(", the last run %d", lastRun)
	}
	return fmt.Sprintf("%d scheduled runs failed in a row (max_failures: %d%s): fix the project, then dispatch schedule enable %s",
		failures, failures, last, project)
}

// OperatorReason is why a schedule the operator disabled is.
func OperatorReason(project string) string {
	return "disabled by the operator: dispatch schedule enable " + project
}

// startFunc begins a run of a project, as a `dispatch start` handed to the
// controller does; the controller passes its own to Between.
type startFunc = func(ctx context.Context, project string, so control.StartOptions) (string, error)

// CheckNow makes the next Tick check the schedules, however recent the
// last check.
func (c *Schedules) CheckNow() { c.nextSchedule = time.Time{} }

// Check starts the runs that are due with start, records skips and
// catch-ups, and returns when the next run is due (zero: none is).
func (c *Schedules) Check(ctx context.Context, start startFunc) (time.Time, error) {
	now := c.Now()
	found, bad, err := spec.LoadSchedules(c.SpecsDir)
	if err != nil {
		return time.Time{}, err
	}
	// What the check records is told once it is recorded.
	c.notices = nil
	defer c.sendNotices(ctx)
	for name, err := range bad {
		if c.badSchedules[name] != err.Error() {
			c.Log.Error("schedule not read; its runs wait until it is fixed", keyProject, name, "err", err)
		}
	}
	c.badSchedules = map[string]string{}
	for name, err := range bad {
		c.badSchedules[name] = err.Error()
	}
	// Read once for every project: a check that changes nothing writes
	// nothing.
	states, err := c.St.Schedules(ctx)
	if err != nil {
		return time.Time{}, err
	}
	byProject := map[string]store.ScheduleState{}
	for _, s := range states {
		byProject[s.Project] = s
	}
	known := map[string]bool{}
	var wake time.Time
	for _, f := range found {
		known[f.Name] = true
		next, err := c.checkSchedule(ctx, f, now, byProject, start)
		if err != nil {
			c.Log.Error("schedule check failed", keyProject, f.Name, "err", err)
			continue
		}
		if !next.IsZero() && (wake.IsZero() || next.Before(wake)) {
			wake = next
		}
	}
	// A project whose schedule: is gone (and not merely unreadable now)
	// is forgotten.
	for _, s := range states {
		if known[s.Project] || bad[s.Project] != nil {
			continue
		}
		if err := c.St.Update(ctx, func(tx *store.Tx) error {
			if err := tx.DeleteSchedule(ctx, s.Project); err != nil {
				return err
			}
			return tx.Event(ctx, store.Event{Project: s.Project, Kind: ScheduleEvent, Message: "schedule: removed from project.yaml; no more scheduled runs"})
		}); err != nil {
			return wake, err
		}
	}
	return wake, nil
}

// scheduleKey is a schedule as recorded: a change of project.yaml's
// schedule: starts it afresh.
func scheduleKey(sp schedule.Spec) string {
	b, _ := json.Marshal(sp)
	return string(b)
}

// checkSchedule decides and acts for one scheduled project.
func (c *Schedules) checkSchedule(ctx context.Context, f spec.Scheduled, now time.Time, recorded map[string]store.ScheduleState, start startFunc) (time.Time, error) {
	sch, err := schedule.Parse(f.Schedule, time.Local)
	if err != nil {
		return time.Time{}, err
	}
	sch.Backoff = c.Backoff
	rec, found := recorded[f.Name]
	if !found {
		rec = store.ScheduleState{Project: f.Name}
	}
	was := rec
	key := scheduleKey(f.Schedule)
	var notes []string
	if !found || rec.Spec != key {
		// New, or changed in project.yaml: from now on, as written.
		enabled := !found || rec.Enabled
		msg := "schedule: added"
		if found {
			msg = "schedule: changed in project.yaml; it starts afresh"
		}
		rec = store.ScheduleState{Project: f.Name, Enabled: enabled, Spec: key, LastAt: rec.LastAt, LastRun: rec.LastRun,
			LastResult: rec.LastResult, Skipped: rec.Skipped, CatchUps: rec.CatchUps}
		if enabled {
			rec.NextAt = firstDue(sch, rec, now)
		} else {
			rec.DisabledReason = recorded[f.Name].DisabledReason // it stays disabled, for the same reason
		}
		notes = append(notes, msg+nextNote(rec.NextAt))
	}
	p, err := c.St.Project(ctx, f.Name)
	started := err == nil
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return time.Time{}, err
	}
	// A run that is going, or that the operator stopped (dispatch stop
	// stands until dispatch start resumes it), is not started over.
	stopped := started && p.State == domain.ProjectStopped
	state := schedule.State{Enabled: rec.Enabled, NextAt: rec.NextAt, Failures: rec.Failures,
		Running: started && (p.State == domain.ProjectActive || stopped)}
	// The last scheduled run ended since the last check: back off after a
	// failure.
	if rec.LastRun > 0 && rec.LastResult == "" && started {
		if ended, ok, err := c.runEnded(ctx, f.Name, rec.LastRun); err != nil {
			return time.Time{}, err
		} else if ok {
			state = schedule.Finished(sch, state, ended.Result == domain.ResultPassed, ended.FinishedAt)
			if !rec.Enabled {
				state.NextAt = time.Time{} // enable sets it afresh
			}
			rec.LastResult, rec.Failures, rec.NextAt = ended.Result, state.Failures, state.NextAt
			switch {
			case ended.Result == domain.ResultPassed:
			case rec.Enabled && !state.Enabled:
				notes = append(notes, c.breakerTrips(&rec))
			default:
				notes = append(notes, fmt.Sprintf("schedule: run %d failed (%d in a row); the next scheduled run waits until %s",
					rec.LastRun, state.Failures, state.NextAt.Local().Format(time.RFC3339)))
			}
		}
	}
	d := schedule.Decide(sch, state, now)
	rec.NextAt = d.State.NextAt
	var so *control.StartOptions
	switch d.Kind {
	case schedule.Skip:
		rec.Skipped++
		why := fmt.Sprintf("run %d still runs (no overlap)", p.Run)
		if stopped {
			why = fmt.Sprintf("run %d was stopped by the operator (dispatch start %s resumes it)", p.Run, f.Name)
		}
		note := fmt.Sprintf("schedule: run due at %s skipped: %s%s", state.NextAt.Local().Format(time.RFC3339), why, nextNote(rec.NextAt))
		notes = append(notes, note)
		c.notice(f.Name, notify.ScheduleSkipped, strings.TrimPrefix(note, "schedule: "))
	case schedule.Start, schedule.CatchUp:
		so = &control.StartOptions{Trigger: control.TriggerSchedule, Fresh: !f.Schedule.Reuse}
		if d.Kind == schedule.CatchUp {
			so.Trigger = control.TriggerCatchUp
			rec.CatchUps++
		}
	}
	if so == nil {
		if found && len(notes) == 0 && sameSchedule(was, rec) {
			return rec.NextAt, nil // nothing to record: no write every second
		}
		return rec.NextAt, c.recordSchedule(ctx, rec, notes)
	}
	return c.startScheduled(ctx, f, sch, state, d, rec, notes, *so, now, start)
}

// startScheduled begins the scheduled run d decided for f: the decision
// is recorded first (a daemon killed while the run begins does not begin
// it twice), then the run starts; a run that cannot start fails this
// occurrence. The notes go with the run they began.
func (c *Schedules) startScheduled(ctx context.Context, f spec.Scheduled, sch *schedule.Schedule, state schedule.State, d schedule.Decision,
	rec store.ScheduleState, notes []string, so control.StartOptions, now time.Time, start startFunc) (time.Time, error) {
	rec.LastAt, rec.LastResult = now, ""
	msg := fmt.Sprintf("schedule: starting a run (due %s)", state.NextAt.Local().Format(time.RFC3339))
	if d.Kind == schedule.CatchUp {
		msg = fmt.Sprintf("schedule: one catch-up run for %d occurrences missed while no daemon ran (the first due %s)",
			d.Missed, state.NextAt.Local().Format(time.RFC3339))
	}
	notes = append(notes, msg+nextNote(rec.NextAt))
	if err := c.recordSchedule(ctx, rec, nil); err != nil {
		return rec.NextAt, err
	}
	out, err := start(ctx, f.Name, so)
	if err != nil {
		// A project that does not load (a broken spec) fails this run.
		st := schedule.Finished(sch, schedule.State{Enabled: rec.Enabled, NextAt: rec.NextAt, Failures: rec.Failures}, false, now)
		rec.LastResult, rec.Failures, rec.NextAt = domain.ResultFailed, st.Failures, st.NextAt
		note := fmt.Sprintf("schedule: the run could not start: %v; next try %s", err, rec.NextAt.Local().Format(time.RFC3339))
		if !st.Enabled {
			note = fmt.Sprintf("schedule: the run could not start: %v; %s", err, strings.TrimPrefix(c.breakerTrips(&rec), "schedule: "))
		}
		return rec.NextAt, c.recordSchedule(ctx, rec, []string{note})
	}
	c.Log.Info("scheduled run started", keyProject, f.Name, "trigger", so.Trigger, "message", out)
	c.runBegun = true
	if p, err := c.St.Project(ctx, f.Name); err == nil {
		rec.LastRun = p.Run
		if p.State == domain.ProjectDone {
			rec.LastResult = p.Result // every result reused: it ended at once
			if p.Result != domain.ResultPassed {
				rec.Failures++
				if schedule.Broken(sch, schedule.State{Failures: rec.Failures}) {
					notes = append(notes, c.breakerTrips(&rec))
				}
			} else {
				rec.Failures = 0
			}
		}
	}
	// The notes go with the run they began.
	return rec.NextAt, c.recordSchedule(ctx, rec, notes)
}

// breakerTrips disables rec, whose failures in a row reached its
// max_failures, and notes the notification; it returns the event's text.
func (c *Schedules) breakerTrips(rec *store.ScheduleState) string {
	rec.Enabled, rec.NextAt = false, time.Time{}
	rec.DisabledReason = BrokenReason(rec.Project, rec.Failures, rec.LastRun)
	c.notice(rec.Project, notify.ScheduleDisabled, "schedule disabled: "+rec.DisabledReason)
	return "schedule: disabled: " + rec.DisabledReason
}

// firstDue is when a schedule enabled (or changed) at now is first due:
// an at: that already ran and passed is not due again.
func firstDue(sch *schedule.Schedule, rec store.ScheduleState, now time.Time) time.Time {
	if at, once := sch.At(); once && rec.LastResult == domain.ResultPassed && !rec.LastAt.Before(at) {
		return time.Time{}
	}
	first, _ := sch.First(now)
	return first
}

// sameSchedule reports whether two records of a schedule say the same.
func sameSchedule(a, b store.ScheduleState) bool {
	same := a.NextAt.Equal(b.NextAt) && a.LastAt.Equal(b.LastAt)
	var zero time.Time
	a.NextAt, a.LastAt, a.UpdatedAt = zero, zero, zero
	b.NextAt, b.LastAt, b.UpdatedAt = zero, zero, zero
	return same && a == b
}

func nextNote(next time.Time) string {
	if next.IsZero() {
		return "; no run is due after it"
	}
	return "; next run " + next.Local().Format(time.RFC3339)
}

// runEnded returns run n of project once it has ended.
func (c *Schedules) runEnded(ctx context.Context, project string, n int) (domain.Project, bool, error) {
	at, _, err := c.St.AtRun(ctx, project, n)
	var re *store.RunRangeError
	if errors.As(err, &re) {
		return domain.Project{}, false, nil
	}
	if err != nil {
		return domain.Project{}, false, err
	}
	p, err := at.Project(ctx, project)
	if err != nil {
		return p, false, err
	}
	return p, p.State == domain.ProjectDone, nil
}

func (c *Schedules) recordSchedule(ctx context.Context, rec store.ScheduleState, notes []string) error {
	return c.St.Update(ctx, func(tx *store.Tx) error {
		if err := tx.PutSchedule(ctx, rec); err != nil {
			return err
		}
		for _, n := range notes {
			if err := tx.Event(ctx, store.Event{Project: rec.Project, Kind: ScheduleEvent, Message: n}); err != nil {
				return err
			}
		}
		return nil
	})
}

// SetEnabled enables or disables a project's schedule (`dispatch
// schedule enable|disable`). Enabling starts it afresh from now: the
// occurrences it missed while disabled are not caught up.
func SetEnabled(ctx context.Context, st *store.Store, specsDir, project string, enabled bool, now time.Time) (string, error) {
	sp, err := spec.LoadSchedule(specsDir, project)
	var unknown *spec.UnknownProjectError
	switch {
	case errors.As(err, &unknown):
		return "", &control.OpError{Msg: err.Error()}
	case err != nil:
		return "", &control.OpError{Msg: err.Error()}
	case sp == nil:
		return "", &control.OpError{Msg: fmt.Sprintf("project %s has no schedule: in its project.yaml (add one, e.g. schedule: {every: 6h})", project)}
	}
	sch, err := schedule.Parse(*sp, time.Local)
	if err != nil {
		return "", &control.OpError{Msg: err.Error()}
	}
	var msg string
	err = st.Update(ctx, func(tx *store.Tx) error {
		rec, _, err := tx.Schedule(ctx, project)
		if err != nil {
			return err
		}
		if rec.Enabled == enabled && rec.Spec != "" {
			msg = fmt.Sprintf("the schedule of %s is already %s", project, enabledWord(enabled))
			return nil
		}
		broken := rec.DisabledReason != "" && rec.Failures > 0
		rec.Enabled, rec.Spec, rec.NextAt, rec.DisabledReason = enabled, scheduleKey(*sp), time.Time{}, OperatorReason(project)
		if enabled {
			rec.Failures, rec.DisabledReason = 0, ""
			rec.NextAt = firstDue(sch, rec, now)
		}
		msg = fmt.Sprintf("the schedule of %s is %s", project, enabledWord(enabled))
		if enabled && broken {
			msg += " (its count of failed runs is reset)"
		}
		if enabled {
			msg += nextNote(rec.NextAt)
		}
		if err := tx.PutSchedule(ctx, rec); err != nil {
			return err
		}
		return tx.Event(ctx, store.Event{Project: project, Kind: ScheduleEvent, Message: "schedule: " + enabledWord(enabled) + " by the operator"})
	})
	return msg, err
}

func enabledWord(enabled bool) string {
	if enabled {
		return "enabled"
	}
	return "disabled"
}

// Between is the daemon's part of the control loop, called after each
// tick (controller.Options.Between): it checks the schedules with Tick,
// beginning the runs that are due with start, and returns when the loop
// should look again and whether it began a run, whose tasks the next tick
// claims at once. A failed check is logged and tried again at the next
// call.
func (c *Schedules) Between(ctx context.Context, start startFunc) (due time.Time, begun bool) {
	due, begun, err := c.Tick(ctx, start)
	if err != nil {
		c.Log.Error("schedules not checked; trying again at the next tick", "err", err)
	}
	return due, begun
}

// SetEnabled is the package's SetEnabled for a `dispatch schedule
// enable|disable` handed to the daemon (controller.Options.SetSchedule):
// the next Tick looks at the schedules at once.
func (c *Schedules) SetEnabled(ctx context.Context, project string, enabled bool, now time.Time) (string, error) {
	msg, err := SetEnabled(ctx, c.St, c.SpecsDir, project, enabled, now)
	c.CheckNow()
	return msg, err
}

// Tick checks the schedules, not more often than scheduleCheckGap,
// and returns when the daemon should look again: when the next run is due,
// or at the next check; and whether it began a run, whose tasks a tick
// should claim at once.
func (c *Schedules) Tick(ctx context.Context, start startFunc) (next time.Time, begun bool, err error) {
	now := c.Now()
	if now.Before(c.nextSchedule) {
		return c.nextSchedule, false, nil
	}
	c.nextSchedule = now.Add(scheduleCheckGap)
	c.runBegun = false
	due, err := c.Check(ctx, start)
	begun = c.runBegun
	if err != nil || due.IsZero() {
		// A schedule added to a project.yaml is seen at the next poll.
		return time.Time{}, begun, err
	}
	if due.Before(c.nextSchedule) {
		return c.nextSchedule, begun, nil
	}
	return due, begun, nil
}
