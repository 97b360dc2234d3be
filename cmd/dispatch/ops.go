package main

import (
	"context"
	"errors"
	"fmt"

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
	req := control.Request{Op: op, Project: project, Tasks: ids, Kill: c.Bool("kill"), Downstream: c.Bool("downstream")}
	rep, err := control.Send(ctx, e.home, req)
	if errors.Is(err, control.ErrNoController) {
		rep, err = doLocally(ctx, e, req)
	}
	if err != nil {
		return err
	}
	return printReply(e, rep, usage)
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
	lock, err := home.AcquireLock(e.home)
	if err != nil {
		return control.Reply{}, err
	}
	defer lock.Release()
	// The database must exist already: opened read-only to check, then
	// closed (it used to stay open until the command ended).
	ro, err := e.openReadOnly(ctx)
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
