package controller

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/policy"
)

// A running controller re-reads nodes.yaml for each start handed to it
// and on SIGHUP (Options.Reload, Options.Hangup). A file that does not
// load, or names a node that cannot be opened, is refused and the old one
// stays. A valid one takes effect for new launches; an attempt running
// keeps its node: a node removed (or renamed), or reached anew (ssh,
// work_dir), keeps its old connection, and takes no new task, until its
// attempts are over and collected (it drains); then it is closed, or
// opened anew.

// nodeStep is what a reload does to one node.
type nodeStep string

const (
	stepKeep   nodeStep = "keep"   // unchanged
	stepUpdate nodeStep = "update" // new settings over the same connection
	stepOpen   nodeStep = "open"   // a node new to this controller
	stepReopen nodeStep = "reopen" // reached anew, nothing left on it: a new connection
	stepDrain  nodeStep = "drain"  // removed or reached anew with work left: the old connection, no new task
	stepClose  nodeStep = "close"  // removed, nothing left on it
)

// nodeDecision is the step decided for one node, and for a drain, why.
type nodeDecision struct {
	name string
	step nodeStep
	why  string
}

// decideReload decides, without I/O, what becomes of each node when next
// (the nodes of nodes.yaml this controller may use, in file order)
// replaces the nodes it holds (current, as each was read), given the
// attempts still to reach on each node (work).
func decideReload(current map[string]nodes.Node, next []nodes.Node, work map[string]int) []nodeDecision {
	var out []nodeDecision
	inNext := map[string]bool{}
	for _, n := range next {
		inNext[n.Name] = true
		cur, held := current[n.Name]
		if !held {
			out = append(out, nodeDecision{name: n.Name, step: stepOpen})
			continue
		}
		ch := nodes.NodeDiff(cur, n)
		switch {
		case len(ch.Fields) == 0:
			out = append(out, nodeDecision{name: n.Name, step: stepKeep})
		case !ch.Reach:
			out = append(out, nodeDecision{name: n.Name, step: stepUpdate})
		case work[n.Name] > 0:
			out = append(out, nodeDecision{name: n.Name, step: stepDrain,
				why: fmt.Sprintf("its %s changed in nodes.yaml: it takes new tasks once its %d attempt(s) under the old settings are over", strings.Join(ch.Fields, ", "), work[n.Name])})
		default:
			out = append(out, nodeDecision{name: n.Name, step: stepReopen})
		}
	}
	for _, name := range slices.Sorted(maps.Keys(current)) {
		switch {
		case inNext[name]:
		case work[name] > 0:
			out = append(out, nodeDecision{name: name, step: stepDrain,
				why: fmt.Sprintf("removed from nodes.yaml: kept for its %d attempt(s) until they are over", work[name])})
		default:
			out = append(out, nodeDecision{name: name, step: stepClose})
		}
	}
	return out
}

// usableNodes are the nodes of cfg this controller may use (--nodes).
func (c *Controller) usableNodes(cfg *nodes.Config) []nodes.Node {
	var out []nodes.Node
	for _, n := range cfg.Nodes {
		if len(c.opts.Nodes) == 0 || slices.Contains(c.opts.Nodes, n.Name) {
			out = append(out, n)
		}
	}
	return out
}

// ReloadNodes re-reads nodes.yaml (Options.Reload) and, when it is valid,
// makes it the controller's for new launches; it returns what changed.
// When it is not, nothing changes and the error says why. It runs in the
// control loop's goroutine.
func (c *Controller) ReloadNodes(ctx context.Context) (nodes.ConfigDiff, error) {
	if c.opts.Reload == nil {
		return nodes.ConfigDiff{}, nil
	}
	next, err := c.opts.Reload()
	if err != nil {
		return nodes.ConfigDiff{}, err
	}
	diff := nodes.Diff(c.cfg, next)
	if err := c.switchNodes(ctx, next); err != nil {
		return nodes.ConfigDiff{}, err
	}
	return diff, nil
}

// reloadAndLog is ReloadNodes for SIGHUP: the log says what happened.
func (c *Controller) reloadAndLog(ctx context.Context) {
	diff, err := c.ReloadNodes(ctx)
	switch {
	case err != nil:
		c.log.Error("nodes.yaml not reloaded; the controller keeps the nodes it had", "err", err)
	case diff.Empty():
		c.log.Info("nodes.yaml re-read: no change")
	default:
		c.log.Warn("nodes.yaml reloaded: new launches follow it", "changes", diff.String())
	}
}

// settleDrains finishes the drains whose nodes have nothing left to reach.
func (c *Controller) settleDrains(ctx context.Context) {
	if len(c.draining) == 0 {
		return
	}
	if err := c.switchNodes(ctx, c.cfg); err != nil {
		c.log.Warn("nodes kept for their attempts not settled; trying again at the next tick", "err", err)
	}
}

// switchNodes makes next the controller's nodes.yaml: it decides each
// node's step, opens the connections it needs (a node that cannot be
// opened refuses the whole file), then carries the steps out.
func (c *Controller) switchNodes(ctx context.Context, next *nodes.Config) error {
	work, err := c.st.NodeWork(ctx)
	if err != nil {
		return err
	}
	current := map[string]nodes.Node{}
	for name, n := range c.nodes {
		current[name] = n.cfg
	}
	decisions := decideReload(current, c.usableNodes(next), work)
	opened := map[string]nodes.Transport{}
	var openErr error
	for _, d := range decisions {
		if d.step != stepOpen && d.step != stepReopen && !(d.step == stepDrain && slices.ContainsFunc(next.Nodes, func(n nodes.Node) bool { return n.Name == d.name })) {
			continue
		}
		n, _ := next.Node(d.name)
		tr, err := c.open(next, n)
		if err != nil {
			openErr = errors.Join(openErr, err)
			continue
		}
		if d.step == stepDrain {
			_ = tr.Close() // checked now, opened when the drain is over
			continue
		}
		opened[d.name] = tr
	}
	if openErr != nil {
		for _, tr := range opened {
			_ = tr.Close()
		}
		return openErr
	}
	draining := map[string]string{}
	for _, d := range decisions {
		n, _ := next.Node(d.name)
		switch d.step {
		case stepUpdate:
			c.nodes[d.name] = &nodeRuntime{cfg: n, nodeConn: c.nodes[d.name].nodeConn, exec: c.newExecutor(n, c.nodes[d.name].nodeConn)}
		case stepReopen, stepClose:
			c.retire(c.nodes[d.name])
			delete(c.nodes, d.name)
		case stepDrain:
			draining[d.name] = d.why
			if _, was := c.draining[d.name]; !was {
				c.log.Warn("node kept for its attempts", keyNode, d.name, "reason", d.why)
			}
		}
		if d.step == stepOpen || d.step == stepReopen {
			rt := c.newNodeRuntime(n, opened[d.name])
			c.nodes[d.name] = rt
			if c.streams != nil {
				c.watchNode(c.streams, rt)
			}
		}
	}
	for name := range c.draining {
		if draining[name] == "" {
			c.log.Info("node no longer kept for old attempts", keyNode, name)
		}
	}
	c.draining = draining
	c.cfg = next
	c.live.Store(next)
	c.unusable = map[string]string{}
	for name, n := range c.nodes {
		why := draining[name]
		if why == "" {
			why = policy.ModeProblem(next, n.cfg, c.opts.LookupEnv)
		}
		if why != "" {
			c.unusable[name] = why
		}
	}
	return nil
}

// open opens a node's connection (Options.Open).
func (c *Controller) open(cfg *nodes.Config, n nodes.Node) (nodes.Transport, error) {
	if c.opts.Open == nil {
		return nil, fmt.Errorf("node %s: this controller cannot open new nodes", n.Name)
	}
	return c.opts.Open(cfg, n)
}

// retire stops n's stream and closes its connection once the goroutines
// still using it are done; Close waits for that.
func (c *Controller) retire(n *nodeRuntime) {
	if n == nil {
		return
	}
	if n.stopStream != nil {
		n.stopStream()
	}
	c.closing.Add(1)
	go func() {
		defer c.closing.Done()
		n.busy.Wait()
		n.exec.Close()
		if n.tr != nil {
			_ = n.tr.Close()
		}
	}()
}
