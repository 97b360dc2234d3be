// Package schedule decides when a scheduled project runs (issue 14):
// when its next run is due under `cron:` (with a timezone), `every:` or
// `at:`, whether a due run starts, is skipped because the last one still
// runs, or is the one catch-up run for occurrences missed while the daemon
// was down, and how far a failed run backs the next start off. It holds
// no clock and does no I/O: the daemon passes the time in, records the
// decision, then acts, so that every rule is table-tested without
// sleeping through minutes.
//
// Cron expressions are parsed by robfig/cron/v3 (five fields, or a
// descriptor such as @daily), never by hand.
package schedule

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// MinEvery is the shortest `every:` a schedule may have.
const MinEvery = 10 * time.Second

// Backoff after a failed run: the next start comes no sooner than
// FailureBackoff after its end, doubled for each failure in a row, at most
// MaxBackoff (the seed's "+60 s, avoiding a hot loop", growing).
const (
	FailureBackoff = 60 * time.Second
	MaxBackoff     = 1 * time.Hour
)

// Spec is project.yaml's schedule: exactly one of Cron, Every and At.
type Spec struct {
	Cron string
	// Timezone is an IANA name for Cron and At ("" is the controller's
	// local time).
	Timezone string
	Every    time.Duration
	// At is a local date and time in Timezone ("2026-12-01T09:00").
	At string
	// Reuse lets a scheduled run reuse unchanged tasks, as a run started
	// by hand does; by default a scheduled run runs every task afresh.
	Reuse bool
	// MaxFailures is how many scheduled runs may fail in a row before the
	// schedule is disabled (the circuit breaker); nil is
	// DefaultMaxFailures, 0 never disables it.
	MaxFailures *int `json:",omitempty"`
}

// DefaultMaxFailures is max_failures when a schedule does not say.
const DefaultMaxFailures = 5

// FailureLimit is the failures in a row that disable the schedule; 0 for
// never.
func (s Spec) FailureLimit() int {
	if s.MaxFailures == nil {
		return DefaultMaxFailures
	}
	return *s.MaxFailures
}

// maxMaxFailures bounds max_failures (a bigger number is "never": write 0).
const maxMaxFailures = 1000

// Problem is a bad schedule: what is wrong and how to fix it. Field names
// the key it is about (cron, timezone, every, at).
type Problem struct {
	Field, Msg, Fix string
}

func (p *Problem) Error() string { return p.Msg }

// Schedule is a checked Spec.
type Schedule struct {
	Spec
	loc  *time.Location
	cron cron.Schedule
	// wall is set for a cron schedule whose hour is fixed (daily at 03:00,
	// not hourly): it is reckoned on the wall clock of its zone, so that a
	// daylight-saving change neither skips it (the hour that does not
	// exist: it runs right after the jump) nor runs it twice (the hour
	// that repeats: once), as cron does. An hourly one follows real time.
	wall bool
	at   time.Time
	// Backoff is the wait after a first failure (FailureBackoff when
	// zero); tests of the daemon shorten it.
	Backoff time.Duration
}

var parser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Parse checks spec. local is the controller's time zone, used when
// Timezone is empty.
func Parse(spec Spec, local *time.Location) (*Schedule, error) {
	kinds := 0
	for _, set := range []bool{spec.Cron != "", spec.Every != 0, spec.At != ""} {
		if set {
			kinds++
		}
	}
	switch {
	case kinds == 0:
		return nil, &Problem{Field: "schedule", Msg: "schedule has none of cron, every and at",
			Fix: `write one: cron: "0 3 * * *", every: 6h, or at: 2026-12-01T09:00`}
	case kinds > 1:
		return nil, &Problem{Field: "schedule", Msg: "schedule has more than one of cron, every and at",
			Fix: "keep one kind of schedule: cron (with timezone), every, or at"}
	}
	if m := spec.MaxFailures; m != nil && (*m < 0 || *m > maxMaxFailures) {
		return nil, &Problem{Field: "max_failures", Msg: fmt.Sprintf("max_failures %d is not between 0 and %d", *m, maxMaxFailures),
			Fix: fmt.Sprintf("give the failed runs in a row that disable the schedule, e.g. max_failures: %d (0: never disable it)", DefaultMaxFailures)}
	}
	s := &Schedule{Spec: spec, loc: local}
	if spec.Timezone != "" {
		if spec.Every != 0 {
			return nil, &Problem{Field: "timezone", Msg: "timezone is for cron and at, not every",
				Fix: "remove timezone: an interval is the same in every zone"}
		}
		loc, err := time.LoadLocation(spec.Timezone)
		if err != nil || spec.Timezone == "Local" {
			return nil, &Problem{Field: "timezone", Msg: fmt.Sprintf("timezone %q is not a known time zone", spec.Timezone),
				Fix: "give an IANA zone such as UTC, Europe/Paris or America/New_York, or leave it out for the controller's"}
		}
		s.loc = loc
	}
	switch {
	case spec.Cron != "":
		if strings.HasPrefix(strings.TrimSpace(spec.Cron), "TZ=") || strings.HasPrefix(strings.TrimSpace(spec.Cron), "CRON_TZ=") {
			return nil, &Problem{Field: "cron", Msg: "cron names its zone inside the expression",
				Fix: "put the zone in timezone: and keep cron to its five fields"}
		}
		if strings.HasPrefix(strings.TrimSpace(spec.Cron), "@every") {
			return nil, &Problem{Field: "cron", Msg: "cron @every is an interval, not a cron expression",
				Fix: fmt.Sprintf("write every: instead (at least %s), e.g. every: 6h", MinEvery)}
		}
		c, err := parser.Parse(spec.Cron)
		if err != nil {
			return nil, &Problem{Field: "cron", Msg: fmt.Sprintf("cron %q is not a cron expression: %v", spec.Cron, err),
				Fix: `five fields: minute hour day-of-month month day-of-week, e.g. "0 3 * * *" (03:00 every day) or "*/15 * * * 1-5"; or @daily, @hourly`}
		}
		s.cron, s.wall = c, fixedHour(spec.Cron)
		if next, _ := s.Next(time.Now()); next.IsZero() {
			return nil, &Problem{Field: "cron", Msg: fmt.Sprintf("cron %q never comes (no such date in the next years)", spec.Cron),
				Fix: `check the day of the month and the month: "0 0 30 2 *" asks for February 30th`}
		}
	case spec.Every != 0:
		if spec.Every < MinEvery {
			return nil, &Problem{Field: "every", Msg: fmt.Sprintf("every %s is shorter than %s", spec.Every, MinEvery),
				Fix: fmt.Sprintf("give at least %s, e.g. every: 6h", MinEvery)}
		}
	default:
		at, err := parseAt(spec.At, s.loc)
		if err != nil {
			return nil, &Problem{Field: "at", Msg: fmt.Sprintf("at %q is not a date and time: %v", spec.At, err),
				Fix: "write the local date and time as 2026-12-01T09:00 (seconds and a zone offset are allowed)"}
		}
		s.at = at
	}
	return s, nil
}

// parseAt reads 2026-12-01T09:00, with seconds or a zone offset if given.
// A local time that does not exist (the hour a daylight-saving change
// skips) is the moment right after the jump.
func parseAt(v string, loc *time.Location) (time.Time, error) {
	v = strings.TrimSpace(v)
	for _, layout := range []string{time.RFC3339, "2006-01-02T15:04Z07:00"} {
		if t, err := time.Parse(layout, v); err == nil {
			return t, nil
		}
	}
	for _, layout := range []string{"2006-01-02T15:04:05", "2006-01-02T15:04", "2006-01-02 15:04"} {
		if w, err := time.Parse(layout, v); err == nil {
			return onWallClock(w, loc), nil
		}
	}
	return time.Time{}, errors.New("want YYYY-MM-DDTHH:MM")
}

// fixedHour reports whether a cron expression names its hours (or is a
// descriptor of fixed time: @daily, @weekly, …), as against every hour.
func fixedHour(expr string) bool {
	f := strings.Fields(expr)
	switch {
	case len(f) == 0:
		return false
	case strings.HasPrefix(f[0], "@"):
		return f[0] != "@hourly"
	case len(f) < 2:
		return false
	}
	return !strings.Contains(f[1], "*")
}

// wallClock is t's local date and time in loc, written as if it were UTC:
// a clock without daylight-saving changes, to reckon a cron on.
func wallClock(t time.Time, loc *time.Location) time.Time {
	l := t.In(loc)
	return time.Date(l.Year(), l.Month(), l.Day(), l.Hour(), l.Minute(), l.Second(), l.Nanosecond(), time.UTC)
}

// onWallClock is the moment loc's clocks show w (a wallClock). In the hour
// a daylight-saving change repeats it is the first of the two; in the hour the
// change skips, the moment the clock would show w had it not jumped: just
// after the jump.
func onWallClock(w time.Time, loc *time.Location) time.Time {
	t := time.Date(w.Year(), w.Month(), w.Day(), w.Hour(), w.Minute(), w.Second(), w.Nanosecond(), loc)
	if wallClock(t, loc).Equal(w) {
		// In a repeated hour, the first time the clock shows it (Go may
		// give either; shifts are at most 2 hours).
		for _, d := range []time.Duration{-2 * time.Hour, -time.Hour, -30 * time.Minute} {
			if e := t.Add(d); wallClock(e, loc).Equal(w) {
				return e
			}
		}
		return t
	}
	// Skipped: read w with the offset in force before the jump.
	_, before := t.Add(-3 * time.Hour).Zone()
	return w.Add(-time.Duration(before) * time.Second)
}

// At is an at: schedule's time; false for the other kinds.
func (s *Schedule) At() (time.Time, bool) {
	return s.at, s.cron == nil && s.Every == 0
}

// Location is where the schedule's times are read.
func (s *Schedule) Location() *time.Location { return s.loc }

// Next is the first occurrence strictly after t; false when there is none
// (an `at:` schedule whose time has passed).
func (s *Schedule) Next(t time.Time) (time.Time, bool) {
	switch {
	case s.cron != nil && s.wall:
		next := s.cron.Next(wallClock(t, s.loc))
		if next.IsZero() {
			return next, true
		}
		return onWallClock(next, s.loc), true
	case s.cron != nil:
		return s.cron.Next(t.In(s.loc)), true
	case s.Every != 0:
		return t.Add(s.Every), true
	default:
		return s.at, t.Before(s.at)
	}
}

// First is the first occurrence of a schedule enabled at now: the next
// cron time, now + every, or the at time (which may have passed: it is
// then due at once).
func (s *Schedule) First(now time.Time) (time.Time, bool) {
	if s.Every == 0 && s.cron == nil {
		return s.at, true
	}
	return s.Next(now)
}

// State is what the daemon records of a scheduled project.
type State struct {
	Enabled bool
	// NextAt is when the next run is due; zero when none is (an `at:`
	// that ran, a disabled schedule).
	NextAt time.Time
	// Running is set while a run of the project is going, whoever
	// started it.
	Running bool
	// Failures counts the scheduled runs that failed in a row.
	Failures int
}

// Kind of a decision.
type Kind int

const (
	Wait    Kind = iota // nothing to do until NextAt (or ever, when zero)
	Start               // start a run now
	CatchUp             // start one run now for the occurrences missed while the daemon was down
	Skip                // a run was due while the last still runs: skip it, record the skip
)

func (k Kind) String() string {
	return [...]string{"wait", "start", "catch-up", "skip"}[k]
}

// Decision is what Decide says: the action now, the state to record, and,
// for a skip or a catch-up, how many occurrences it stands for.
type Decision struct {
	Kind   Kind
	State  State
	Missed int
}

// maxCount bounds the counting of missed occurrences (every: 10s over a
// month offline is a quarter of a million).
const maxCount = 10000

// Decide is what to do at now.
func Decide(s *Schedule, st State, now time.Time) Decision {
	if !st.Enabled || st.NextAt.IsZero() || now.Before(st.NextAt) {
		return Decision{Kind: Wait, State: st}
	}
	// Due. Count the occurrences up to now: more than one means the
	// daemon was not there for some of them.
	missed := 1
	next, ok := s.Next(st.NextAt)
	for ok && !next.After(now) && missed < maxCount {
		missed++
		next, ok = s.Next(next)
	}
	if ok && !next.After(now) {
		next, ok = s.Next(now) // past the count: from now on
	}
	out := st
	out.NextAt = time.Time{}
	if ok {
		out.NextAt = next
	}
	switch {
	case st.Running:
		return Decision{Kind: Skip, State: out, Missed: missed}
	case missed > 1:
		return Decision{Kind: CatchUp, State: out, Missed: missed}
	default:
		return Decision{Kind: Start, State: out, Missed: 1}
	}
}

// Finished is the state after a run that ended at end, passed or not: a
// failure backs the next start off (FailureBackoff after the end, doubled
// for each failure in a row, at most MaxBackoff), and a failed `at:` run
// is tried again after that backoff; a passed one ends the `at:` schedule.
// The failure that makes FailureLimit in a row disables the schedule
// (Broken says so): nothing is due until it is enabled again.
func Finished(s *Schedule, st State, passed bool, end time.Time) State {
	st.Running = false
	if passed {
		// Decide set the next occurrence when the run started (none for
		// an at: schedule, which has now run).
		st.Failures = 0
		return st
	}
	st.Failures++
	if Broken(s, st) {
		st.Enabled, st.NextAt = false, time.Time{}
		return st
	}
	back := FailureBackoff
	if s.Backoff > 0 {
		back = s.Backoff
	}
	for i := 1; i < st.Failures && back < MaxBackoff; i++ {
		back *= 2
	}
	back = min(back, MaxBackoff)
	if earliest := end.Add(back); st.NextAt.IsZero() || st.NextAt.Before(earliest) {
		st.NextAt = earliest
	}
	return st
}

// Broken reports whether st has failed FailureLimit times in a row: the
// circuit breaker disables such a schedule.
func Broken(s *Schedule, st State) bool {
	limit := s.FailureLimit()
	return limit > 0 && st.Failures >= limit
}
