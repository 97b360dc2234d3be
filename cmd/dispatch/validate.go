package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/dispatch-tool/dispatch/control"
	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/internal/termtext"
	"github.com/dispatch-tool/dispatch/internal/yamlval"
	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/nodes/sshnode"
	"github.com/dispatch-tool/dispatch/plan"
	"github.com/dispatch-tool/dispatch/schedule"
	"github.com/dispatch-tool/dispatch/spec"
)

func validateCommand() *cli.Command {
	return projectCommand(&cli.Command{
		Name:  "validate",
		Usage: "check nodes.yaml and a project's specs, and print the plan; writes nothing",
	}, "dispatch validate <project>", func(c *cli.Context, e *env, name string) error {
		// As start: the plan of 10,000 tasks on 20 nodes (each row with
		// its nodes and tools) is garbage made at once.
		defer tightGC()()
		cfg, p, rows, transports, err := planProject(c.Context, e, name, nil, control.StartOptions{})
		if err != nil {
			return err
		}
		closeTransports(transports)
		for _, w := range workDirWarnings(c.Context, cfg) {
			fmt.Fprintln(e.errOut, "warning: "+w)
		}
		printPlan(e, cfg, p, rows)
		return nil
	})
}

// workDirWarnings names each local node whose work_dir lies inside a git
// working tree (a clone of dispatch, or of a project): its task workspaces
// would show up in that tree's `git status`, and a project named like one
// of its directories would write into its files. It is a warning, not an
// error: the tree may be one made for the purpose.
func workDirWarnings(ctx context.Context, cfg *nodes.Config) []string {
	var out []string
	for _, n := range cfg.Nodes {
		if !n.IsLocal() {
			continue
		}
		dir, err := nodes.ExpandHome(ctx, nodes.NewLocal(), n.WorkDir)
		if err != nil {
			continue
		}
		if tree := nodes.GitWorkTree(dir); tree != "" {
			out = append(out, fmt.Sprintf("node %s's work_dir %s lies inside the git working tree %s: task workspaces <work_dir>/<project>/ land in it "+
				"and show in its `git status`; set work_dir (%s, line %d) to a directory outside any checkout, e.g. the default %s",
				n.Name, n.WorkDir, tree, cfg.File, n.Line, nodes.DefaultWorkDir))
		}
	}
	return out
}

// planProject loads the config and the project and checks that every task can run:
// on some node its routes allow, with a tool whose executable that node has
// (each node's wrapper is asked; a node that cannot be reached is named in a
// note and does not fail the check).
//
// It returns the transports it asked the nodes over, connected: the
// caller owns them (start's controller goes on with them rather than
// connecting to every node again).
func planProject(ctx context.Context, e *env, name string, only []string, so control.StartOptions) (
	_ *nodes.Config, _ *spec.Project, _ []plan.Row, _ map[string]nodes.Transport, err error) {
	cfg, err := e.loadConfig()
	if err != nil {
		return nil, nil, nil, nil, err
	}
	for _, n := range only {
		if _, ok := cfg.Node(n); !ok {
			return nil, nil, nil, nil, usagef("--nodes "+strings.Join(nodeNames(cfg), ","), "--nodes: no node %q in %s", n, cfg.File)
		}
	}
	p, err := e.loadProject(name)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	rows, err := plan.Plan(cfg, p, only, so)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	if err := checkNotifyEnv(cfg, p); err != nil {
		return nil, nil, nil, nil, err
	}
	if src := p.Config.Source; src != nil {
		fmt.Fprintf(e.errOut, "note: the tasks start from %s of %s (commit %s); results come back as branches dispatch/%s/<ID>\n",
			src.Ref, src.Dir, src.Commit[:12], p.Name)
		for _, n := range src.Notes {
			fmt.Fprintln(e.errOut, "note: "+termtext.Clean(n))
		}
	}
	if sp := p.Config.Schedule; sp != nil {
		if sch, err := schedule.Parse(*sp, time.Local); err == nil {
			when := "no run is due any more"
			if first, ok := sch.First(time.Now()); ok {
				when = "next " + first.Local().Format(time.RFC3339)
			}
			fmt.Fprintf(e.errOut, "note: %s has a schedule (%s): its runs start on it while `dispatch serve` runs on this home\n", p.Name, when)
		}
	}
	need := plan.NeededExecutables(cfg, rows)
	transports, err := openTransports(cfg, only)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	defer func() {
		if err != nil {
			closeTransports(transports)
		}
	}()
	// What the ssh: values and ~/.ssh/config say that dispatch does not
	// honour, or that looks mistyped (an alias no Host names).
	for _, n := range cfg.Nodes {
		if s, ok := transports[n.Name].(*sshnode.SSH); ok {
			for _, w := range s.Endpoint().Warnings {
				fmt.Fprintf(e.errOut, "warning: node %q (%s): ssh: %s\n", n.Name, cfg.File, termtext.Clean(w))
			}
		}
	}
	timeout := max(30*time.Second, 3*cfg.Controller.SSHConnectTimeout)
	probes := plan.ProbeExecutables(ctx, cfg, transports, nodes.NewWrappers(), need, timeout)
	problems, notes := plan.CheckExecutables(cfg, rows, probes)
	for _, n := range notes {
		fmt.Fprintln(e.errOut, "note: "+termtext.Clean(n))
	}
	for _, w := range sharedWarnings(ctx, cfg, transports, probes, nodes.HomeID(e.home), timeout) {
		fmt.Fprintln(e.errOut, "warning: "+termtext.Clean(w))
	}
	if len(problems) > 0 {
		return nil, nil, nil, nil, &plan.Error{Problems: problems}
	}
	return cfg, p, rows, transports, nil
}

// closeTransports closes what openTransports opened.
func closeTransports(transports map[string]nodes.Transport) {
	for _, tr := range transports {
		_ = tr.Close()
	}
}

func nodeNames(cfg *nodes.Config) []string {
	var out []string
	for _, n := range cfg.Nodes {
		out = append(out, n.Name)
	}
	return out
}

func printPlan(e *env, cfg *nodes.Config, p *spec.Project, rows []plan.Row) {
	fmt.Fprintf(e.out, "%s: %d tasks, %d nodes (%s) — valid\n\n", e.styles.header.Render(p.Name), len(p.Tasks), len(cfg.Nodes), cfg.File)
	tw := tabwriter.NewWriter(e.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTYPE\tPRIO\tDEPENDS ON\tTIMEOUT\tNODES (TOOL)\tTITLE")
	for _, r := range rows {
		t := r.Task
		deps := strings.Join(t.DependsOn, ",")
		if r.Waits != "" {
			deps = r.Waits
		}
		if deps == "" {
			deps = "-"
		}
		timeout := domain.DefaultTimeout
		if t.Timeout > 0 {
			timeout = t.Timeout
		}
		var where []string
		for _, n := range r.Nodes {
			where = append(where, fmt.Sprintf("%s (%s)", n, r.Tools[n]))
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\n", t.ID, r.Type, t.Priority, deps, timeout, strings.Join(where, ", "), t.Title)
	}
	tw.Flush()
	for _, f := range p.Ignored {
		fmt.Fprintf(e.out, "\nnote: %s is not a task file (task files are named like S01-title.md)\n", f)
	}
}

// checkNotifyEnv checks that the variables the project's notify block (or
// nodes.yaml's) names are set here: the controller reads them when a
// message goes, and a missing one would only show as a failed
// notification at the end of the run.
func checkNotifyEnv(cfg *nodes.Config, p *spec.Project) error {
	n, where := p.Config.Notify, filepath.Join(p.Dir, spec.ConfigFile)
	if n == nil {
		n, where = cfg.Notify, cfg.File
	}
	if n == nil {
		return nil
	}
	for _, kv := range [][2]string{{"webhook", n.Webhook}, {"secret", n.Secret}} {
		key, v := kv[0], kv[1]
		if _, err := nodes.ExpandEnv(v, os.LookupEnv); err != nil {
			return &yamlval.Problem{File: where, Msg: fmt.Sprintf("notify %s: %v", key, err),
				Fix: "export it in this shell before `dispatch start` (a detached controller keeps the environment it started with), or remove it"}
		}
	}
	return nil
}

// sharedWarnings warns of each node whose work_dir holds the marker of
// another node (see nodes.SharedWith) that an earlier start or `nodes
// check` left; only the nodes the probe reached are asked, and nothing is
// written. It is a warning, not an error: each node reports and kills
// only its own attempts, so the nodes' tasks do not collide.
func sharedWarnings(ctx context.Context, cfg *nodes.Config, transports map[string]nodes.Transport, probes map[string]plan.Probe, homeID string, timeout time.Duration) []string {
	out := make([]string, len(cfg.Nodes))
	var wg sync.WaitGroup
	for i, n := range cfg.Nodes {
		tr, ok := transports[n.Name]
		if pr, probed := probes[n.Name]; !ok || !probed || pr.Err != "" {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			wd, err := nodes.ExpandHome(ctx, tr, n.WorkDir)
			if err != nil {
				return
			}
			if others := sharedWorkDir(ctx, cfg, n, tr, wd, homeID); len(others) > 0 {
				out[i] = nodes.SharedWarning(n.Name, wd, cfg.File, n.Line, homeID, others)
			}
		}()
	}
	wg.Wait()
	return slices.DeleteFunc(out, func(w string) bool { return w == "" })
}
