package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/dispatch-tool/dispatch/control"
	"github.com/dispatch-tool/dispatch/controller"
	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/internal/termtext"
	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/nodes/sshnode"
	"github.com/dispatch-tool/dispatch/readmodel"
)

// refreshViews asks each node the views' tasks ran on, once and all at the
// same time, for its attempts, and adds what they say to each view
// (status --refresh). It takes no lock and writes nothing: the database
// stays the last controller's record, and the next controller collects.
func refreshViews(ctx context.Context, cfg *nodes.Config, views []*readmodel.StatusView) error {
	if cfg == nil {
		return usagef("dispatch status <project> --refresh", "--refresh asks the nodes, so it needs nodes.yaml to load (dispatch validate says why it does not)")
	}
	env, err := sshnode.DefaultEnv()
	if err != nil {
		return err
	}
	var names []string
	for _, v := range views {
		for _, t := range v.Tasks {
			if _, ok := cfg.Node(t.Node); ok && !slices.Contains(names, t.Node) {
				names = append(names, t.Node)
			}
		}
	}
	// One wrapper provider for every node: it builds (or unpacks) each
	// platform's wrapper once, not once per node.
	w := nodes.NewWrappers()
	answers := make([]readmodel.NodeAnswer, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, _ := cfg.Node(name)
			answers[i] = askNode(ctx, cfg, n, env, w)
		}()
	}
	wg.Wait()
	asked := time.Now()
	for _, v := range views {
		v.Refresh = readmodel.Refresh(v, answers, asked)
	}
	return nil
}

// controllerOf is whether a controller runs for the home (or holds it,
// frozen) and when it last ticked, for the views.
func controllerOf(home string) *readmodel.ControllerView {
	f := control.Find(home)
	if f.Frozen {
		return readmodel.ControllerFrozen(home, f.PID)
	}
	return readmodel.ControllerOf(home, f.Running)
}

// askNode is one node's answer: every attempt its wrapper holds.
func askNode(ctx context.Context, cfg *nodes.Config, n nodes.Node, env sshnode.Env, w *nodes.Wrappers) readmodel.NodeAnswer {
	a := readmodel.NodeAnswer{Node: n.Name}
	ctx, cancel := context.WithTimeout(ctx, max(cfg.Controller.SSHConnectTimeout*3, 30*time.Second))
	defer cancel()
	tr, err := sshnode.Open(cfg, n, env)
	if err != nil {
		a.Err = nodes.CauseFirst(err)
		return a
	}
	defer tr.Close()
	inst, err := nodes.EnsureWrapper(ctx, tr, n.WorkDir, w)
	if err != nil {
		a.Err = nodes.CauseFirst(err)
		return a
	}
	st, err := controller.NodeFacts(ctx, tr, inst)
	if err != nil {
		a.Err = nodes.CauseFirst(err)
		return a
	}
	for _, ts := range st.Tasks {
		if ts.Status == nil {
			continue
		}
		a.Attempts = append(a.Attempts, readmodel.NodeAttempt{Project: ts.Project, Task: ts.Task, Attempt: ts.Status.Attempt,
			Status: ts.Status.Status, Alive: ts.Alive, ExitCode: ts.Status.ExitCode, CompletedAt: ts.Status.CompletedAt})
	}
	return a
}

// printRefresh is the text of a view's refresh: the live tasks and those
// whose node says otherwise than the database.
func printRefresh(w io.Writer, s styles, v *readmodel.StatusView) {
	r := v.Refresh
	if r == nil {
		return
	}
	asked := "now"
	if t, err := time.Parse(time.RFC3339Nano, r.AskedAt); err == nil {
		asked = t.Local().Format("15:04:05")
	}
	fmt.Fprintf(w, "\nasked the nodes at %s (nothing recorded; the next controller collects it):\n", asked)
	for _, n := range r.Nodes {
		if n.Error != "" {
			fmt.Fprintln(w, s.warn.Render(fmt.Sprintf("  %s: could not ask: %s", n.Name, termtext.Clean(firstLine(n.Error)))))
		}
	}
	tab := &table{header: []string{"ID", "DATABASE", "NODE", "ATTEMPT", "ON THE NODE"}}
	differ := 0
	for _, t := range r.Tasks {
		live := t.Database == domain.Running || t.Database == domain.Claimed
		if !live && !t.Differs {
			continue
		}
		on := t.OnNode
		if t.EndedAt != "" && t.OnNode != "running" {
			if at, err := time.Parse(time.RFC3339Nano, t.EndedAt); err == nil {
				on += " at " + at.Local().Format("15:04:05")
			}
		}
		if t.OnNode == "completed" || t.OnNode == "failed" {
			on += fmt.Sprintf(" (exit %d)", t.ExitCode)
		}
		if t.Differs {
			differ++
		}
		tab.add([]string{t.ID, v.Controller.LiveWord(string(t.Database), time.Now()), t.Node, fmt.Sprint(t.Attempt), on}, nil)
	}
	if len(tab.rows) == 0 {
		fmt.Fprintln(w, "  no task runs, and the nodes agree with the database")
		return
	}
	tab.write(w)
	if differ > 0 {
		fmt.Fprintf(w, "%d task(s) ended on their node since the database last heard; dispatch start %s (or dispatch serve) collects them\n", differ, v.Project)
	}
}
