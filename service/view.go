package service

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/schedule"
	"github.com/dispatch-tool/dispatch/spec"
	"github.com/dispatch-tool/dispatch/store"
)

// ScheduleView is `dispatch schedule --json`.
type ScheduleView struct {
	Schedules []ScheduleEntry `json:"schedules"`
	// Serving says whether a dispatch serve daemon runs on the home.
	Serving bool `json:"serving"`
}

// ScheduleEntry is one scheduled project.
type ScheduleEntry struct {
	Project string `json:"project"`
	// Kind is cron, every or at; Schedule the expression as written.
	Kind     string `json:"kind"`
	Schedule string `json:"schedule"`
	Timezone string `json:"timezone,omitempty"`
	Reuse    bool   `json:"reuse"`
	Enabled  bool   `json:"enabled"`
	// NextAt is when the next run is due ("" for none): as the daemon
	// recorded it, or, before it first ran, as it would be from now.
	NextAt        string `json:"next_at"`
	LastRun       int    `json:"last_run"`
	LastResult    string `json:"last_result"`
	LastStartedAt string `json:"last_started_at"`
	Failures      int    `json:"failures"`
	Skipped       int    `json:"skipped"`
	CatchUps      int    `json:"catch_ups"`
	// Problem is what is wrong with a schedule: that does not read.
	Problem string `json:"problem,omitempty"`
	// DisabledReason says why a disabled schedule is (its failed runs in
	// a row, or the operator), and Enable the command that enables it.
	DisabledReason string `json:"disabled_reason,omitempty"`
	Enable         string `json:"enable,omitempty"`
}

// View lists the scheduled projects of specsDir with what st (nil:
// no database yet) recorded of them; serving says whether a daemon runs.
func View(ctx context.Context, st *store.Store, specsDir string, serving bool, now time.Time) (*ScheduleView, error) {
	found, bad, err := spec.LoadSchedules(specsDir)
	if err != nil {
		return nil, err
	}
	recorded := map[string]store.ScheduleState{}
	if st != nil {
		scs, err := st.Schedules(ctx)
		if err != nil {
			return nil, err
		}
		for _, s := range scs {
			recorded[s.Project] = s
		}
	}
	v := &ScheduleView{Schedules: []ScheduleEntry{}, Serving: serving}
	for _, f := range found {
		sp := f.Schedule
		en := ScheduleEntry{Project: f.Name, Timezone: sp.Timezone, Reuse: sp.Reuse, Enabled: true}
		switch {
		case sp.Cron != "":
			en.Kind, en.Schedule = "cron", sp.Cron
		case sp.Every != 0:
			en.Kind, en.Schedule = "every", sp.Every.String()
		default:
			en.Kind, en.Schedule = "at", sp.At
		}
		rec, ok := recorded[f.Name]
		if ok {
			en.Enabled, en.NextAt = rec.Enabled, rfc3339(rec.NextAt)
			en.LastRun, en.LastResult, en.LastStartedAt = rec.LastRun, rec.LastResult, rfc3339(rec.LastAt)
			en.Failures, en.Skipped, en.CatchUps = rec.Failures, rec.Skipped, rec.CatchUps
			if !rec.Enabled {
				en.DisabledReason, en.Enable = rec.DisabledReason, "dispatch schedule enable "+f.Name
				if en.DisabledReason == "" {
					en.DisabledReason = OperatorReason(f.Name)
				}
			}
			if rec.LastRun > 0 && rec.LastResult == "" {
				// Ended since the daemon last looked (or with no daemon).
				en.LastResult = domain.ResultRunning
				if at, _, err := st.AtRun(ctx, f.Name, rec.LastRun); err == nil {
					if p, err := at.Project(ctx, f.Name); err == nil && p.State == domain.ProjectDone {
						en.LastResult = p.Result
					}
				}
			}
		} else if sch, err := schedule.Parse(sp, time.Local); err == nil {
			if first, ok := sch.First(now); ok {
				en.NextAt = rfc3339(first)
			}
		}
		v.Schedules = append(v.Schedules, en)
	}
	for _, name := range slices.Sorted(maps.Keys(bad)) {
		en := ScheduleEntry{Project: name, Problem: bad[name].Error()}
		if rec, ok := recorded[name]; ok {
			en.Enabled, en.LastRun, en.LastResult = rec.Enabled, rec.LastRun, rec.LastResult
		}
		v.Schedules = append(v.Schedules, en)
	}
	return v, nil
}

// rfc3339 is t in UTC to the second, "" for none (the schedule view's
// times).
func rfc3339(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}
