package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/dispatch-tool/dispatch/control"
	"github.com/dispatch-tool/dispatch/controller"
	"github.com/dispatch-tool/dispatch/home"
	"github.com/dispatch-tool/dispatch/httpapi"
	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/prune"
	"github.com/dispatch-tool/dispatch/service"
	"github.com/dispatch-tool/dispatch/spec"
	"github.com/dispatch-tool/dispatch/store"
)

func serveCommand() *cli.Command {
	return &cli.Command{
		Name: "serve",
		Usage: "run the home's controller as a daemon: it starts scheduled runs when due and takes every start " +
			"(Ctrl-C, SIGTERM or serve --stop ends it; running tasks go on)",
		Flags: []cli.Flag{
			&cli.DurationFlag{Name: "poll", Usage: "pull period `D` (default: poll_interval of nodes.yaml)"},
			&cli.BoolFlag{Name: "detach", Usage: "run it in the background (log: <home>/dispatch.log, pid: <home>/dispatch.pid)"},
			&cli.BoolFlag{Name: "install", Usage: "write a systemd user unit (Linux) or a launchd agent (macOS) that runs it, and say how to enable it"},
			&cli.BoolFlag{Name: "stop", Usage: "stop the running daemon of this home"},
			&cli.GenericFlag{Name: "http", Value: &httpAddr{}, Usage: "also serve the dashboard and the JSON API on `ADDR` " +
				"(--http alone: " + httpapi.DefaultAddr + "; every request needs the token in <home>/http.token)"},
			&cli.StringFlag{Name: "tls-cert", Usage: "with --http, speak TLS with this certificate `FILE` (PEM)"},
			&cli.StringFlag{Name: "tls-key", Usage: "with --http, the certificate's key `FILE` (PEM)"},
			&cli.BoolFlag{Name: "insecure-listen", Usage: "with --http, let an address other machines reach serve in clear text: " +
				"anyone on the network path can read the token and every log"},
			&cli.BoolFlag{Name: "read-only", Usage: "with --http, the dashboard and the API only read: they refuse retry, cancel, stop, start and a schedule's switch"},
		},
		Action: serveAction,
	}
}

func serveAction(c *cli.Context) error {
	ctx := c.Context
	e, err := newEnv(c)
	if err != nil {
		return err
	}
	web, err := httpListen(c)
	if err != nil {
		return err
	}
	switch {
	case c.Bool("stop"):
		return serveStop(ctx, e)
	case c.Bool("install"):
		return serveInstall(c, e, web)
	}

	if c.Duration("poll") < 0 {
		return usagef("dispatch serve --poll 5s", "--poll must be positive")
	}
	cfg, err := e.loadConfig()
	if err != nil {
		return err
	}
	if err := warnBadSchedules(e); err != nil {
		return err
	}
	lock, err := home.AcquireLock(e.home)
	if errors.Is(err, home.ErrLocked) && web != nil && !c.Bool("detach") {
		// The dashboard and the API read the database through their own
		// read-only store: they can run beside any controller of the home.
		return serveWebOnly(ctx, e, *web, err)
	}
	if errors.Is(err, home.ErrLocked) {
		why := "start dispatch serve again once it has ended (dispatch serve --stop ends a daemon)"
		if web != nil {
			why = "without --detach, dispatch serve --http serves the dashboard and API beside it, until Ctrl-C"
		}
		return fmt.Errorf("%w: a controller already runs on this home (a dispatch start, or another dispatch serve); %s", err, why)
	}
	if err != nil {
		return err
	}
	if c.Bool("detach") && os.Getenv(detachedEnv) == "" {
		lock.Release()
		if err := detach(ctx, e, "", serveArgs(c, e, web)); err != nil {
			return err
		}
		if web != nil {
			return printWebURL(e, *web, "")
		}
		return nil
	}
	defer lock.Release()
	return serveLoop(ctx, c, e, cfg, web)
}

// warnBadSchedules says now which schedule does not read, not found wrong
// at 3 am; it does not keep the daemon (every other schedule, every
// start) from running: a service manager would restart it in a loop.
func warnBadSchedules(e *env) error {
	_, bad, err := spec.LoadSchedules(e.specsDir())
	if err != nil {
		return err
	}
	for _, name := range sortedNames(bad) {
		fmt.Fprintf(e.errOut, "warning: %v\n  its scheduled runs wait until it is fixed (dispatch validate %s)\n", bad[name], name)
	}
	return nil
}

// serveLoop is the daemon, once it holds the home's lock: the dashboard
// and API when web is set, the controller with the schedules between its
// ticks, the daily prune, until ctx ends or serve --stop.
func serveLoop(ctx context.Context, c *cli.Context, e *env, cfg *nodes.Config, web *httpapi.Listen) error {
	if web != nil {
		stop, err := serveHTTP(e, *web)
		if err != nil {
			return err
		}
		defer stop()
	}
	transports, err := openTransports(cfg, nil)
	if err != nil {
		return err
	}
	st, err := store.Open(ctx, e.dbPath())
	if err != nil {
		return err
	}
	defer st.Close()
	// The schedules are what makes this controller a daemon.
	sch := &service.Schedules{St: st, SpecsDir: e.specsDir(), Log: e.log, Now: time.Now, Backoff: scheduleBackoff()}
	ctl, done, err := runController(ctx, e, controller.Options{Home: e.home, Config: cfg, Store: st, Transports: transports,
		Wrappers: nodes.NewWrappers(), Logger: e.log, Between: sch.Between, SetSchedule: sch.SetEnabled})
	if err != nil {
		return err
	}
	defer done()
	sch.Notify = func(ctx context.Context, ns []service.Notice) {
		alerts := make([]controller.Alert, len(ns))
		for i, n := range ns {
			alerts[i] = controller.Alert{Project: n.Project, Event: n.Event, Message: n.Message}
		}
		ctl.Notify(ctx, alerts...)
	}
	defer pruneDaily(ctx, e, st, cfg)()
	fmt.Fprintf(e.out, "dispatch serve: serving %s (pid %d): scheduled runs start when due, dispatch start hands projects to it; "+
		"dispatch schedule lists the schedules\n", e.home, os.Getpid())
	err = ctl.Run(ctx, c.Duration("poll"), nil)
	if errors.Is(err, context.Canceled) {
		fmt.Fprintln(e.out, "dispatch serve: stopped; running tasks go on and are collected by the next controller")
		return nil
	}
	if err == nil {
		fmt.Fprintln(e.out, "dispatch serve: stopped (serve --stop); running tasks go on and are collected by the next controller")
	}
	return err
}

// pruneDaily prunes the runs retention lets go once a day beside the
// control loop, with nodes.yaml as it is then (cfg when it does not
// load); the function it returns stops it and waits for it.
func pruneDaily(ctx context.Context, e *env, st *store.Store, cfg *nodes.Config) func() {
	ctx, cancel := context.WithCancel(ctx)
	d := &service.DailyPrune{Log: e.log, Prune: func(ctx context.Context) ([]service.Pruned, error) {
		now := cfg
		if c, err := e.loadConfig(); err == nil {
			now = c
		}
		reps, err := (&prune.Pruner{Store: st, Config: now, Home: e.home}).All(ctx, false)
		out := make([]service.Pruned, 0, len(reps))
		for _, r := range reps {
			p := service.Pruned{Project: r.Project, Runs: len(r.Runs), Problems: r.Problems}
			for _, run := range r.Runs {
				p.Files, p.Bytes, p.Rows = p.Files+run.Files, p.Bytes+run.Bytes, p.Rows+run.RowCount()
			}
			out = append(out, p)
		}
		return out, err
	}}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		d.Run(ctx)
	}()
	return func() {
		cancel()
		wg.Wait()
	}
}

func sortedNames[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}

// serveArgs is the command line of the background daemon.
func serveArgs(c *cli.Context, e *env, web *httpapi.Listen) []string {
	args := globalArgs(c, e)
	args = append(args, "serve")
	if c.IsSet("poll") {
		args = append(args, "--poll", c.Duration("poll").String())
	}
	return append(args, webArgs(web)...)
}

// serveStop asks the home's daemon to end.
func serveStop(ctx context.Context, e *env) error {
	rep, err := control.Send(ctx, e.home, control.Request{Op: "shutdown"})
	if errors.Is(err, control.ErrNoController) {
		fmt.Fprintf(e.out, "no dispatch serve runs on %s; nothing to stop\n", e.home)
		return nil
	}
	if err != nil {
		return err
	}
	if rep.Error != "" {
		return errors.New(rep.Error)
	}
	fmt.Fprintln(e.out, rep.Message)
	// Wait for it to let the home go, so that a start right after finds
	// no daemon.
	deadline := time.Now().Add(30 * time.Second)
	for control.Running(e.home) && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}

func scheduleCommand() *cli.Command {
	return &cli.Command{
		Name:      "schedule",
		Usage:     "list the scheduled projects with their next and last run; schedule disable|enable <project>",
		ArgsUsage: "[disable|enable <project>]",
		Flags:     []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "print JSON"}},
		Action:    scheduleAction,
	}
}

func scheduleAction(c *cli.Context) error {
	ctx := c.Context
	e, err := newEnv(c)
	if err != nil {
		return err
	}
	const usage = "dispatch schedule [--json] | dispatch schedule disable|enable <project>"
	switch c.NArg() {
	case 0:
	case 2:
		op, project := c.Args().Get(0), c.Args().Get(1)
		if op != "enable" && op != "disable" {
			return usagef(usage, "unknown schedule command %q: use enable or disable", op)
		}
		if err := spec.ValidName(project); err != nil {
			return &usageError{err: err, hint: usage}
		}
		return scheduleToggle(ctx, e, op, project, usage)
	default:
		return usagef(usage, "schedule takes no argument, or enable|disable and a project")
	}
	v, err := schedules(ctx, e, time.Now())
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return printJSON(e.out, v)
	}
	if len(v.Schedules) == 0 {
		fmt.Fprintln(e.out, "no project has a schedule: in its project.yaml (e.g. schedule: {cron: \"0 3 * * *\"})")
		return nil
	}
	tw := tabwriter.NewWriter(e.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PROJECT\tSCHEDULE\tENABLED\tNEXT RUN\tLAST RUN\tRESULT\tFAILURES\tSKIPPED\tCATCH-UPS")
	for _, s := range v.Schedules {
		last := "-"
		if s.LastRun > 0 {
			last = fmt.Sprintf("%d at %s", s.LastRun, localTime(s.LastStartedAt))
		}
		result := s.LastResult
		if result == "" {
			result = "-"
		}
		next := localTime(s.NextAt)
		if s.Problem != "" {
			first, _, _ := strings.Cut(s.Problem, "\n")
			next = "not read: " + first + " (dispatch validate " + s.Project + ")"
		}
		when := s.Kind + " " + s.Schedule
		if s.Timezone != "" {
			when += " (" + s.Timezone + ")"
		}
		if s.Reuse {
			when += ", reuse"
		}
		if s.Problem != "" {
			when = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%v\t%s\t%s\t%s\t%d\t%d\t%d\n", s.Project, when, s.Enabled, next, last, result, s.Failures, s.Skipped, s.CatchUps)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, s := range v.Schedules {
		if s.DisabledReason != "" {
			fmt.Fprintf(e.out, "%s is disabled: %s\n  to enable it again: %s\n", s.Project, s.DisabledReason, s.Enable)
		}
	}
	if !v.Serving {
		fmt.Fprintln(e.out, "no dispatch serve runs on this home: scheduled runs start only while it runs (dispatch serve --detach, or --install)")
	}
	return nil
}

// scheduleToggle enables or disables a schedule: through the running
// controller, or, when none runs, under the home's lock.
func scheduleToggle(ctx context.Context, e *env, op, project, usage string) error {
	rep, err := operate(ctx, e, control.Request{Op: op, Project: project})
	if err != nil {
		return err
	}
	return printReply(e, rep, usage)
}

// toggleLocally enables or disables a schedule with no controller
// running: under the home's lock. A schedule that is wrong or missing
// writes nothing.
func toggleLocally(ctx context.Context, e *env, req control.Request) (control.Reply, error) {
	if sp, err := spec.LoadSchedule(e.specsDir(), req.Project); err != nil || sp == nil {
		if err == nil {
			err = fmt.Errorf("project %s has no schedule: in its project.yaml (add one, e.g. schedule: {every: 6h})", req.Project)
		}
		return control.Reply{Error: err.Error(), Usage: true}, nil
	}
	lock, err := lockHome(ctx, e.home)
	if err != nil {
		return control.Reply{}, err
	}
	defer lock.Release()
	st, err := store.Open(ctx, e.dbPath())
	if err != nil {
		return control.Reply{}, err
	}
	defer st.Close()
	msg, err := service.SetEnabled(ctx, st, e.specsDir(), req.Project, req.Op == "enable", time.Now())
	var oe *control.OpError
	if errors.As(err, &oe) {
		return control.Reply{Error: oe.Msg, Usage: true}, nil
	}
	if err == nil && req.Via != "" {
		// As the controller records it (controller.Do).
		err = st.Update(ctx, func(tx *store.Tx) error {
			return tx.Event(ctx, store.Event{Project: req.Project, Kind: control.ActionEvent, Message: control.ActionMessage(req, msg)})
		})
	}
	return control.Reply{Message: msg}, err
}

// daemonRuns reports whether a dispatch serve daemon runs on home: the
// controller that answers on its socket says what it is.
func daemonRuns(ctx context.Context, home string) bool {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	rep, err := control.Send(ctx, home, control.Request{Op: "ping"})
	return err == nil && rep.Message == "daemon"
}

// schedules is `dispatch schedule --json`.
func schedules(ctx context.Context, e *env, now time.Time) (*service.ScheduleView, error) {
	st, err := e.openIfAny(ctx)
	if err != nil {
		return nil, err
	}
	if st != nil {
		defer st.Close()
	}
	return service.View(ctx, st, e.specsDir(), daemonRuns(ctx, e.home), now)
}

// envScheduleBackoff shortens the wait after a failed scheduled run, for
// the tests of the circuit breaker under a real daemon (at least 1s).
const envScheduleBackoff = "DISPATCH_TEST_SCHEDULE_BACKOFF"

// scheduleBackoff is the daemon's wait after a first failed scheduled run:
// 0 (schedule.FailureBackoff) unless envScheduleBackoff says otherwise.
func scheduleBackoff() time.Duration {
	if d, err := time.ParseDuration(os.Getenv(envScheduleBackoff)); err == nil && d >= time.Second {
		return d
	}
	return 0
}

// serveWebOnly serves the dashboard and API of a home another controller
// holds (a dispatch start --detach, say), without its lock: what the page
// shows is what that controller records, and its actions go to that
// controller over the control socket, as dispatch retry's do; once it
// ends the page says no controller runs. It ends on Ctrl-C or SIGTERM and
// never touches the controller.
func serveWebOnly(ctx context.Context, e *env, web httpapi.Listen, locked error) error {
	stop, err := serveHTTP(e, web)
	if err != nil {
		return err
	}
	defer stop()
	fmt.Fprintf(e.out, "dispatch serve: %v; serving only the dashboard and API beside it (their actions, like dispatch retry, cancel and stop, "+
		"go to that controller); Ctrl-C stops this server, not the controller\n", locked)
	<-ctx.Done()
	fmt.Fprintln(e.out, "dispatch serve: dashboard and API stopped")
	return nil
}
