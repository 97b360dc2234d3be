package main

import (
	"strings"

	"github.com/charmbracelet/lipgloss"
	"github.com/muesli/termenv"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/store"
)

// styles holds every style the CLI uses, built once; with colour off they
// render plain text.
type styles struct {
	color   bool
	plain   lipgloss.Style
	header  lipgloss.Style
	dim     lipgloss.Style
	ok      lipgloss.Style
	bad     lipgloss.Style
	warn    lipgloss.Style
	active  lipgloss.Style
	project lipgloss.Style // a project's name heading its block in the live view
	column  lipgloss.Style // table column headings in the live view
	// Progress bar cells: finished tasks take the colour of their outcome.
	barDone    lipgloss.Style
	barFailed  lipgloss.Style
	barBlocked lipgloss.Style
	barRunning lipgloss.Style
	barEmpty   lipgloss.Style
}

func newStyles(color bool) styles {
	r := lipgloss.NewRenderer(nil)
	if color {
		r.SetColorProfile(termenv.ANSI256)
	} else {
		r.SetColorProfile(termenv.Ascii)
	}
	green, red, yellow, cyan := lipgloss.Color("2"), lipgloss.Color("1"), lipgloss.Color("3"), lipgloss.Color("6")
	return styles{
		color:      color,
		plain:      r.NewStyle(),
		header:     r.NewStyle().Bold(true),
		dim:        r.NewStyle().Faint(true),
		ok:         r.NewStyle().Foreground(green),
		bad:        r.NewStyle().Foreground(red).Bold(true),
		warn:       r.NewStyle().Foreground(yellow),
		active:     r.NewStyle().Foreground(cyan),
		project:    r.NewStyle().Bold(true).Underline(true),
		column:     r.NewStyle().Bold(true).Faint(true),
		barDone:    r.NewStyle().Foreground(green),
		barFailed:  r.NewStyle().Foreground(red),
		barBlocked: r.NewStyle().Foreground(yellow),
		barRunning: r.NewStyle().Foreground(cyan),
		barEmpty:   r.NewStyle().Faint(true),
	}
}

// status colours a task status. The status may be padded with spaces for
// alignment; the padding is kept.
func (s styles) status(st string) string {
	return s.statusStyle(strings.TrimSpace(st)).Render(st)
}

// statusStyle is the style of a task status.
func (s styles) statusStyle(st string) lipgloss.Style {
	switch domain.Status(st) {
	case domain.Completed:
		return s.ok
	case domain.Failed:
		return s.bad
	case domain.Blocked, domain.Canceled, domain.Lost:
		return s.warn
	case domain.Running, domain.Claimed:
		return s.active
	}
	return s.plain
}

// nodeStateStyle is the style of a node state.
func (s styles) nodeStateStyle(state string) lipgloss.Style {
	switch state {
	case store.NodeOnline:
		return s.ok
	case store.NodeOffline:
		return s.bad
	}
	return s.dim
}

// resultStyle is the style of a project's result.
func (s styles) resultStyle(result string) lipgloss.Style {
	switch result {
	case domain.ResultPassed:
		return s.ok
	case domain.ResultFailed:
		return s.bad
	}
	return s.active
}
