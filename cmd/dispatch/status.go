package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/urfave/cli/v2"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/internal/termtext"
	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/readmodel"
	"github.com/dispatch-tool/dispatch/spec"
	"github.com/dispatch-tool/dispatch/store"
)

func statusCommand() *cli.Command {
	return &cli.Command{
		Name:      "status",
		Usage:     "show the progress of one project, or of every started project",
		ArgsUsage: "[<project>]",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "json", Usage: "print JSON (one object for a project; {\"projects\": [...]} without one); " +
				"with --watch, that object on one line each time the status changes (JSON Lines)"},
			&cli.BoolFlag{Name: "watch", Usage: "keep showing the status until the project(s) are finished: " +
				"a live view on a terminal, else the status text each time it changes (Ctrl-C stops)"},
			&cli.DurationFlag{Name: "interval", Usage: "with --watch, read the status every `D`", Value: time.Second},
			&cli.BoolFlag{Name: "refresh", Usage: "also ask each node the shown tasks ran on, once, what its attempts are now, and show " +
				"that beside the database's view (takes no lock, records nothing: the next controller collects)"},
			runFlag(),
		},
		Action: statusAction,
	}
}

// statusAction is `dispatch status`.
func statusAction(c *cli.Context) error {
	ctx := c.Context
	e, err := newEnv(c)
	if err != nil {
		return err
	}
	var names []string
	if c.NArg() > 0 {
		name, err := projectArg(c, "dispatch status [<project>]")
		if err != nil {
			return err
		}
		names = []string{name}
	}
	st, err := e.openReadOnly(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	// The node list and slots come from nodes.yaml when it loads;
	// status still works from the database alone when it does not.
	cfg, cfgErr := e.loadConfig()
	if cfgErr != nil {
		cfg = nil
	}
	if len(names) == 1 {
		if err := knownProject(ctx, st, names[0]); err != nil {
			return err
		}
	} else {
		ps, err := st.Projects(ctx)
		if err != nil {
			return err
		}
		for _, p := range ps {
			names = append(names, p.Name)
		}
	}
	if c.IsSet("run") && (len(names) != 1 || c.NArg() == 0 || c.Bool("watch")) {
		return usagef("dispatch status <project> --run 1", "--run shows one run of one project; it takes a project and no --watch")
	}
	if c.Bool("watch") && c.Bool("refresh") {
		return usagef("dispatch status "+strings.Join(names, " ")+" --refresh", "--refresh asks the nodes once; it takes no --watch")
	}
	if c.Bool("watch") {
		var project string
		if c.NArg() > 0 {
			project = names[0]
		}
		return watchStatus(c, e, st, cfg, cfgErr, project)
	}
	if c.IsSet("interval") {
		return usagef("dispatch status --watch --interval 1s", "--interval only applies with --watch")
	}
	views, err := statusViews(c, e, st, cfg, names)
	if err != nil {
		return err
	}
	if c.Bool("refresh") {
		if c.IsSet("run") {
			return usagef("dispatch status "+names[0]+" --refresh", "--refresh asks the nodes about the current run; it takes no --run")
		}
		if err := refreshViews(ctx, cfg, views); err != nil {
			return err
		}
	}
	if c.Bool("json") {
		enc := json.NewEncoder(e.out)
		enc.SetIndent("", "  ")
		if c.NArg() > 0 {
			return enc.Encode(views[0])
		}
		if views == nil {
			views = []*readmodel.StatusView{}
		}
		ctl := controllerOf(e.home)
		if len(views) > 0 {
			ctl = views[0].Controller // read once, for every view
		}
		return enc.Encode(map[string]any{"projects": views, "controller": ctl})
	}
	if cfgErr != nil {
		fmt.Fprintf(e.errOut, "note: %v\n", cfgErr)
	}
	for i, v := range views {
		if i > 0 {
			fmt.Fprintln(e.out)
		}
		printStatus(e.out, e.styles, v, cfg)
		printRefresh(e.out, e.styles, v)
	}
	if len(views) == 0 {
		fmt.Fprintln(e.out, "no projects started yet; run: dispatch start <project>")
	}
	return nil
}

// statusViews are the status views of the projects names (of --run's run,
// when given), with the notes on specs changed since their tasks started.
func statusViews(c *cli.Context, e *env, st *store.Store, cfg *nodes.Config, names []string) ([]*readmodel.StatusView, error) {
	ctl := controllerOf(e.home)
	now := asSeen(ctl, time.Now())
	var views []*readmodel.StatusView
	for _, n := range names {
		at, err := atRun(c, st, n, "dispatch status "+n+" --run 1")
		if err != nil {
			return nil, err
		}
		v, err := readmodel.Status(c.Context, at, cfg, n, now)
		if err != nil {
			return nil, err
		}
		if at == st {
			v.Notes = append(v.Notes, specChanges(e, st, n, c)...)
		}
		v.Controller = ctl
		views = append(views, v)
	}
	return views, nil
}

// asSeen is the time the views measure live durations to: now while a
// controller runs, else its last tick — a task shown running for 30 min
// when it ended on its node 29 min ago says what nobody saw.
func asSeen(ctl *readmodel.ControllerView, now time.Time) time.Time {
	if t := ctl.LastTick(); ctl.Stale() && !t.IsZero() && t.Before(now) {
		return t
	}
	return now
}

// specChanges names tasks whose spec file changed after they started.
func specChanges(e *env, st *store.Store, project string, c *cli.Context) []string {
	p, err := spec.Load(e.specsDir(), project)
	if err != nil {
		return nil
	}
	tasks, err := st.Tasks(c.Context, project)
	if err != nil {
		return nil
	}
	var notes []string
	for _, t := range tasks {
		if t.Status == domain.Pending || t.Status == domain.Blocked {
			continue
		}
		nt := p.Task(t.ID)
		if before, _, ok := strings.Cut(t.ID, "@"); ok && nt == nil {
			nt = p.Task(before) // a broadcast's task has its spec's snapshot
		}
		if nt != nil && nt.Hash != t.SpecHash {
			notes = append(notes, fmt.Sprintf("%s changed since it ran (dispatch retry %s %s reruns it)", t.ID, project, t.ID))
		}
	}
	return notes
}

// notConfigured follows the name of a node a task ran on that nodes.yaml no
// longer has (removed, or renamed): it is not where the next run goes.
const notConfigured = "(not in nodes.yaml)"

func printStatus(w io.Writer, s styles, v *readmodel.StatusView, cfg *nodes.Config) {
	head := fmt.Sprintf("%s — phase %s", v.Project, v.Phase)
	if v.Run > 1 {
		head = fmt.Sprintf("%s — run %d, phase %s", v.Project, v.Run, v.Phase)
	}
	if r := v.Result(); r != "" {
		head += ", " + r
	} else if v.State == domain.ProjectStopped && v.Problem != "" {
		head += ", stopped by dispatch: " + termtext.Clean(v.Problem) + " (fix it; dispatch start " + v.Project + " resumes)"
	} else if v.State == domain.ProjectStopped {
		states := map[string]domain.Status{}
		for _, t := range v.Tasks {
			states[t.ID] = t.Status
		}
		head += ", stopped (nothing new starts; " + readmodel.StoppedNext(v.Project, states) + ")"
	}
	now := time.Now()
	if line := v.StaleLine(now); line != "" {
		fmt.Fprintln(w, s.warn.Render(line))
	}
	counts := summaryCounts(s, v.Counts)
	if v.Preemptions > 0 {
		counts += fmt.Sprintf(" · %d preempted", v.Preemptions)
	}
	fmt.Fprintln(w, s.header.Render(head)+"  "+counts)
	if b := v.Budget; b != nil {
		fmt.Fprintln(w, s.warn.Render(b.Summary()))
		fmt.Fprintln(w, "next: "+b.Next(v.Project))
	}
	tasks := &table{header: []string{"ID", "STATUS", "NODE", "ATTEMPT", "TIME", "TITLE / ERROR"}}
	for _, t := range v.Tasks {
		what, whatStyle := t.Title, plainCell
		if t.Error != "" && t.Status != domain.Completed {
			what = readmodel.ErrorText(t.ErrorClass, t.Error)
		}
		switch {
		case t.Waiting != "":
			// Its batch job waits: the status stays running (SPEC), this
			// says it has not started and why (docs/EXECUTORS.md).
			what, whatStyle = "waiting: "+t.Waiting, s.warn.Render
		case t.Warning != "" && (t.Status == domain.Running || t.Status == domain.Claimed || t.Status == domain.Completed):
			what, whatStyle = "warning: "+t.Warning, s.warn.Render
		}
		if t.Stale {
			what, whatStyle = fmt.Sprintf("stale: %s (dispatch retry %s %s --downstream)", t.StaleWhy, v.Project, t.ID), s.warn.Render
		}
		if t.Gating {
			what = "gate running on its result: " + what
		}
		if t.ReusedFrom > 0 {
			what = fmt.Sprintf("reused from run %d: %s", t.ReusedFrom, what)
		}
		what = termtext.Clean(what)
		node := t.Node
		if node == "" {
			node = "-"
		}
		if t.NodeGone {
			node += " " + notConfigured
		}
		attempt := fmt.Sprint(t.Attempt)
		if t.Preemptions > 0 {
			attempt += fmt.Sprintf(" (%d preempted)", t.Preemptions)
		}
		tasks.add([]string{t.ID, v.Controller.LiveWord(string(t.Status), now), node, attempt, readmodel.FormatSeconds(t.DurationSeconds), what},
			map[int]func(...string) string{1: func(x ...string) string { return s.status(strings.Join(x, " ")) }, 5: whatStyle})
	}
	tasks.write(w)
	if len(v.Nodes) > 0 {
		fmt.Fprintln(w)
		nt := &table{header: []string{"NODE", "STATE", "SLOTS", "MEM AVAILABLE", "LAST SEEN", "ERROR"}}
		for _, n := range v.Nodes {
			seen := "-"
			if n.LastSeen != "" {
				if t, err := time.Parse(time.RFC3339Nano, n.LastSeen); err == nil {
					seen = t.Local().Format("15:04:05")
				}
			}
			nt.add([]string{n.Name, v.Controller.LiveWord(n.State, now), fmt.Sprintf("%d/%d", n.Running, n.Slots), bytesHuman(n.MemAvailableBytes), seen, termtext.Clean(firstLine(n.LastError))}, nil)
		}
		nt.write(w)
		for _, l := range nodeFixLines(v.Nodes) {
			fmt.Fprintln(w, s.warn.Render(l))
		}
	}
	for _, p := range v.Paused {
		line := fmt.Sprintf("paused: %s until %s (%s)", p.APIMode, pauseEnd(p.Until, now), termtext.Clean(p.Reason))
		if fb := v.Fallbacks[p.APIMode]; fb != "" {
			line += "; its tasks run under " + fb + " (fallback) where a node may use it"
		}
		fmt.Fprintln(w, s.warn.Render(line))
	}
	for _, n := range v.Notes {
		fmt.Fprintln(w, s.warn.Render("note: "+termtext.Clean(n)))
	}
}

// pauseEnd is when a pause ends, in the local zone: the time of day when
// that is today, with the date when not (a reset a day away read as
// "until 14:00" looks like one due within hours).
func pauseEnd(until, now time.Time) string {
	u, n := until.Local(), now.Local()
	if uy, um, ud := u.Date(); uy == n.Year() && um == n.Month() && ud == n.Day() {
		return u.Format("15:04:05")
	}
	return u.Format("2006-01-02 15:04:05")
}

func summaryCounts(s styles, c readmodel.Counts) string {
	parts := []string{fmt.Sprintf("%d/%d completed", c.Completed, c.Total())}
	add := func(n int, label string, st func(...string) string) {
		if n > 0 {
			parts = append(parts, st(fmt.Sprintf("%d %s", n, label)))
		}
	}
	add(c.Running+c.Claimed, "running", s.active.Render)
	add(c.Pending, "pending", func(x ...string) string { return strings.Join(x, " ") })
	add(c.Failed, "failed", s.bad.Render)
	add(c.Blocked, "blocked", s.warn.Render)
	add(c.Canceled, "canceled", s.warn.Render)
	return strings.Join(parts, " · ")
}

func bytesHuman(n int64) string {
	if n <= 0 {
		return "-"
	}
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

func plainCell(x ...string) string { return strings.Join(x, " ") }

// table aligns columns by the visible width of their text and colours a
// cell only after padding it, so escape codes never shift a column
// (text/tabwriter would count them as width).
type table struct {
	header []string
	rows   [][]string
	styles []map[int]func(...string) string
}

func (t *table) add(cells []string, styles map[int]func(...string) string) {
	t.rows = append(t.rows, cells)
	t.styles = append(t.styles, styles)
}

func (t *table) write(w io.Writer) {
	widths := make([]int, len(t.header))
	for _, row := range append([][]string{t.header}, t.rows...) {
		for i, c := range row {
			widths[i] = max(widths[i], utf8.RuneCountInString(c))
		}
	}
	line := func(cells []string, styles map[int]func(...string) string) {
		var b strings.Builder
		for i, c := range cells {
			last := i == len(cells)-1
			cell := c
			if !last {
				cell += strings.Repeat(" ", widths[i]-utf8.RuneCountInString(c)+2)
			}
			if st := styles[i]; st != nil {
				// Colour the word, not the padding.
				pad := cell[len(c):]
				cell = st(c) + pad
			}
			b.WriteString(cell)
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
	line(t.header, nil)
	for i, row := range t.rows {
		line(row, t.styles[i])
	}
}
