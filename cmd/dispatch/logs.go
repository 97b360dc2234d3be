package main

import (
	"errors"
	"io"

	"github.com/urfave/cli/v2"

	"github.com/dispatch-tool/dispatch/internal/termtext"
	"github.com/dispatch-tool/dispatch/spec"
	"github.com/dispatch-tool/dispatch/store"
	"github.com/dispatch-tool/dispatch/tasklog"
)

func logsCommand() *cli.Command {
	return &cli.Command{
		Name:      "logs",
		Usage:     "print a task's log (the tool's stdout and stderr), from its node while it runs",
		ArgsUsage: "<project> <ID>",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "follow", Aliases: []string{"f"}, Usage: "keep printing until the attempt ends"},
			&cli.IntFlag{Name: "attempt", Usage: "attempt `N` (default: the latest)"},
			&cli.BoolFlag{Name: "raw", Usage: "print the log's bytes as they are, terminal controls included, even on a terminal"},
			runFlag(),
		},
		Action: logsAction,
	}
}

func logsAction(c *cli.Context) error {
	ctx := c.Context
	e, err := newEnv(c)
	if err != nil {
		return err
	}
	const usage = "dispatch logs <project> <ID> [-f] [--attempt N] [--run N] [--raw]"
	if c.NArg() != 2 {
		return usagef(usage, "logs takes a project and a task ID")
	}
	project, id := c.Args().Get(0), c.Args().Get(1)
	if err := spec.ValidName(project); err != nil {
		return &usageError{err: err, hint: usage}
	}
	st, err := e.openProject(ctx, project)
	if err != nil {
		return err
	}
	defer st.Close()
	at, err := atRun(c, st, project, usage)
	if err != nil {
		return err
	}
	// A task of an ended run: its last attempt of that run by default.
	t, err := at.Task(ctx, project, id)
	if errors.Is(err, store.ErrNotFound) {
		if at != st {
			return usagef(usage, "run %d of %s has no task %q", c.Int("run"), project, id)
		}
		return usagef(usage, "project %s has no task %q", project, id)
	}
	if err != nil {
		return err
	}
	run, err := tasklog.Attempt(ctx, st, t, c.Int("attempt"))
	if errors.Is(err, tasklog.ErrNoAttempt) {
		return usagef(usage, "%s/%s has attempts 1 to %d", project, id, t.Attempt)
	}
	if err != nil {
		return err
	}
	// The log is the task's output: on a terminal, a window title, a
	// screen clear or a clipboard write in it is shown, not done.
	out := e.out
	if e.tty && !c.Bool("raw") {
		w := termtext.NewWriter(e.out)
		defer w.Flush()
		out = w
	}
	// A collected log is on this machine already.
	if f, ok := tasklog.Collected(e.home, t, run); ok {
		defer f.Close()
		if _, err := io.Copy(out, f); err != nil {
			return err
		}
		return tasklog.Gate(ctx, st, t, run.Attempt, out)
	}
	cfg, err := e.loadConfig()
	if err != nil {
		return err
	}
	r, err := tasklog.OpenRemote(ctx, cfg, t, run)
	if err != nil {
		return err
	}
	defer r.Close()
	if !c.Bool("follow") {
		b, err := r.From(ctx, 0)
		if err != nil {
			return err
		}
		if _, err := out.Write(b); err != nil {
			return err
		}
		return tasklog.Gate(ctx, st, t, run.Attempt, out)
	}
	if _, err := r.Follow(ctx, st, t, run.Attempt, 0, out); err != nil {
		return err
	}
	return tasklog.Gate(ctx, st, t, run.Attempt, out)
}
