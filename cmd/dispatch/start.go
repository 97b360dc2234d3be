package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/dispatch-tool/dispatch/control"
	"github.com/dispatch-tool/dispatch/controller"
	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/home"
	"github.com/dispatch-tool/dispatch/internal/termtext"
	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/nodes/sshnode"
	"github.com/dispatch-tool/dispatch/plan"
	"github.com/dispatch-tool/dispatch/readmodel"
	"github.com/dispatch-tool/dispatch/store"
)

func startCommand() *cli.Command {
	return projectCommand(&cli.Command{
		Name:  "start",
		Usage: "run a project's tasks on the nodes until it is finished (resumes after a crash)",
		Flags: []cli.Flag{
			&cli.DurationFlag{Name: "poll", Usage: "pull period `D` (default: poll_interval of nodes.yaml)"},
			&cli.StringSliceFlag{Name: "nodes", Usage: "only use these nodes (`a,b`)"},
			&cli.BoolFlag{Name: "dry-run", Usage: "validate and print the plan; start nothing"},
			&cli.BoolFlag{Name: "integrate-partial", Usage: "run the integration phase even if some tasks failed"},
			&cli.BoolFlag{Name: "no-integrate", Usage: "skip the integration phase (S99, verification, fixes)"},
			&cli.Float64Flag{Name: "budget-usd", Usage: "start nothing new once the project's recorded cost reaches `USD` (replaces project.yaml's budget.usd)"},
			&cli.BoolFlag{Name: "detach", Usage: "run the controller in the background (log: <home>/dispatch.log, pid: <home>/dispatch.pid)"},
			&cli.BoolFlag{Name: "fresh", Usage: "a finished project's new run runs every task again, reusing no result"},
		},
	}, "dispatch start <project>", startAction)
}

// loadGCPercent is the garbage collector's target while a project is
// loaded and stored (see startAction).
const loadGCPercent = 20

// loadMemoryLimit is the Go heap's soft limit while a project is loaded
// and stored: the collector runs (and returns memory to the system) as the
// heap nears it, whatever loadGCPercent allows. A project whose parsed
// specs alone exceed it costs collector time, never a failure.
const loadMemoryLimit = 48 << 20

// tightGC sets the collector's target and soft limit for loading a
// project (loadGCPercent, loadMemoryLimit) and returns the function that
// restores them, which may be called more than once.
func tightGC() (restore func()) {
	gc := debug.SetGCPercent(loadGCPercent)
	limit := debug.SetMemoryLimit(loadMemoryLimit)
	return sync.OnceFunc(func() {
		debug.SetGCPercent(gc)
		debug.SetMemoryLimit(limit)
	})
}

func startAction(c *cli.Context, e *env, name string) error {
	so, err := startOptions(c, name)
	if err != nil {
		return err
	}
	if so.Fresh {
		if err := checkFresh(c.Context, e, name); err != nil {
			return err
		}
	}
	sp := startParams{only: c.StringSlice("nodes"), so: so, poll: c.Duration("poll"), dryRun: c.Bool("dry-run")}
	if c.Bool("detach") {
		sp.detach = detachArgs(c, e, name)
	}
	return startProject(c.Context, e, name, sp)
}

// startParams are how startProject starts a project: start's flags, or
// what `dispatch run` decides.
type startParams struct {
	only   []string // use only these nodes (nil: all)
	so     control.StartOptions
	poll   time.Duration // 0: nodes.yaml's poll_interval
	dryRun bool          // print the plan, start nothing
	// detach is the command line of a background controller that runs
	// the project instead of this process (nil: run in the foreground).
	detach []string
}

// startProject plans the project, hands it to the home's controller when
// one runs, else becomes that controller and runs it to its end (in the
// background when sp.detach is set); its error is start's exit status.
func startProject(ctx context.Context, e *env, name string, sp startParams) error {
	only, so := sp.only, sp.so
	// Loading a project makes its garbage all at once (10,000 specs: a few
	// hundred MB allocated for 40 MB of text): collect it more often until
	// the project is stored, so the peak stays near what is live.
	restoreGC := tightGC()
	defer restoreGC()
	cfg, p, rows, transports, err := planProject(ctx, e, name, only, so)
	if err != nil {
		return err
	}
	// The connections that asked the nodes for their tools go on to run
	// the project: a node is connected to once. Whatever does not become
	// the controller here (a dry run, a hand-off, a detached controller, a
	// run that ended as it began, an error) closes them.
	ranController := false
	defer func() {
		if !ranController {
			closeTransports(transports)
		}
	}()
	if sp.dryRun {
		printPlan(e, cfg, p, rows)
		return nil
	}

	lock, err := home.AcquireLock(e.home)
	if errors.Is(err, home.ErrLocked) {
		// One controller serves every project of a home: hand this one to it.
		// It returns the lock only when the holder went away meanwhile.
		lock, err = handOff(ctx, e, name, so, sp.detach != nil)
		if lock == nil {
			return err
		}
	}
	if err != nil {
		return err
	}
	if sp.detach != nil && os.Getenv(detachedEnv) == "" {
		lock.Release()
		return detach(ctx, e, name, sp.detach)
	}
	defer lock.Release()
	st, err := store.Open(ctx, e.dbPath())
	if err != nil {
		return err
	}
	defer st.Close()
	added, err := plan.AddProject(ctx, st, cfg, e.home, p, so)
	if err != nil {
		return err
	}
	// The parsed project is stored and not used from here on: the
	// controller reads the database. Collect now, so that the collector's
	// next goal is set from what stays live (a few MiB), not from the
	// parsed project (10,000 specs: about 6 MiB of IDs, settings and
	// hashes, their text read back one at a time as they were stored).
	restoreGC()
	debug.FreeOSMemory()
	printAdded(e, name, added, so)
	if added.Finished {
		// Every result reused: the run ended as it began.
		ctl := controller.New(controller.Options{Home: e.home, Config: cfg, Store: st, Logger: e.log})
		ctl.NoticeRunFinished(ctx, name)
		ctl.Close()
		fmt.Fprintf(e.out, "report: %s\n", filepath.Join(home.RunsDir(e.home, name), "report.md"))
		return nil
	}

	ranController = true
	return runProject(ctx, e, cfg, st, transports, name, only, sp.poll)
}

// startOptions are start's flags, checked.
func startOptions(c *cli.Context, name string) (control.StartOptions, error) {
	if c.Duration("poll") < 0 {
		return control.StartOptions{}, usagef("dispatch start --poll 5s "+name, "--poll must be positive")
	}
	if b := c.Float64("budget-usd"); c.IsSet("budget-usd") && !(b > 0) {
		return control.StartOptions{}, usagef("dispatch start --budget-usd 20 "+name, "--budget-usd must be a positive amount of US dollars, not %v", b)
	}
	return control.StartOptions{IntegratePartial: c.Bool("integrate-partial"), NoIntegrate: c.Bool("no-integrate"),
		BudgetUSD: c.Float64("budget-usd"), Fresh: c.Bool("fresh")}, nil
}

// printAdded says what adding the project to the home did: its run, and
// notes on the tasks that keep an earlier result.
func printAdded(e *env, name string, added plan.SyncResult, so control.StartOptions) {
	for _, id := range added.Changed {
		fmt.Fprintf(e.errOut, "note: %s/%s changed since it ran; it keeps its snapshot (dispatch retry %s %s reruns it)\n", name, id, name, id)
	}
	for _, id := range added.BaseMoved {
		fmt.Fprintf(e.errOut, "note: %s/%s ran from an older commit of the repository than ref: names now; it keeps its result (dispatch retry %s %s reruns it from the new one)\n", name, id, name, id)
	}
	fmt.Fprint(e.out, added.RunSummary(name))
	if so.Fresh && added.Run == 0 {
		fmt.Fprintf(e.errOut, "note: --fresh is for a new run; %s has not finished, so this start resumes its current run\n", name)
	}
}

// checkFresh refuses `start --fresh` of a project whose current run has
// not finished: --fresh begins a new run, and such a start would resume
// the current one instead, quietly not fresh.
func checkFresh(ctx context.Context, e *env, name string) error {
	st, err := store.OpenReadOnly(ctx, e.dbPath())
	if errors.Is(err, store.ErrNoDatabase) {
		return nil
	} else if err != nil {
		return err
	}
	defer st.Close()
	p, err := st.Project(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	} else if err != nil {
		return err
	}
	return freshRefusal(p)
}

// freshRefusal is the refusal of `start --fresh` of p, nil when p's run
// has finished (a new run begins).
func freshRefusal(p domain.Project) error {
	if p.State == domain.ProjectDone {
		return nil
	}
	state := "is running"
	if p.State == domain.ProjectStopped {
		state = "is stopped, not finished"
	}
	return usagef("dispatch start "+p.Name+" (resumes run "+strconv.Itoa(p.Run)+")",
		"--fresh begins a new run, but %s's run %d %s: a start now would resume it, not run afresh; "+
			"let run %d finish first (dispatch start %s resumes a stopped run; dispatch cancel %s <IDs> drops tasks you do not want run), then dispatch start %s --fresh",
		p.Name, p.Run, state, p.Run, p.Name, p.Name, p.Name)
}

// runProject runs the home's controller in this process until the
// project ends, showing its progress, and says how it ended.
func runProject(ctx context.Context, e *env, cfg *nodes.Config, st *store.Store, transports map[string]nodes.Transport, name string, only []string, poll time.Duration) error {
	opts := controller.Options{Home: e.home, Config: cfg, Store: st, Transports: transports,
		Wrappers: nodes.NewWrappers(), Logger: e.log, Nodes: only}
	if os.Getenv(detachedEnv) == "" {
		// A foreground start ends with its project (and those handed to
		// it); a background one serves the home until nothing is left.
		opts.Project = name
	}
	ctl, done, err := runController(ctx, e, opts)
	if err != nil {
		closeTransports(transports)
		return err
	}
	defer done()
	prog := newProgress(e, st, name)
	prog.header(ctx, cfg, only, poll)
	runErr := ctl.Run(ctx, poll, func(controller.TickResult) { prog.update(ctx) })
	prog.finish(ctx)
	if runErr != nil {
		if errors.Is(runErr, context.Canceled) {
			return &workFailed{msg: fmt.Sprintf("dispatch: interrupted; running tasks keep running on their nodes.\nTry: dispatch start %s (resumes where it stopped)", name)}
		}
		return runErr
	}
	proj, err := st.Project(context.WithoutCancel(ctx), name)
	if err != nil {
		return err
	}
	if err := printLeftActive(context.WithoutCancel(ctx), e, st, name); err != nil {
		return err
	}
	if proj.State == domain.ProjectStopped {
		states, _, err := st.States(context.WithoutCancel(ctx), name)
		if err != nil {
			return err
		}
		return stoppedFailure(proj, states)
	}
	fmt.Fprintf(e.out, "report: %s\n", filepath.Join(home.RunsDir(e.home, name), "report.md"))
	if proj.Result != domain.ResultPassed {
		return &workFailed{}
	}
	return nil
}

// printLeftActive names the projects other than name that stay active
// once this start's controller ends (an interrupted start's), and how to
// resume them.
func printLeftActive(ctx context.Context, e *env, st *store.Store, name string) error {
	all, err := st.Projects(ctx)
	if err != nil {
		return err
	}
	for _, p := range all {
		if p.State == domain.ProjectActive && p.Name != name {
			fmt.Fprintf(e.out, "%s stays active without a controller (its running tasks go on on their nodes and are collected by the next one): "+
				"dispatch start %s resumes it, dispatch serve runs every active project\n", p.Name, p.Name)
		}
	}
	return nil
}

// openTransports builds one transport per node; it connects nothing yet.
func openTransports(cfg *nodes.Config, only []string) (map[string]nodes.Transport, error) {
	env, err := sshnode.DefaultEnv()
	if err != nil {
		return nil, err
	}
	out := map[string]nodes.Transport{}
	for _, n := range cfg.Nodes {
		if len(only) > 0 && !contains(only, n.Name) {
			continue
		}
		tr, err := sshnode.Open(cfg, n, env)
		if err != nil {
			return nil, err
		}
		out[n.Name] = tr
	}
	return out, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// progress shows a running project: one line per task event and, on a
// terminal, a live summary line kept at the bottom.
type progress struct {
	e       *env
	st      *store.Store
	project string
	lastID  int64
	start   time.Time
	live    bool
	// nodes are the nodes this controller uses (nil: every node), and
	// problems what was last shown of each one's trouble.
	nodes    map[string]bool
	problems map[string]string
	// poll is the controller's pull period; offlineFirst is when every
	// node was found offline (zero: one is not), offlineLast when start
	// last said so (see offlineReminder).
	poll                      time.Duration
	offlineFirst, offlineLast time.Time
}

func newProgress(e *env, st *store.Store, project string) *progress {
	p := &progress{e: e, st: st, project: project, start: time.Now(), problems: map[string]string{}}
	// Events before this start were shown by an earlier run.
	if evs, err := st.Events(context.Background(), project, 0, 0); err == nil && len(evs) > 0 {
		p.lastID = evs[len(evs)-1].ID
	}
	return p
}

func (p *progress) header(ctx context.Context, cfg *nodes.Config, only []string, poll time.Duration) {
	if poll <= 0 {
		poll = cfg.Controller.PollInterval
	}
	p.poll = poll
	p.nodes = map[string]bool{}
	for _, n := range cfg.Nodes {
		if len(only) == 0 || contains(only, n.Name) {
			p.nodes[n.Name] = true
		}
	}
	fmt.Fprintf(p.e.out, "dispatch: running %s on %d node(s), polling every %s (Ctrl-C stops the controller; tasks keep running)\n",
		p.project, len(cfg.Nodes), poll)
	p.update(ctx)
}

func (p *progress) update(ctx context.Context) {
	evs, err := p.st.Events(ctx, p.project, p.lastID, 0)
	if err != nil {
		return
	}
	p.clearLive()
	for _, ev := range evs {
		p.lastID = ev.ID
		if line := eventLine(p.e.styles, ev); line != "" {
			fmt.Fprintln(p.e.out, line)
		}
	}
	p.nodeProblems(ctx)
	if p.e.tty {
		if v, err := readmodel.Status(ctx, p.st, nil, p.project, time.Now()); err == nil {
			fmt.Fprint(p.e.out, summaryLine(p.e.styles, v, time.Since(p.start)))
			p.live = true
		}
	}
}

// nodeProblems prints a node's error and how to fix it when the node first
// fails, again when its error changes, and a line when it recovers: a start
// whose nodes cannot be reached says why instead of waiting in silence.
// Only records made since this start began count.
func (p *progress) nodeProblems(ctx context.Context) {
	ns, err := p.st.Nodes(ctx)
	if err != nil {
		return
	}
	for _, n := range ns {
		if p.nodes != nil && !p.nodes[n.Name] {
			continue
		}
		if n.UpdatedAt.Before(p.start) {
			// Recorded before this start, perhaps with an older
			// nodes.yaml: what this start's controller finds is shown.
			continue
		}
		ts := p.e.styles.dim.Render(time.Now().Format("15:04:05"))
		problem := ""
		if n.State != store.NodeOnline || n.LastError != "" {
			problem = n.State + "\x00" + n.LastError
		}
		shown := p.problems[n.Name]
		switch {
		case problem == shown:
		case problem == "":
			fmt.Fprintf(p.e.out, "%s node %s %s\n", ts, n.Name, p.e.styles.status(n.State))
		default:
			msg, fix := nodeFix(n.State, n.LastError)
			msg = strings.TrimPrefix(msg, "node "+n.Name+" ") // the line names it
			fmt.Fprintf(p.e.out, "%s node %s %s: %s\n", ts, n.Name, p.e.styles.status(n.State), termtext.Clean(msg))
			if fix != "" {
				fmt.Fprintf(p.e.out, "  fix: %s\n", termtext.Clean(fix))
			}
		}
		p.problems[n.Name] = problem
	}
	p.offlineReminder(ns, time.Now())
}

// nodeFix splits a node's error into what went wrong and the fix it names
// ("\n  fix: ..."), giving a fix for an offline node whose error names
// none.
func nodeFix(state, lastError string) (msg, fix string) {
	msg, fix, found := strings.Cut(lastError, "\n  fix: ")
	msg = strings.Join(strings.Fields(msg), " ")
	fix = strings.Join(strings.Fields(fix), " ")
	if !found && state == store.NodeOffline {
		fix = "check that the node is up and that `ssh` reaches it as nodes.yaml says; `dispatch nodes check` tries it"
	}
	return msg, fix
}

func (p *progress) clearLive() {
	if p.live {
		fmt.Fprint(p.e.out, "\r\033[K")
		p.live = false
	}
}

func (p *progress) finish(ctx context.Context) {
	p.update(context.WithoutCancel(ctx))
	p.clearLive()
	if v, err := readmodel.Status(context.WithoutCancel(ctx), p.st, nil, p.project, time.Now()); err == nil {
		fmt.Fprintln(p.e.out, summaryLine(p.e.styles, v, time.Since(p.start)))
	}
}

// eventLine renders a task event as one plain line, or "" for events not
// worth a line of their own.
func eventLine(s styles, ev store.Event) string {
	ts := ev.Time.Local().Format("15:04:05")
	ev.Message = termtext.Clean(ev.Message)
	switch ev.Kind {
	case "status", "claim", "retry", "requeue":
	case "gave_up", "warning":
		return fmt.Sprintf("%s %s %s", s.dim.Render(ts), taskRef(ev), s.warn.Render(ev.Message))
	case "node":
		return fmt.Sprintf("%s node %s %s %s", s.dim.Render(ts), ev.Node, s.status(ev.ToStatus), ev.Message)
	case "project":
		return fmt.Sprintf("%s %s %s", s.dim.Render(ts), ev.Project, ev.Message)
	default:
		return ""
	}
	if ev.ToStatus == string(domain.Claimed) {
		return "" // the running line follows at once
	}
	return fmt.Sprintf("%s %s %s %s", s.dim.Render(ts), taskRef(ev), s.status(ev.ToStatus), ev.Message)
}

func taskRef(ev store.Event) string {
	if ev.Attempt > 0 {
		return fmt.Sprintf("%s#%d", ev.Task, ev.Attempt)
	}
	return ev.Task
}

func summaryLine(s styles, v *readmodel.StatusView, elapsed time.Duration) string {
	c := v.Counts
	// The bar fills with every task that is over; "done" counts only the
	// completed ones, the others are named (6 canceled are not 6/6 done).
	over := c.Completed + c.Failed + c.Blocked + c.Canceled
	total := max(c.Total(), 1)
	const width = 20
	filled := over * width / total
	bar := strings.Repeat("█", filled) + strings.Repeat("░", width-filled)
	parts := []string{fmt.Sprintf("%d/%d done", c.Completed, c.Total())}
	if c.Running+c.Claimed > 0 {
		parts = append(parts, s.active.Render(fmt.Sprintf("%d running", c.Running+c.Claimed)))
	}
	if c.Pending > 0 {
		parts = append(parts, fmt.Sprintf("%d pending", c.Pending))
	}
	if c.Failed > 0 {
		parts = append(parts, s.bad.Render(fmt.Sprintf("%d failed", c.Failed)))
	}
	if c.Blocked > 0 {
		parts = append(parts, s.warn.Render(fmt.Sprintf("%d blocked", c.Blocked)))
	}
	if c.Canceled > 0 {
		parts = append(parts, s.warn.Render(fmt.Sprintf("%d canceled", c.Canceled)))
	}
	return fmt.Sprintf("%s %s %s · %s", v.Project, bar, strings.Join(parts, " · "), elapsed.Round(time.Second))
}

// stoppedFailure says why a project that start followed was stopped: by the
// operator, or by dispatch for an error of its own, which it names; states
// (each task's status by ID) say whether start or retry takes it further.
func stoppedFailure(p domain.Project, states map[string]domain.Status) *workFailed {
	if p.Problem != "" {
		return &workFailed{msg: fmt.Sprintf("dispatch: %s was stopped by dispatch: %s\nTry: fix that, then dispatch start %s (resumes; what ran is collected)",
			p.Name, termtext.Clean(p.Problem), p.Name)}
	}
	return &workFailed{msg: fmt.Sprintf("dispatch: %s was stopped; what ran is collected (dispatch status %s); %s", p.Name, p.Name, readmodel.StoppedNext(p.Name, states))}
}
