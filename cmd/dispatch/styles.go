package main

import (
	"github.com/charmbracelet/lipgloss"
	"github.com/muesli/termenv"

	"github.com/dispatch-tool/dispatch/store"
)

// styles holds every style the CLI uses, built once; with colour off they
// render plain text.
type styles struct {
	color  bool
	header lipgloss.Style
	dim    lipgloss.Style
	ok     lipgloss.Style
	bad    lipgloss.Style
	warn   lipgloss.Style
	active lipgloss.Style
}

func newStyles(color bool) styles {
	r := lipgloss.NewRenderer(nil)
	if color {
		r.SetColorProfile(termenv.ANSI256)
	} else {
		r.SetColorProfile(termenv.Ascii)
	}
	return styles{
		color:  color,
		header: r.NewStyle().Bold(true),
		dim:    r.NewStyle().Faint(true),
		ok:     r.NewStyle().Foreground(lipgloss.Color("2")),
		bad:    r.NewStyle().Foreground(lipgloss.Color("1")).Bold(true),
		warn:   r.NewStyle().Foreground(lipgloss.Color("3")),
		active: r.NewStyle().Foreground(lipgloss.Color("6")),
	}
}

// status colours a task status.
func (s styles) status(st string) string {
	switch st {
	case store.Completed:
		return s.ok.Render(st)
	case store.Failed:
		return s.bad.Render(st)
	case store.Blocked, store.Canceled, store.Lost:
		return s.warn.Render(st)
	case store.Running, store.Claimed:
		return s.active.Render(st)
	}
	return st
}
