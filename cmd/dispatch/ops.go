package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/dispatch-tool/dispatch/control"
	"github.com/dispatch-tool/dispatch/controller"
	"github.com/dispatch-tool/dispatch/home"
	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/spec"
	"github.com/dispatch-tool/dispatch/store"
)

func retryCommand() *cli.Command {
	return &cli.Command{
		Name:      "retry",
		Usage:     "run finished, failed, blocked or canceled tasks again (with their current spec)",
		ArgsUsage: "<project> <ID>...",
		Flags:     []cli.Flag{&cli.BoolFlag{Name: "downstream", Usage: "also rerun every task after them (their dependents, transitively)"}},
		Action: func(c *cli.Context) error {
			return operatorRequest(c, "retry", "dispatch retry <project> <ID>... [--downstream]", false)
		},
	}
}

func cancelCommand() *cli.Command {
	return &cli.Command{
		Name:      "cancel",
		Usage:     "cancel tasks; running ones are killed on their node",
		ArgsUsage: "<project> <ID>...",
		Action: func(c *cli.Context) error {
			return operatorRequest(c, "cancel", "dispatch cancel <project> <ID>...", false)
		},
	}
}

func stopCommand() *cli.Command {
	return &cli.Command{
		Name:      "stop",
		Usage:     "stop starting a project's tasks; running ones go on unless --kill cancels them (dispatch start resumes; dispatch retry reruns canceled tasks)",
		ArgsUsage: "<project>",
		Flags:     []cli.Flag{&cli.BoolFlag{Name: "kill", Usage: "also cancel the running tasks, killing them on their nodes"}},
		Action: func(c *cli.Context) error {
			return operatorRequest(c, "stop", "dispatch stop <project> [--kill]", true)
		},
	}
}

// operatorRequest sends a mutating command to the running controller over
// its socket, or, when none runs, takes the lock and carries it out itself.
func operatorRequest(c *cli.Context, op, usage string, projectOnly bool) error {
	ctx := c.Context
	e, err := newEnv(c)
	if err != nil {
		return err
	}
	if c.NArg() == 0 {
		return usagef(usage, "missing project name")
	}
	project := c.Args().First()
	if err := spec.ValidName(project); err != nil {
		return &usageError{err: err, hint: usage}
	}
	ids := c.Args().Slice()[1:]
	if projectOnly && len(ids) > 0 {
		return usagef(usage, "unexpected arguments: %v", ids)
	}
	if !projectOnly && len(ids) == 0 {
		return usagef(usage, "name the tasks (e.g. S01)")
	}
	for _, id := range ids {
		if !spec.TaskIDPattern.MatchString(id) {
			return usagef(usage, "%q is not a task ID (a capital letter and digits, like S01; S01.2 or S01@mac1 for a task of a matrix or broadcast)", id)
		}
	}
	rep, err := operate(ctx, e, control.Request{Op: op, Project: project, Tasks: ids, Kill: c.Bool("kill"), Downstream: c.Bool("downstream")})
	if err != nil {
		return err
	}
	return printReply(e, rep, usage)
}

// operate carries out an operator request as the CLI does: the running
// controller takes it over its socket; when none runs, this process takes
// the lock and does it (a start is refused then: nothing would run it).
// The dashboard and the API act through it too.
func operate(ctx context.Context, e *env, req control.Request) (control.Reply, error) {
	rep, err := control.Send(ctx, e.home, req)
	if !errors.Is(err, control.ErrNoController) {
		return rep, err
	}
	switch req.Op {
	case "start":
		return control.Reply{Usage: true, Error: fmt.Sprintf("no controller runs on this home, so nothing would run %s: "+
			"dispatch start %s (or dispatch serve) starts it", req.Project, req.Project)}, nil
	case "enable", "disable":
		return toggleLocally(ctx, e, req)
	}
	return doLocally(ctx, e, req)
}

// printReply prints a controller's reply, or returns its error: a usage
// error (exit 2) when the request itself was wrong.
func printReply(e *env, rep control.Reply, usage string) error {
	if rep.Error != "" {
		if rep.Usage {
			return &usageError{err: errors.New(rep.Error), hint: usage}
		}
		return errors.New(rep.Error)
	}
	fmt.Fprintln(e.out, rep.Message)
	return nil
}

// doLocally carries out a request with no controller running: it takes the
// home's lock (so no controller starts meanwhile) and acts on the database
// and the nodes itself.
func doLocally(ctx context.Context, e *env, req control.Request) (control.Reply, error) {
	lock, err := lockHome(ctx, e.home)
	if err != nil {
		return control.Reply{}, err
	}
	defer lock.Release()
	// The database must exist already: opened read-only to check, then
	// closed (it used to stay open until the command ended).
	ro, err := e.openToUpgrade(ctx)
	if err != nil {
		return control.Reply{}, err
	}
	ro.Close()
	cfg, err := e.loadConfig()
	if err != nil {
		return control.Reply{}, err
	}
	st, err := store.Open(ctx, e.dbPath())
	if err != nil {
		return control.Reply{}, err
	}
	defer st.Close()
	transports, err := openTransports(cfg, nil)
	if err != nil {
		return control.Reply{}, err
	}
	ctl := controller.New(controller.Options{Home: e.home, Config: cfg, Store: st, Transports: transports,
		Wrappers: nodes.NewWrappers(), Logger: e.log})
	defer ctl.Close()
	rep := ctl.Do(ctx, req)
	if rep.Error == "" && req.Op != "stop" {
		rep.Message += fmt.Sprintf(" (no controller is running: dispatch start %s runs it)", req.Project)
	}
	return rep, nil
}

// lockHome takes the home's lock for a command that found no controller
// on the socket. A holder that does not answer there is a controller
// ending (it closes its socket a moment before it lets the lock go) or
// starting (it takes the lock a moment before it listens): lockHome waits
// up to handOffWait for the first to let go, and fails with the holder's
// name if it does not.
func lockHome(ctx context.Context, homeDir string) (*home.Lock, error) {
	deadline := time.Now().Add(handOffWait)
	for {
		lock, err := home.AcquireLock(homeDir)
		if err == nil || !errors.Is(err, home.ErrLocked) || time.Now().After(deadline) || control.Running(homeDir) {
			return lock, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
