package readmodel

import (
	"fmt"
	"time"

	"github.com/dispatch-tool/dispatch/home"
)

// ControllerView says whether a controller runs for the home, and when the
// last one finished a tick: what every view shows is what that tick saw.
// It is the "controller" object of `status --json`, `nodes --json`, the
// report's JSON and the API (issue 38): without a running controller,
// tasks shown running and nodes shown online are only what was last seen.
type ControllerView struct {
	Running bool `json:"running"`
	// LastSeen is when a controller last finished a tick (RFC 3339; ""
	// when none ever ran on this home).
	LastSeen string `json:"last_seen,omitempty"`
	// Frozen is set, with the controller's PID, when a controller holds
	// the home but its process is stopped (SIGSTOP, Ctrl-Z, a debugger):
	// Running is then false, as nothing is collected or started.
	Frozen bool `json:"frozen,omitempty"`
	PID    int  `json:"pid,omitempty"`
	last   time.Time
}

// ControllerOf is a home's controller state: running as the caller found
// it (a controller of this user answers on the home's control socket:
// control.Running; a killed one does not), and the last tick from
// home.LastTick. It takes no lock and writes nothing.
func ControllerOf(homeDir string, running bool) *ControllerView {
	v := &ControllerView{Running: running, last: home.LastTick(homeDir)}
	v.LastSeen = jsonTime(v.last)
	return v
}

// ControllerFrozen is the state of a home whose controller, process pid,
// holds the home and answers nothing: its process is stopped.
func ControllerFrozen(homeDir string, pid int) *ControllerView {
	v := ControllerOf(homeDir, false)
	v.Frozen, v.PID = true, pid
	return v
}

// Stale reports whether the figures are only what the last controller saw:
// no controller runs.
func (c *ControllerView) Stale() bool { return c != nil && !c.Running }

// LastTick is when a controller last finished a tick (zero: never).
func (c *ControllerView) LastTick() time.Time {
	if c == nil {
		return time.Time{}
	}
	return c.last
}

// Clock is the time of day of the last tick, with the date when it was
// not today: how the text views say "as last seen".
func (c *ControllerView) Clock(now time.Time) string {
	t := c.LastTick()
	if t.IsZero() {
		return "never"
	}
	return Clock(t, now)
}

// Clock is t's time of day, with its date when t is not on now's day.
func Clock(t, now time.Time) string {
	l, n := t.Local(), now.Local()
	if ly, lm, ld := l.Date(); ly == n.Year() && lm == n.Month() && ld == n.Day() {
		return l.Format("15:04")
	}
	return l.Format("2006-01-02 15:04")
}

// Line is the first line of a text view whose figures are stale: what it
// is, since when, and what resumes collecting. project "" names none (the
// views of every project, `dispatch nodes`). "" when a controller runs.
func (c *ControllerView) Line(project string, now time.Time) string {
	if !c.Stale() {
		return ""
	}
	resume := "`dispatch start <project>` or `dispatch serve`"
	if project != "" {
		resume = fmt.Sprintf("`dispatch start %s` or `dispatch serve`", project)
	}
	when := "no controller has run on this home yet"
	if !c.LastTick().IsZero() {
		when = "last tick " + c.Clock(now)
	}
	if c.Frozen {
		return fmt.Sprintf("controller stopped (pid %d is frozen: SIGSTOP or Ctrl-Z; %s): this is what it last saw; `kill -CONT %d` resumes it",
			c.PID, when, c.PID)
	}
	return fmt.Sprintf("no controller is running (%s): this is what it last saw; %s resumes and collects what finished", when, resume)
}
