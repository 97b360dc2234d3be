package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/ansi"
	"github.com/urfave/cli/v2"
	"golang.org/x/term"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/internal/termtext"
	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/readmodel"
	"github.com/dispatch-tool/dispatch/store"
)

// Terminal control for the full-screen view.
const (
	enterScreen = "\x1b[?1049h\x1b[?25l" // alternate screen, cursor hidden
	leaveScreen = "\x1b[?25h\x1b[?1049l"
	cursorHome  = "\x1b[H"
	clearLine   = "\x1b[K" // to the end of the line
	clearBelow  = "\x1b[J" // to the end of the screen
)

// watchFrame is what one look at the database found.
type watchFrame struct {
	at       time.Time
	views    []*readmodel.StatusView
	projects map[string]domain.Project
	// ctl is whether a controller ran when the frame was read.
	ctl *readmodel.ControllerView
}

// finished reports whether every project shown is done, or stopped with
// nothing running.
func (f *watchFrame) finished() bool {
	for _, v := range f.views {
		if !v.Settled() {
			return false
		}
	}
	return true
}

// watcher redraws the status of one project, or of all of them, until they
// are finished or ctx is cancelled.
type watcher struct {
	e        *env
	st       *store.Store
	cfg      *nodes.Config
	cfgErr   error
	project  string // "" for every started project
	interval time.Duration
	c        *cli.Context
}

// watchStatus is `dispatch status --watch`. On a terminal with colour it
// redraws a full-screen view; otherwise it prints the `dispatch status` text,
// or with --json one status object per line, each time the status changes.
// It returns nil when the projects are finished or ctx is cancelled.
func watchStatus(c *cli.Context, e *env, st *store.Store, cfg *nodes.Config, cfgErr error, project string) error {
	interval := c.Duration("interval")
	if interval <= 0 {
		return usagef("dispatch status --watch --interval 1s", "--interval must be positive")
	}
	w := &watcher{e: e, st: st, cfg: cfg, cfgErr: cfgErr, project: project, interval: interval, c: c}
	switch {
	case c.Bool("json"):
		return w.changes(c.Context, w.printJSON)
	case e.styles.color:
		return w.screen(c.Context)
	default:
		if cfgErr != nil {
			fmt.Fprintf(e.errOut, "note: %v\n", cfgErr)
		}
		return w.changes(c.Context, w.printText)
	}
}

// load reads the status of the projects shown.
func (w *watcher) load(ctx context.Context) (*watchFrame, error) {
	f := &watchFrame{at: time.Now(), projects: map[string]domain.Project{}}
	if w.project != "" {
		p, err := w.st.Project(ctx, w.project)
		if err != nil {
			return nil, err
		}
		f.projects[p.Name] = p
	} else {
		ps, err := w.st.Projects(ctx)
		if err != nil {
			return nil, err
		}
		for _, p := range ps {
			f.projects[p.Name] = p
		}
	}
	names := make([]string, 0, len(f.projects))
	for n := range f.projects {
		names = append(names, n)
	}
	slices.Sort(names)
	ctl := controllerOf(w.e.home)
	f.ctl = ctl
	for _, n := range names {
		v, err := readmodel.Status(ctx, w.st, w.cfg, n, asSeen(ctl, f.at))
		if err != nil {
			return nil, err
		}
		v.Controller = ctl
		v.Notes = append(v.Notes, specChanges(w.e, w.st, n, w.c)...)
		f.views = append(f.views, v)
	}
	return f, nil
}

// run calls draw with each frame, every interval, until the projects are
// finished (after drawing them finished) or ctx is cancelled. A frame that
// cannot be read is reported through fail and tried again.
func (w *watcher) run(ctx context.Context, draw func(*watchFrame), fail func(error)) {
	tick := time.NewTicker(w.interval)
	defer tick.Stop()
	for {
		f, err := w.load(ctx)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			fail(err)
		} else {
			draw(f)
			if f.finished() {
				return
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// changes prints a frame with print whenever it differs from the last one
// printed in more than the time running tasks have taken and what nodes
// last reported, so that a log of it reads as a list of changes.
func (w *watcher) changes(ctx context.Context, print func(*watchFrame) error) error {
	var last, lastErr string
	var printErr error
	w.run(ctx, func(f *watchFrame) {
		lastErr = ""
		if fp := fingerprint(f); fp != last && printErr == nil {
			last = fp
			printErr = print(f)
		}
	}, func(err error) {
		if msg := err.Error(); msg != lastErr {
			lastErr = msg
			fmt.Fprintf(w.e.errOut, "dispatch: read status: %v\n", err)
		}
	})
	return printErr
}

func (w *watcher) printJSON(f *watchFrame) error {
	var obj any = map[string]any{"projects": nonNil(f.views), "controller": f.ctl}
	if w.project != "" && len(f.views) == 1 {
		obj = f.views[0]
	}
	b, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w.e.out, "%s\n", b)
	return err
}

func nonNil(views []*readmodel.StatusView) []*readmodel.StatusView {
	if views == nil {
		return []*readmodel.StatusView{}
	}
	return views
}

func (w *watcher) printText(f *watchFrame) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "--- %s ---\n", f.at.Format("2006-01-02 15:04:05"))
	for i, v := range f.views {
		if i > 0 {
			fmt.Fprintln(&b)
		}
		printStatus(&b, w.e.styles, v, w.cfg)
	}
	if len(f.views) == 0 {
		fmt.Fprintln(&b, "no projects started yet; run: dispatch start <project>")
	}
	_, err := w.e.out.Write(b.Bytes())
	return err
}

// fingerprint is what a change of status means for the printed log: states,
// attempts, errors, counts, phases, node states and slots, pauses and notes.
func fingerprint(f *watchFrame) string {
	var b strings.Builder
	for _, v := range f.views {
		p := f.projects[v.Project]
		fmt.Fprintf(&b, "P %s %s %s %s %v\n", v.Project, v.Phase, v.Result(), p.State, v.Counts)
		for _, t := range v.Tasks {
			fmt.Fprintf(&b, "T %s %s %s %d %d %q %q %q\n", t.ID, t.Status, t.Node, t.Attempt, t.ExitCode, t.ErrorClass, t.Error, t.Warning)
		}
		for _, n := range v.Nodes {
			fmt.Fprintf(&b, "N %s %s %d/%d %q\n", n.Name, n.State, n.Running, n.Slots, n.LastError)
		}
		for _, ps := range v.Paused {
			fmt.Fprintf(&b, "A %s %s %q\n", ps.APIMode, ps.Until.Format(time.RFC3339), ps.Reason)
		}
		for _, n := range v.Notes {
			fmt.Fprintf(&b, "n %s\n", n)
		}
	}
	return b.String()
}

// screen shows the live view in the terminal's alternate screen and, when it
// ends, leaves the last frame, in full, on the normal screen.
func (w *watcher) screen(ctx context.Context) error {
	out := w.e.out
	fmt.Fprint(out, enterScreen)
	var last *watchFrame
	var readErr error
	defer func() {
		fmt.Fprint(out, leaveScreen)
		if last != nil {
			width, _ := w.size()
			fmt.Fprintln(out, renderWatch(w.e.styles, last, w.footNotes(nil), width, 0, ""))
		}
	}()
	draw := func() {
		width, height := w.size()
		var frame string
		if last == nil {
			var lines []string
			for _, n := range w.footNotes(readErr) {
				lines = append(lines, ansi.Truncate(w.e.styles.bad.Render(termtext.Clean(n)), max(width-1, 20), "…"))
			}
			frame = strings.Join(lines, "\n")
		} else {
			foot := "updated " + last.at.Format("15:04:05") + " · every " + w.interval.String() + " · Ctrl-C quits"
			frame = renderWatch(w.e.styles, last, w.footNotes(readErr), width, height, foot)
		}
		// Rewriting each line and clearing what is left of it does not flicker
		// the way clearing the whole screen first does.
		var b strings.Builder
		b.WriteString(cursorHome)
		b.WriteString(strings.ReplaceAll(frame, "\n", clearLine+"\r\n"))
		b.WriteString(clearLine + clearBelow)
		fmt.Fprint(out, b.String())
	}
	w.run(ctx, func(f *watchFrame) {
		last, readErr = f, nil
		draw()
	}, func(err error) {
		readErr = err
		draw()
	})
	if last == nil && readErr != nil {
		return readErr
	}
	return nil
}

// footNotes are the lines under every frame: the nodes.yaml note and the
// last error reading the database.
func (w *watcher) footNotes(readErr error) []string {
	var notes []string
	if w.cfgErr != nil {
		notes = append(notes, "note: "+w.cfgErr.Error())
	}
	if readErr != nil {
		notes = append(notes, "error: reading the status: "+readErr.Error())
	}
	return notes
}

// size is the terminal's size, read for every frame so that the view
// follows a resized window.
func (w *watcher) size() (width, height int) {
	width, height = 80, 24
	if f, ok := w.e.out.(*os.File); ok {
		if cw, ch, err := term.GetSize(int(f.Fd())); err == nil && cw > 0 && ch > 0 {
			width, height = cw, ch
		}
	}
	return width, height
}

// renderWatch lays out a frame in width columns and, when height > 0, at
// most height lines: a block per project (header, progress bar, a row per
// task), then the nodes, the paused api_modes, notes and foot. Lines stay one
// column short of the width so that clearing the rest of a line never
// erases its last character.
func renderWatch(s styles, f *watchFrame, notes []string, width, height int, foot string) string {
	width = max(width-1, 20)
	var tail []string
	if nodes := sumNodes(f.views); len(nodes) > 0 {
		tail = append(tail, "")
		tail = append(tail, nodeRows(s, nodes, f.at)...)
		for _, l := range nodeFixLines(nodes) {
			tail = append(tail, s.warn.Render(l))
		}
	}
	var paused []store.Pause
	if len(f.views) > 0 {
		paused = f.views[0].Paused // the pauses are the home's, the same in every view
	}
	if len(paused) > 0 {
		tail = append(tail, "")
	}
	for _, p := range paused {
		tail = append(tail, s.warn.Render(fmt.Sprintf("paused: %s until %s (%s)", p.APIMode, p.Until.Local().Format("15:04:05"), termtext.Clean(p.Reason))))
	}
	for _, n := range notes {
		tail = append(tail, s.warn.Render(termtext.Clean(n)))
	}
	if foot != "" {
		tail = append(tail, "", s.dim.Render(foot))
	}

	// What every block needs besides its task rows.
	fixed := len(tail)
	sizes := make([]int, len(f.views))
	for i, v := range f.views {
		fixed += 3 + len(v.Notes) // header, bar, column headings
		if i > 0 {
			fixed++ // the blank line between blocks
		}
		sizes[i] = len(v.Tasks)
	}
	rows := sizes
	if height > 0 {
		rows = shareLines(sizes, height-fixed)
	}

	var lines []string
	for i, v := range f.views {
		if i > 0 {
			lines = append(lines, "")
		}
		lines = append(lines, projectHeader(s, v, f.projects[v.Project], f.at))
		lines = append(lines, progressLine(s, v.Counts, width))
		lines = append(lines, taskRows(s, v.Tasks, rows[i], width)...)
		for _, n := range v.Notes {
			lines = append(lines, s.warn.Render("note: "+termtext.Clean(n)))
		}
	}
	if len(f.views) == 0 {
		lines = append(lines, "no projects started yet; run: dispatch start <project>")
	}
	lines = append(lines, tail...)
	if height > 0 && len(lines) > height {
		lines = lines[:height]
	}
	for i, l := range lines {
		lines[i] = ansi.Truncate(l, width, "…")
	}
	return strings.Join(lines, "\n")
}

func projectHeader(s styles, v *readmodel.StatusView, p domain.Project, now time.Time) string {
	parts := []string{s.project.Render(v.Project), "phase " + s.header.Render(string(v.Phase))}
	if r := v.Result(); r != "" {
		parts = append(parts, s.resultStyle(r).Render(r))
	} else if p.State == domain.ProjectStopped {
		parts = append(parts, s.warn.Render("stopped"))
	}
	if v.Budget != nil {
		parts = append(parts, s.warn.Render(v.Budget.Summary()))
	}
	switch {
	case p.StartedAt.IsZero():
	case !p.FinishedAt.IsZero():
		parts = append(parts, "took "+p.FinishedAt.Sub(p.StartedAt).Round(time.Second).String())
	default:
		parts = append(parts, "started "+max(now.Sub(p.StartedAt), 0).Round(time.Second).String()+" ago")
	}
	return strings.Join(parts, s.dim.Render(" · "))
}

// progressLine is a bar of the tasks, finished ones in the colour of their
// outcome and running ones apart from those waiting, then the counts.
func progressLine(s styles, c readmodel.Counts, width int) string {
	barWidth := min(40, max(10, width/3))
	total := c.Total()
	segs := []struct {
		n     int
		glyph string
		style lipgloss.Style
	}{
		{c.Completed, "█", s.barDone},
		{c.Failed, "█", s.barFailed},
		{c.Blocked + c.Canceled, "█", s.barBlocked},
		{c.Running + c.Claimed, "▒", s.barRunning},
	}
	var b strings.Builder
	cum, used := 0, 0
	for _, sg := range segs {
		cum += sg.n
		end := 0
		if total > 0 {
			end = (cum*barWidth + total/2) / total
			if sg.n > 0 && end == used && used < barWidth {
				end = used + 1 // every state present shows at least one cell
			}
		}
		end = min(end, barWidth)
		if end > used {
			b.WriteString(sg.style.Render(strings.Repeat(sg.glyph, end-used)))
			used = end
		}
	}
	if used < barWidth {
		b.WriteString(s.barEmpty.Render(strings.Repeat("░", barWidth-used)))
	}
	return b.String() + "  " + summaryCounts(s, c)
}

// shareLines gives each block of sizes[i] rows a share of avail lines: all
// of them when they fit, else in proportion, at least one each.
func shareLines(sizes []int, avail int) []int {
	total := 0
	for _, n := range sizes {
		total += n
	}
	out := slices.Clone(sizes)
	if total <= avail {
		return out
	}
	left := max(avail, 0)
	for i, n := range sizes {
		out[i] = 0
		if n > 0 {
			out[i] = max(1, max(avail, 0)*n/total)
			left -= out[i]
		}
	}
	for i := 0; left > 0; i = (i + 1) % len(sizes) {
		if out[i] < sizes[i] {
			out[i]++
			left--
		} else if slices.Equal(out, sizes) {
			break
		}
	}
	return out
}

// watchRank orders tasks for a view too short to show them all: the ones a
// person is watching for come first.
func watchRank(status domain.Status) int {
	switch status {
	case domain.Running, domain.Claimed:
		return 0
	case domain.Failed:
		return 1
	case domain.Blocked, domain.Lost:
		return 2
	case domain.Pending:
		return 3
	case domain.Completed:
		return 4
	}
	return 5
}

// taskRows is the task table with at most limit rows for tasks (the column
// headings not counted): when they do not all fit, the running and failed
// ones are kept and the last row says how many are left out.
func taskRows(s styles, tasks []readmodel.TaskView, limit, width int) []string {
	shown := tasks
	var hidden []readmodel.TaskView
	if len(tasks) > limit {
		idx := make([]int, len(tasks))
		for i := range idx {
			idx[i] = i
		}
		slices.SortStableFunc(idx, func(a, b int) int { return watchRank(tasks[a].Status) - watchRank(tasks[b].Status) })
		keep := idx[:max(limit-1, 0)]
		slices.Sort(keep)
		shown = nil
		k := 0
		for i, t := range tasks {
			if k < len(keep) && keep[k] == i {
				shown = append(shown, t)
				k++
			} else {
				hidden = append(hidden, t)
			}
		}
	}

	head := []string{"ID", "STATUS", "NODE", "ATTEMPT", "TIME"}
	cells := make([][]string, len(shown))
	widths := make([]int, len(head))
	for i, h := range head {
		widths[i] = ansi.StringWidth(h)
	}
	for r, t := range shown {
		node := t.Node
		if node == "" {
			node = "-"
		}
		if t.NodeGone {
			node += " " + notConfigured
		}
		attempt := "-"
		if t.Attempt > 0 {
			attempt = fmt.Sprint(t.Attempt)
		}
		cells[r] = []string{t.ID, string(t.Status), node, attempt, readmodel.FormatSeconds(t.DurationSeconds)}
		for i, c := range cells[r] {
			widths[i] = max(widths[i], ansi.StringWidth(c))
		}
	}
	const gap = "  "
	rest := width
	for _, w := range widths {
		rest -= w + len(gap)
	}
	rest = max(rest, 8)

	var lines []string
	var hb strings.Builder
	for i, h := range head {
		hb.WriteString(s.column.Render(pad(h, widths[i])) + gap)
	}
	lines = append(lines, hb.String()+s.column.Render("TITLE / ERROR"))
	for r, t := range shown {
		var b strings.Builder
		for i, c := range cells[r] {
			st := s.plain
			switch i {
			case 1:
				st = s.statusStyle(string(t.Status))
			case 4:
				if t.Status != domain.Running {
					st = s.dim
				}
			}
			b.WriteString(st.Render(pad(c, widths[i])) + gap)
		}
		what, st := rowNote(s, t)
		b.WriteString(st.Render(ansi.Truncate(what, rest, "…")))
		lines = append(lines, b.String())
	}
	if len(hidden) > 0 {
		var c readmodel.Counts
		for _, t := range hidden {
			c.Add(t.Status)
		}
		lines = append(lines, s.dim.Render(fmt.Sprintf("… %d more: %s", len(hidden), hiddenCounts(c))))
	}
	return lines
}

// rowNote is what a task's row says after its cells, and in which style:
// why it waits, a live attempt's warning, an unfinished task's error, else
// its title.
func rowNote(s styles, t readmodel.TaskView) (string, lipgloss.Style) {
	what, st := t.Title, s.plain
	switch {
	case t.Waiting != "":
		what, st = "waiting: "+t.Waiting, s.warn
	case t.Warning != "" && (t.Status == domain.Running || t.Status == domain.Claimed):
		what, st = "warning: "+t.Warning, s.warn
	case t.Error != "" && t.Status != domain.Completed:
		what = t.Error
		if t.ErrorClass != "" {
			what = t.ErrorClass + ": " + t.Error
		}
		st = s.warn
		if t.Status == domain.Failed {
			st = s.bad
		}
	}
	return termtext.Clean(strings.Join(strings.Fields(what), " ")), st // an error may span lines
}

func hiddenCounts(c readmodel.Counts) string {
	var parts []string
	for _, p := range []struct {
		n     int
		label string
	}{
		{c.Running + c.Claimed, "running"}, {c.Failed, "failed"}, {c.Blocked, "blocked"},
		{c.Pending, "pending"}, {c.Completed, "completed"}, {c.Canceled, "canceled"},
	} {
		if p.n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", p.n, p.label))
		}
	}
	return strings.Join(parts, ", ")
}

// sumNodes is the node list of the views with the slots in use summed over
// the projects, which share the nodes.
func sumNodes(views []*readmodel.StatusView) []readmodel.NodeView {
	if len(views) == 0 {
		return nil
	}
	out := slices.Clone(views[0].Nodes)
	for _, v := range views[1:] {
		for i := range out {
			for _, n := range v.Nodes {
				if n.Name == out[i].Name {
					out[i].Running += n.Running
				}
			}
		}
	}
	return out
}

func nodeRows(s styles, ns []readmodel.NodeView, now time.Time) []string {
	head := []string{"NODE", "STATE", "SLOTS", "MEM AVAILABLE", "LAST SEEN"}
	cells := make([][]string, len(ns))
	widths := make([]int, len(head))
	for i, h := range head {
		widths[i] = ansi.StringWidth(h)
	}
	for r, n := range ns {
		seen := "-"
		if t, err := time.Parse(time.RFC3339Nano, n.LastSeen); err == nil && n.LastSeen != "" {
			seen = max(now.Sub(t), 0).Round(time.Second).String() + " ago"
		}
		slots := fmt.Sprintf("%d/%d", n.Running, n.Slots)
		if n.Slots <= 16 {
			slots += " " + strings.Repeat("▮", min(n.Running, n.Slots)) + strings.Repeat("▯", max(n.Slots-n.Running, 0))
		}
		cells[r] = []string{n.Name, n.State, slots, bytesHuman(n.MemAvailableBytes), seen}
		for i, c := range cells[r] {
			widths[i] = max(widths[i], ansi.StringWidth(c))
		}
	}
	const gap = "  "
	var hb strings.Builder
	for i, h := range head {
		hb.WriteString(s.column.Render(pad(h, widths[i])) + gap)
	}
	lines := []string{hb.String() + s.column.Render("ERROR")}
	for r, n := range ns {
		var b strings.Builder
		for i, c := range cells[r] {
			st := s.plain
			if i == 1 {
				st = s.nodeStateStyle(n.State)
			}
			b.WriteString(st.Render(pad(c, widths[i])) + gap)
		}
		b.WriteString(s.bad.Render(termtext.Clean(strings.Join(strings.Fields(n.LastError), " "))))
		lines = append(lines, b.String())
	}
	return lines
}

// nodeFixLines say how to fix each node in trouble: the node table shows
// only the first line of its error.
func nodeFixLines(ns []readmodel.NodeView) []string {
	var out []string
	for _, n := range ns {
		if n.State == store.NodeOnline && n.LastError == "" {
			continue
		}
		if _, fix := nodeFix(n.State, n.LastError); fix != "" {
			out = append(out, termtext.Clean(n.Name+": fix: "+fix))
		}
	}
	return out
}

// pad fills s with spaces to width columns.
func pad(s string, width int) string {
	return s + strings.Repeat(" ", max(width-ansi.StringWidth(s), 0))
}
