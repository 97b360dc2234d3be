package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"
	"time"

	"github.com/dispatch-tool/dispatch/control"
	"github.com/dispatch-tool/dispatch/controller"
	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/nodes/sshnode"
	"github.com/dispatch-tool/dispatch/store"
	"github.com/dispatch-tool/dispatch/wrapper/gitresult"
	"github.com/urfave/cli/v2"
)

func cleanupCommand() *cli.Command {
	return readCommand(&cli.Command{
		Name:  "cleanup",
		Usage: "remove a project's workspaces from every node (the collected runs/ stay); refuses while tasks run",
		Flags: []cli.Flag{&cli.BoolFlag{Name: "yes", Usage: "remove them (without it, only say what would go)"}},
	}, "dispatch cleanup <project> [--yes]", func(c *cli.Context, e *env, st *store.Store, project string) error {
		ctx := c.Context
		cfg, err := e.loadConfig()
		if err != nil {
			return err
		}
		tasks, err := st.Tasks(ctx, project)
		if err != nil {
			return err
		}
		var running []string
		for _, t := range tasks {
			if t.Status == domain.Running || t.Status == domain.Claimed {
				running = append(running, t.ID)
			}
		}
		if len(running) > 0 {
			return usagef("dispatch stop "+project+" --kill", "%s has running tasks (%v): cleanup would pull their workspaces from under them", project, running)
		}
		if p, _ := st.Project(ctx, project); p.State == domain.ProjectActive {
			if control.Running(e.home) {
				return usagef("dispatch stop "+project, "a controller is serving %s: stop it first", project)
			}
		}
		env, err := sshnode.DefaultEnv()
		if err != nil {
			return err
		}
		failed := 0
		for _, n := range cfg.Nodes {
			where := fmt.Sprintf("%s:%s", n.Name, path.Join(n.WorkDir, project))
			if !c.Bool("yes") {
				fmt.Fprintf(e.out, "would remove %s\n", where)
				continue
			}
			if err := removeWorkspace(ctx, cfg, n, env, project); err != nil {
				failed++
				fmt.Fprintf(e.out, "FAILED %s: %v\n", where, err)
				continue
			}
			fmt.Fprintf(e.out, "removed %s\n", where)
		}
		if !c.Bool("yes") {
			return usagef("dispatch cleanup "+project+" --yes", "nothing removed; the collected outputs in runs/%s stay either way", project)
		}
		if failed > 0 {
			return &workFailed{msg: fmt.Sprintf("dispatch: %d node(s) could not be cleaned", failed)}
		}
		return nil
	})
}

func removeWorkspace(ctx context.Context, cfg *nodes.Config, n nodes.Node, env sshnode.Env, project string) error {
	tr, err := sshnode.Open(cfg, n, env)
	if err != nil {
		return err
	}
	defer tr.Close()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	// The database may have given an attempt up (its node was offline)
	// while its wrapper still runs there: ask the wrapper, and never pull a
	// live attempt's directory from under it.
	inst, err := nodes.EnsureWrapper(ctx, tr, n.WorkDir, nodes.NewWrappers())
	if err != nil {
		return fmt.Errorf("ask the wrapper which attempts still run: %w", err)
	}
	ns, err := controller.NodeFacts(ctx, tr, inst)
	if err != nil {
		return fmt.Errorf("ask the wrapper which attempts still run: %w", err)
	}
	var live, dead []string
	for _, ts := range ns.Tasks {
		if ts.Project != project {
			continue
		}
		if ts.Alive {
			live = append(live, ts.Dir)
		} else {
			dead = append(dead, ts.Dir)
		}
	}
	// A git-native task's result is recorded in a private git directory
	// of the wrapper's, outside the task directory: it goes with it.
	removeSnapshots := func(dirs []string) error {
		for _, d := range dirs {
			if err := tr.Remove(ctx, gitresult.SnapshotDirOf(inst.Path, d)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
		return nil
	}
	if len(live) == 0 {
		if err := tr.Remove(ctx, path.Join(inst.WorkDir, project)); err != nil {
			return err
		}
		return removeSnapshots(dead)
	}
	for _, d := range dead {
		if err := tr.Remove(ctx, d); err != nil {
			return err
		}
	}
	if err := removeSnapshots(dead); err != nil {
		return err
	}
	return fmt.Errorf("kept %s: a wrapper still runs an attempt there (removed the other task directories); "+
		"`dispatch start %s` kills such attempts, or on the node: %s kill --dir <dir>; then run cleanup again",
		strings.Join(live, ", "), project, inst.Path)
}
