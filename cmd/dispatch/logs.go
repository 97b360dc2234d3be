package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/home"
	"github.com/dispatch-tool/dispatch/internal/termtext"
	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/nodes/sshnode"
	"github.com/dispatch-tool/dispatch/spec"
	"github.com/dispatch-tool/dispatch/store"
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
	attempt := c.Int("attempt")
	if attempt == 0 {
		attempt = t.Attempt
	}
	if attempt < 1 || attempt > t.Attempt {
		return usagef(usage, "%s/%s has attempts 1 to %d", project, id, t.Attempt)
	}
	runs, err := st.Attempts(ctx, project, id)
	if err != nil {
		return err
	}
	var run domain.Attempt
	for _, r := range runs {
		if r.Attempt == attempt {
			run = r
		}
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
	local := filepath.Join(home.RunsDir(e.home, project), id, "attempts", strconv.Itoa(attempt), "task.log")
	if !run.CollectedAt.IsZero() {
		b, err := os.ReadFile(local)
		if err == nil {
			_, err = out.Write(b)
			return err
		}
	}
	if run.Node == "" {
		return fmt.Errorf("%s/%s attempt %d has not started yet: no log", project, id, attempt)
	}
	return remoteLog(ctx, e, out, st, t, run, c.Bool("follow"))
}

// remoteLog prints an attempt's task.log from its node, polling for more
// with `tail --from` while it runs when follow is set. It writes to out.
func remoteLog(ctx context.Context, e *env, out io.Writer, st *store.Store, t domain.Task, run domain.Attempt, follow bool) error {
	cfg, err := e.loadConfig()
	if err != nil {
		return err
	}
	n, ok := cfg.Node(run.Node)
	if !ok {
		return fmt.Errorf("node %s of %s/%s is no longer in %s", run.Node, t.Project, t.ID, cfg.File)
	}
	env, err := sshnode.DefaultEnv()
	if err != nil {
		return err
	}
	tr, err := sshnode.Open(cfg, n, env)
	if err != nil {
		return err
	}
	defer tr.Close()
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	inst, err := nodes.EnsureWrapper(cctx, tr, n.WorkDir, nodes.NewWrappers())
	cancel()
	if err != nil {
		return fmt.Errorf("reach %s: %w", n.Name, err)
	}
	dir := path.Join(inst.WorkDir, t.Project, "tasks", t.ID)
	if run.Attempt != t.Attempt || t.Node != run.Node {
		// An earlier attempt: moved aside when a later one started there.
		dir = path.Join(dir, "attempts", strconv.Itoa(run.Attempt))
	}
	var pos int64
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		res, err := tr.Exec(cctx, []string{inst.Path, "tail", "--dir", dir, "--from", strconv.FormatInt(pos, 10)}, nil)
		cancel()
		if err != nil {
			return err
		}
		if res.ExitCode != 0 {
			return fmt.Errorf("read the log on %s: %s", n.Name, termtext.Clean(string(res.Stdout)+string(res.Stderr)))
		}
		if _, err := out.Write(res.Stdout); err != nil {
			return err
		}
		pos += int64(len(res.Stdout))
		if !follow {
			return nil
		}
		cur, err := st.Task(ctx, t.Project, t.ID)
		if err != nil {
			return err
		}
		if cur.Attempt != run.Attempt || (cur.Status != domain.Running && cur.Status != domain.Claimed) {
			// One last read: what the tool wrote before it ended.
			res, err := tr.Exec(ctx, []string{inst.Path, "tail", "--dir", dir, "--from", strconv.FormatInt(pos, 10)}, nil)
			if err == nil && res.ExitCode == 0 {
				_, _ = out.Write(res.Stdout)
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
}
