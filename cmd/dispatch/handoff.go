package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/dispatch-tool/dispatch/control"
	"github.com/dispatch-tool/dispatch/controller"
	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/home"
	"github.com/dispatch-tool/dispatch/internal/logrotate"
	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/nodes/sshnode"
	"github.com/dispatch-tool/dispatch/service"
)

const (
	// detachedEnv marks the controller process that `start --detach` runs.
	detachedEnv = "DISPATCH_DETACHED"
	// detachedLogEnv is the path of the log the detached controller's
	// stdout and stderr are: it rotates it (see detachedLog).
	detachedLogEnv = "DISPATCH_DETACHED_LOG"
)

// detachedLog is the rotated dispatch.log of a detached controller (nil in
// any other process): main writes through it, and the controller sets its
// maximum from nodes.yaml.
var detachedLog *logrotate.File

// openDetachedLog makes the detached controller write its output through
// a log rotated by size: stdout and stderr (the file its parent opened)
// are pointed at each new dispatch.log. Outside one it returns the
// writers as they are.
func openDetachedLog(stdout, stderr io.Writer) (io.Writer, io.Writer) {
	path := os.Getenv(detachedLogEnv)
	if os.Getenv(detachedEnv) == "" || path == "" {
		return stdout, stderr
	}
	if fi, err := os.Stderr.Stat(); err != nil || !fi.Mode().IsRegular() {
		return stdout, stderr
	}
	detachedLog = logrotate.New(path, nodes.DefaultLogMaxSize, 3, os.Stderr, int(os.Stdout.Fd()), int(os.Stderr.Fd()))
	return detachedLog, detachedLog
}

// handOffWait is how long a start waits for the controller holding the
// lock to open its control socket: it takes the lock a moment before it
// listens, so a second start launched with the first one finds no socket.
const handOffWait = 5 * time.Second

// handOff gives a project to the controller already running on the home,
// then follows it to the end (unless detach) and exits with its result.
// While the lock holder does not answer on the socket it tries again for
// handOffWait; when the holder goes away meanwhile, handOff takes the lock
// and returns it, and the caller becomes the controller.
func handOff(ctx context.Context, e *env, name string, so control.StartOptions, detach bool) (*home.Lock, error) {
	deadline := time.Now().Add(handOffWait)
	var rep control.Reply
	for {
		var err error
		rep, err = control.Send(ctx, e.home, control.Request{Op: "start", Project: name, Start: so})
		if err == nil {
			break
		}
		if !errors.Is(err, control.ErrNoController) {
			return nil, err
		}
		lock, lerr := home.AcquireLock(e.home)
		switch {
		case lerr == nil:
			return lock, nil
		case !errors.Is(lerr, home.ErrLocked):
			return nil, lerr
		case time.Now().After(deadline):
			return nil, fmt.Errorf("%w; it does not answer on %s (waited %s)", lerr, home.SocketPath(e.home), handOffWait)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	if rep.Error != "" {
		if rep.Usage {
			return nil, &usageError{err: errors.New(rep.Error), hint: "dispatch validate " + name}
		}
		return nil, errors.New(rep.Error)
	}
	fmt.Fprintln(e.out, rep.Message)
	if detach {
		fmt.Fprintf(e.out, "follow it with: dispatch status %s --watch\n", name)
		return nil, nil
	}
	return nil, follow(ctx, e, name)
}

// follow shows a project's progress from the database until it is finished
// or stopped, and returns its result as the exit status.
func follow(ctx context.Context, e *env, name string) error {
	st, err := e.openReadOnly(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	prog := newProgress(e, st, name)
	for {
		prog.update(ctx)
		p, err := st.Project(ctx, name)
		if err != nil {
			return err
		}
		if p.State != domain.ProjectActive {
			prog.finish(ctx)
			if p.State == domain.ProjectStopped {
				states, _, err := st.States(ctx, name)
				if err != nil {
					return err
				}
				return stoppedFailure(p, states)
			}
			fmt.Fprintf(e.out, "report: %s\n", filepath.Join(home.RunsDir(e.home, name), "report.md"))
			if p.Result != domain.ResultPassed {
				return &workFailed{}
			}
			return nil
		}
		select {
		case <-ctx.Done():
			prog.clearLive()
			return &workFailed{msg: fmt.Sprintf("dispatch: stopped following %s; the controller goes on (dispatch status %s)", name, name)}
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// detach starts this same `dispatch start` as a background controller in its
// own session, with its output in <home>/dispatch.log, and returns once its
// control socket answers.
func detach(ctx context.Context, e *env, name string, args []string) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	logPath := home.LogPath(e.home)
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("open %s: %w", logPath, err)
	}
	defer logf.Close()
	if err := logf.Chmod(0o600); err != nil {
		return fmt.Errorf("make %s private: %w", logPath, err)
	}
	fmt.Fprintf(logf, "--- %s dispatch %s\n", time.Now().Format(time.RFC3339), strings.Join(args, " "))
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), detachedEnv+"=1", detachedLogEnv+"="+logPath)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start the background controller: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.After(30 * time.Second)
	for {
		if control.Running(e.home) {
			if name == "" {
				fmt.Fprintf(e.out, "dispatch serve started in the background (pid %d)\nlog: %s\nsee: dispatch schedule; stop it with: dispatch serve --stop\n",
					cmd.Process.Pid, logPath)
				return nil
			}
			fmt.Fprintf(e.out, "controller started in the background (pid %d) for %s\nlog: %s\nfollow it with: dispatch status %s --watch\n",
				cmd.Process.Pid, name, logPath, name)
			return nil
		}
		select {
		case err := <-exited:
			// A short project can be over before its controller is seen
			// running: exit 0 or 1 is the project's result, as in the
			// foreground; anything else is a controller that failed.
			var ee *exec.ExitError
			switch {
			case name == "":
			case err == nil:
				fmt.Fprintf(e.out, "controller ran %s in the background (pid %d), already to its end: passed\nlog: %s\nsee: dispatch report %s\n",
					name, cmd.Process.Pid, logPath, name)
				return nil
			case errors.As(err, &ee) && ee.ExitCode() == 1:
				return &workFailed{msg: fmt.Sprintf("controller ran %s in the background (pid %d), already to its end: not passed; log: %s; see: dispatch report %s",
					name, cmd.Process.Pid, logPath, name)}
			}
			b, _ := os.ReadFile(logPath)
			return fmt.Errorf("the background controller exited at once (%v); the end of %s:\n%s", err, logPath, lastLines(string(b), 15))
		case <-deadline:
			return fmt.Errorf("the background controller (pid %d) did not open its control socket within 30s; see %s", cmd.Process.Pid, logPath)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// detachArgs is the command line of the background controller: this
// `dispatch start` without --detach, rebuilt from the parsed flags with the
// home and nodes.yaml as absolute paths, since it runs in "/".
func detachArgs(c *cli.Context, e *env, name string) []string {
	args := append(globalArgs(c, e), "start")
	if c.IsSet("poll") {
		args = append(args, "--poll", c.Duration("poll").String())
	}
	for _, n := range c.StringSlice("nodes") {
		args = append(args, "--nodes", n)
	}
	for _, f := range []string{"integrate-partial", "no-integrate"} {
		if c.Bool(f) {
			args = append(args, "--"+f)
		}
	}
	if c.IsSet("budget-usd") {
		args = append(args, "--budget-usd", strconv.FormatFloat(c.Float64("budget-usd"), 'f', -1, 64))
	}
	if c.Bool("fresh") {
		args = append(args, "--fresh")
	}
	return append(args, name)
}

// globalArgs are the global flags of a background controller: the home
// and nodes.yaml as absolute paths (it runs in "/"), the log settings.
func globalArgs(c *cli.Context, e *env) []string {
	cfg, err := filepath.Abs(e.config)
	if err != nil {
		cfg = e.config
	}
	args := []string{"--home", e.home, "--config", cfg,
		"--log-format", c.String("log-format"), "--log-level", c.String("log-level")}
	if c.Bool("no-color") {
		args = append(args, "--no-color")
	}
	return args
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// writePidFiles records this process's pid in the home: in dispatch.pid
// when it is a background controller, and in each of also (dispatch.serve
// of the daemon). The returned func removes them.
func writePidFiles(e *env, also ...string) (func(), error) {
	pid := []byte(fmt.Sprintf("%d\n", os.Getpid()))
	var names []string
	if os.Getenv(detachedEnv) != "" {
		names = append(names, home.PidFile)
	}
	names = append(names, also...)
	var written []string
	remove := func() {
		for _, n := range written {
			os.Remove(filepath.Join(e.home, n))
		}
	}
	for _, n := range names {
		if err := writePrivate(filepath.Join(e.home, n), pid); err != nil {
			remove()
			return nil, err
		}
		written = append(written, n)
	}
	return remove, nil
}

// runController makes the home's controller: it answers on the control
// socket, its pid is recorded (writePidFiles), and it re-reads nodes.yaml
// for each start handed to it and on SIGHUP. done undoes all three.
func runController(ctx context.Context, e *env, opts controller.Options) (*controller.Controller, func(), error) {
	sshEnv, err := sshnode.DefaultEnv()
	if err != nil {
		return nil, nil, err
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	opts.Reload = e.loadConfig
	if detachedLog != nil && opts.Config != nil {
		detachedLog.SetMax(opts.Config.Controller.LogMaxSize)
	}
	opts.Open = func(cfg *nodes.Config, n nodes.Node) (nodes.Transport, error) { return sshnode.Open(cfg, n, sshEnv) }
	opts.Hangup = hup
	if opts.SetSchedule == nil {
		// `dispatch schedule enable|disable` while a start's controller
		// holds the home: recorded, for the next dispatch serve.
		opts.SetSchedule = func(ctx context.Context, project string, enabled bool, now time.Time) (string, error) {
			return service.SetEnabled(ctx, opts.Store, e.specsDir(), project, enabled, now)
		}
	}
	ctl := controller.New(opts)
	stopServing, err := ctl.Serve(ctx)
	if err != nil {
		signal.Stop(hup)
		return nil, nil, err
	}
	removePids, err := writePidFiles(e)
	if err != nil {
		stopServing()
		signal.Stop(hup)
		return nil, nil, err
	}
	return ctl, func() { removePids(); stopServing(); signal.Stop(hup) }, nil
}
