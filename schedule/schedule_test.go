package schedule

import (
	"errors"
	"strings"
	"testing"
	"time"
)

var paris = mustLoad("Europe/Paris")

func mustLoad(name string) *time.Location {
	l, err := time.LoadLocation(name)
	if err != nil {
		panic(err)
	}
	return l
}

func TestParseRefusesBadSchedules(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		spec  Spec
		field string
		msg   string
	}{
		{"nothing", Spec{}, "schedule", "none of cron, every and at"},
		{"two kinds", Spec{Cron: "0 3 * * *", Every: time.Hour}, "schedule", "more than one"},
		{"three kinds", Spec{Cron: "0 3 * * *", Every: time.Hour, At: "2026-12-01T09:00"}, "schedule", "more than one"},
		{"bad cron", Spec{Cron: "0 25 * * *"}, "cron", "is not a cron expression"},
		{"six fields", Spec{Cron: "0 0 3 * * *"}, "cron", "is not a cron expression"},
		{"words", Spec{Cron: "every day at 3"}, "cron", "is not a cron expression"},
		{"zone in cron", Spec{Cron: "CRON_TZ=UTC 0 3 * * *"}, "cron", "names its zone"},
		{"unknown zone", Spec{Cron: "0 3 * * *", Timezone: "Mars/Olympus"}, "timezone", "not a known time zone"},
		{"Local is no zone name", Spec{Cron: "0 3 * * *", Timezone: "Local"}, "timezone", "not a known time zone"},
		{"zone for every", Spec{Every: time.Hour, Timezone: "UTC"}, "timezone", "for cron and at"},
		{"every too short", Spec{Every: 9 * time.Second}, "every", "shorter than 10s"},
		{"every negative", Spec{Every: -time.Hour}, "every", "shorter than 10s"},
		{"at not a time", Spec{At: "tomorrow"}, "at", "is not a date and time"},
		{"at without time", Spec{At: "2026-12-01"}, "at", "is not a date and time"},
		{"@every is no cron", Spec{Cron: "@every 2s"}, "cron", "an interval"},
		{"a date that never comes", Spec{Cron: "0 0 30 2 *"}, "cron", "never comes"},
	}
	for _, tc := range tests {
		_, err := Parse(tc.spec, time.UTC)
		var p *Problem
		if !errors.As(err, &p) || p.Field != tc.field || !strings.Contains(p.Msg, tc.msg) || p.Fix == "" {
			t.Errorf("%s: %v (%+v), want a problem with %s: %q and a fix", tc.name, err, p, tc.field, tc.msg)
		}
	}
}

func TestNext(t *testing.T) {
	t.Parallel()
	utc := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	tests := []struct {
		name  string
		spec  Spec
		local *time.Location
		after string
		want  string // "" for none
	}{
		{"cron in UTC", Spec{Cron: "0 3 * * *", Timezone: "UTC"}, time.UTC, "2026-11-25T02:59:00Z", "2026-11-25T03:00:00Z"},
		{"cron strictly after", Spec{Cron: "0 3 * * *", Timezone: "UTC"}, time.UTC, "2026-11-25T03:00:00Z", "2026-11-26T03:00:00Z"},
		{"cron in a zone", Spec{Cron: "0 3 * * *", Timezone: "Europe/Paris"}, time.UTC, "2026-11-25T00:00:00Z", "2026-11-25T02:00:00Z"},
		{"cron in the controller's zone", Spec{Cron: "0 3 * * *"}, paris, "2026-11-25T00:00:00Z", "2026-11-25T02:00:00Z"},
		// 2026-03-29 02:00 CET jumps to 03:00 CEST: 02:30 does not exist
		// that day; cron runs it right after the jump, not a day later.
		{"cron in the hour the spring change skips", Spec{Cron: "30 2 * * *", Timezone: "Europe/Paris"}, time.UTC, "2026-03-28T02:00:00Z", "2026-03-29T01:30:00Z"},
		{"cron the day after the spring change", Spec{Cron: "30 2 * * *", Timezone: "Europe/Paris"}, time.UTC, "2026-03-29T01:30:00Z", "2026-03-30T00:30:00Z"},
		// 2026-10-25 03:00 CEST goes back to 02:00 CET: 02:30 comes twice;
		// a daily job runs once.
		{"cron in the hour the autumn change repeats", Spec{Cron: "30 2 * * *", Timezone: "Europe/Paris"}, time.UTC, "2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"},
		{"cron after the first of a repeated hour", Spec{Cron: "30 2 * * *", Timezone: "Europe/Paris"}, time.UTC, "2026-10-24T12:00:00Z", "2026-10-25T00:30:00Z"},
		// An hourly job follows real time: both 02:00s.
		{"hourly in the repeated hour", Spec{Cron: "0 * * * *", Timezone: "Europe/Paris"}, time.UTC, "2026-10-25T00:00:00Z", "2026-10-25T01:00:00Z"},
		{"at in the skipped hour", Spec{At: "2026-03-08T02:30", Timezone: "America/New_York"}, time.UTC, "2026-03-01T00:00:00Z", "2026-03-08T07:30:00Z"},
		{"at with an offset, no seconds", Spec{At: "2026-12-01T09:00+02:00"}, time.UTC, "2026-11-25T00:00:00Z", "2026-12-01T07:00:00Z"},
		{"descriptor", Spec{Cron: "@hourly", Timezone: "UTC"}, time.UTC, "2026-11-25T02:10:00Z", "2026-11-25T03:00:00Z"},
		{"weekdays", Spec{Cron: "0 9 * * 1-5", Timezone: "UTC"}, time.UTC, "2026-11-27T10:00:00Z", "2026-11-30T09:00:00Z"},
		{"every", Spec{Every: 6 * time.Hour}, time.UTC, "2026-11-25T02:00:00Z", "2026-11-25T08:00:00Z"},
		{"at, before", Spec{At: "2026-12-01T09:00", Timezone: "Europe/Paris"}, time.UTC, "2026-11-25T00:00:00Z", "2026-12-01T08:00:00Z"},
		{"at with an offset", Spec{At: "2026-12-01T09:00:00+02:00"}, time.UTC, "2026-11-25T00:00:00Z", "2026-12-01T07:00:00Z"},
		{"at, after", Spec{At: "2026-12-01T09:00"}, time.UTC, "2026-12-01T09:00:00Z", ""},
	}
	for _, tc := range tests {
		s, err := Parse(tc.spec, tc.local)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		got, ok := s.Next(utc(tc.after))
		switch {
		case tc.want == "" && ok:
			t.Errorf("%s: next %s, want none", tc.name, got)
		case tc.want != "" && (!ok || !got.Equal(utc(tc.want))):
			t.Errorf("%s: next %s (%v), want %s", tc.name, got.UTC().Format(time.RFC3339), ok, tc.want)
		}
	}
}

func TestDecide(t *testing.T) {
	t.Parallel()
	base := time.Date(2026, 11, 25, 3, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return base.Add(d) }
	every, err := Parse(Spec{Every: time.Hour}, time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	once, err := Parse(Spec{At: "2026-11-25T03:00"}, time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		s      *Schedule
		st     State
		now    time.Time
		kind   Kind
		next   time.Time
		missed int
	}{
		{"not yet", every, State{Enabled: true, NextAt: at(0)}, at(-time.Second), Wait, at(0), 0},
		{"disabled", every, State{Enabled: false, NextAt: at(0)}, at(time.Minute), Wait, at(0), 0},
		{"nothing scheduled", once, State{Enabled: true}, at(time.Minute), Wait, time.Time{}, 0},
		{"due", every, State{Enabled: true, NextAt: at(0)}, at(0), Start, at(time.Hour), 1},
		{"due a little late", every, State{Enabled: true, NextAt: at(0)}, at(time.Minute), Start, at(time.Hour), 1},
		{"the last still runs", every, State{Enabled: true, NextAt: at(0), Running: true}, at(time.Second), Skip, at(time.Hour), 1},
		{"three missed while down: one catch-up", every, State{Enabled: true, NextAt: at(0)}, at(2*time.Hour + time.Minute), CatchUp, at(3 * time.Hour), 3},
		{"missed while running and down", every, State{Enabled: true, NextAt: at(0), Running: true}, at(2*time.Hour + time.Minute), Skip, at(3 * time.Hour), 3},
		{"once, due", once, State{Enabled: true, NextAt: at(0)}, at(time.Minute), Start, time.Time{}, 1},
	}
	for _, tc := range tests {
		d := Decide(tc.s, tc.st, tc.now)
		if d.Kind != tc.kind || !d.State.NextAt.Equal(tc.next) || d.Missed != tc.missed {
			t.Errorf("%s: %s next %s missed %d; want %s next %s missed %d", tc.name, d.Kind, d.State.NextAt, d.Missed, tc.kind, tc.next, tc.missed)
		}
	}
	// A month of every: 10s missed is counted up to a bound, and the next
	// run is from now on.
	fast, _ := Parse(Spec{Every: 10 * time.Second}, time.UTC)
	d := Decide(fast, State{Enabled: true, NextAt: at(0)}, at(30*24*time.Hour))
	if d.Kind != CatchUp || d.Missed != maxCount || !d.State.NextAt.After(at(30*24*time.Hour)) {
		t.Errorf("a month missed: %s missed %d next %s", d.Kind, d.Missed, d.State.NextAt)
	}
}

func TestFinishedBacksOffAfterFailures(t *testing.T) {
	t.Parallel()
	end := time.Date(2026, 11, 25, 3, 5, 0, 0, time.UTC)
	never := 0 // no circuit breaker: the backoff alone
	fast, _ := Parse(Spec{Every: 10 * time.Second, MaxFailures: &never}, time.UTC)
	daily, _ := Parse(Spec{Cron: "0 3 * * *", Timezone: "UTC"}, time.UTC)
	once, _ := Parse(Spec{At: "2026-11-25T03:00"}, time.UTC)
	tomorrow := time.Date(2026, 11, 26, 3, 0, 0, 0, time.UTC)

	// every 10s failing: 60 s, 120 s, 240 s, … at most an hour; a pass
	// resets the count and keeps the next occurrence.
	st := State{Enabled: true, NextAt: end.Add(-time.Minute)}
	for i, want := range []time.Duration{time.Minute, 2 * time.Minute, 4 * time.Minute, 8 * time.Minute, 16 * time.Minute, 32 * time.Minute, time.Hour, time.Hour} {
		st.NextAt = end // as Decide left it, already passed
		st = Finished(fast, st, false, end)
		if got := st.NextAt.Sub(end); got != want || st.Failures != i+1 {
			t.Errorf("failure %d: next after %s (failures %d), want %s", i+1, got, st.Failures, want)
		}
	}
	st = Finished(fast, State{Enabled: true, NextAt: end.Add(10 * time.Second), Failures: 5}, true, end)
	if st.Failures != 0 || !st.NextAt.Equal(end.Add(10*time.Second)) {
		t.Errorf("after a pass: %+v", st)
	}
	// A daily schedule's next occurrence is later than the backoff: kept.
	if st := Finished(daily, State{Enabled: true, NextAt: tomorrow}, false, end); !st.NextAt.Equal(tomorrow) {
		t.Errorf("daily after a failure: next %s, want %s", st.NextAt, tomorrow)
	}
	// A failed at: is tried again after the backoff; a passed one is done.
	if st := Finished(once, State{Enabled: true}, false, end); !st.NextAt.Equal(end.Add(time.Minute)) {
		t.Errorf("at after a failure: next %s", st.NextAt)
	}
	if st := Finished(once, State{Enabled: true}, true, end); !st.NextAt.IsZero() || st.Running {
		t.Errorf("at after a pass: %+v", st)
	}
}

// TestBreaker: the failure that makes max_failures in a row disables the
// schedule (nothing due after it); a pass in between starts the count
// again; 0 never disables; the default is DefaultMaxFailures; a shorter
// Backoff (tests) replaces FailureBackoff.
func TestBreaker(t *testing.T) {
	t.Parallel()
	end := time.Date(2026, 11, 25, 3, 5, 0, 0, time.UTC)
	n := func(v int) *int { return &v }
	tests := []struct {
		name     string
		max      *int
		passes   []bool // the runs in order
		enabled  bool
		failures int
	}{
		{"two failures, max 2: disabled", n(2), []bool{false, false}, false, 2},
		{"one failure, max 2: on", n(2), []bool{false}, true, 1},
		{"a pass between: the count starts again", n(2), []bool{false, true, false}, true, 1},
		{"max 1: the first failure", n(1), []bool{false}, false, 1},
		{"0: never", n(0), []bool{false, false, false, false, false, false, false}, true, 7},
		{"default 5: four failures on", nil, []bool{false, false, false, false}, true, 4},
		{"default 5: the fifth disables", nil, []bool{false, false, false, false, false}, false, 5},
	}
	for _, tc := range tests {
		s, err := Parse(Spec{Every: time.Minute, MaxFailures: tc.max}, time.UTC)
		if err != nil {
			t.Fatal(err)
		}
		st := State{Enabled: true, NextAt: end}
		for _, passed := range tc.passes {
			st = Finished(s, st, passed, end)
		}
		if st.Enabled != tc.enabled || st.Failures != tc.failures || !tc.enabled && !st.NextAt.IsZero() || Broken(s, st) == tc.enabled {
			t.Errorf("%s: %+v; want enabled %v, %d failures", tc.name, st, tc.enabled, tc.failures)
		}
	}
	s, _ := Parse(Spec{Every: time.Minute}, time.UTC)
	s.Backoff = time.Second
	if st := Finished(s, State{Enabled: true, NextAt: end.Add(time.Minute)}, false, end); !st.NextAt.Equal(end.Add(time.Minute)) {
		t.Errorf("a shorter backoff under every: 1m: next %s, want the next occurrence", st.NextAt)
	}
	once, _ := Parse(Spec{At: "2026-11-25T03:00"}, time.UTC)
	once.Backoff = time.Second
	if st := Finished(once, State{Enabled: true}, false, end); !st.NextAt.Equal(end.Add(time.Second)) {
		t.Errorf("a shorter backoff under at: next %s, want 1s after the end", st.NextAt)
	}
	for _, bad := range []int{-1, 1001} {
		var p *Problem
		if _, err := Parse(Spec{Every: time.Minute, MaxFailures: n(bad)}, time.UTC); !errors.As(err, &p) || p.Field != "max_failures" {
			t.Errorf("max_failures %d: %v", bad, err)
		}
	}
}
