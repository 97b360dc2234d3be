package controller

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/dispatch-tool/dispatch/control"
	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/home"
	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/plan"
	"github.com/dispatch-tool/dispatch/readmodel"
	"github.com/dispatch-tool/dispatch/spec"
	"github.com/dispatch-tool/dispatch/store"
)

// Serve listens on the home's control socket and hands each request to the
// control loop (Run), which alone writes the database. The returned
// function stops listening, ends the connections still open and waits for
// their handlers, then removes the socket.
func (c *Controller) Serve(ctx context.Context) (func(), error) {
	c.requests = make(chan control.Call)
	if c.ended == nil {
		c.ended = make(chan struct{})
	}
	return control.Serve(ctx, c.opts.Home, c.log, c.requests, c.ended)
}

// Do carries out an operator request; the control loop calls it between
// ticks, and a command that took the lock itself calls it directly.
func (c *Controller) Do(ctx context.Context, req control.Request) control.Reply {
	var msg string
	var err error
	switch req.Op {
	case "start":
		// A start handed over follows nodes.yaml as it is now.
		var diff nodes.ConfigDiff
		if diff, err = c.ReloadNodes(ctx); err != nil {
			err = &control.OpError{Msg: fmt.Sprintf("nodes.yaml not reloaded (the running controller keeps the nodes it had), so %s was not started: %v", req.Project, err)}
			c.log.Error("nodes.yaml not reloaded; the controller keeps the nodes it had", "err", err)
			break
		}
		if !diff.Empty() {
			c.log.Warn("nodes.yaml reloaded: new launches follow it", "changes", diff.String())
		}
		msg, err = c.startProject(ctx, req.Project, req.Start)
		if err == nil && !diff.Empty() {
			msg = "nodes.yaml reloaded: " + diff.String() + "\n" + msg
		}
	case "retry":
		msg, err = c.Retry(ctx, req.Project, req.Tasks, req.Downstream)
	case "cancel":
		msg, err = c.Cancel(ctx, req.Project, req.Tasks)
	case "stop":
		msg, err = c.Stop(ctx, req.Project, req.Kill)
	case "enable", "disable":
		if c.opts.SetSchedule == nil {
			err = &control.OpError{Msg: "this controller does not handle schedules"}
			break
		}
		msg, err = c.opts.SetSchedule(ctx, req.Project, req.Op == "enable", c.now())
	case "ping":
		// Who answers: `dispatch schedule` says whether a daemon serves.
		msg = "controller"
		if c.opts.Between != nil {
			msg = "daemon"
		}
	case "shutdown":
		if c.opts.Between == nil {
			err = &control.OpError{Msg: "this controller is not a dispatch serve daemon: it ends by itself when its projects are finished (dispatch stop <project> stops one)"}
			break
		}
		c.shutdown = true
		msg = fmt.Sprintf("dispatch serve (pid %d) stops; running tasks go on and are collected by the next controller", os.Getpid())
	default:
		err = &control.OpError{Msg: fmt.Sprintf("unknown request %q", req.Op)}
	}
	if err != nil {
		var oe *control.OpError
		usage := errors.As(err, &oe)
		return control.Reply{Error: err.Error(), Usage: usage, NotFound: usage && oe.NotFound}
	}
	if req.Via != "" {
		c.recordAction(ctx, req, msg)
	}
	if req.Op == "start" || req.Op == "retry" {
		if c.handed == nil {
			c.handed = map[string]bool{}
		}
		c.handed[req.Project] = true
	}
	return control.Reply{Message: msg}
}

// recordAction records a request that came from the dashboard or the
// API, and where from, beside the events of what it changed. A failure
// is logged: the change itself is made.
func (c *Controller) recordAction(ctx context.Context, req control.Request, msg string) {
	ev := store.Event{Project: req.Project, Kind: control.ActionEvent, Message: control.ActionMessage(req, msg)}
	if err := c.st.Update(ctx, func(tx *store.Tx) error { return tx.Event(ctx, ev) }); err != nil {
		c.log.Error("the action's event not recorded", "op", req.Op, "project", req.Project, "via", req.Via, "err", err)
	}
}

// startProject loads a project's specs and serves it (a `dispatch start`
// handed to this controller).
func (c *Controller) startProject(ctx context.Context, name string, so control.StartOptions) (string, error) {
	p, err := spec.Load(home.SpecsDir(c.opts.Home), name)
	if err != nil {
		return "", &control.OpError{Msg: err.Error()}
	}
	if _, err := plan.Plan(c.config(), p, c.opts.Nodes, so); err != nil {
		return "", &control.OpError{Msg: err.Error()}
	}
	res, err := plan.AddProject(ctx, c.st, c.config(), c.opts.Home, p, so)
	if err != nil {
		return "", err
	}
	if res.AllReused {
		c.NoticeRunFinished(ctx, name)
		return strings.TrimSuffix(res.RunSummary(name), "\n"), nil
	}
	msg := fmt.Sprintf("%s handed to the running controller (pid %d)", name, os.Getpid())
	switch sum := res.RunSummary(name); {
	case sum != "":
		// A new run: what it runs is the one thing to say (its tasks
		// are not "new", they run again).
		msg += ": " + strings.TrimSuffix(strings.TrimPrefix(sum, name+" "), "\n")
	case res.Added > 0:
		msg += fmt.Sprintf(": %d new task(s)", res.Added)
	}
	return msg, nil
}

func (c *Controller) projectTasks(ctx context.Context, project string) (domain.Project, map[string]domain.Task, error) {
	p, err := c.st.Project(ctx, project)
	if errors.Is(err, store.ErrNotFound) {
		return p, nil, &control.OpError{Msg: fmt.Sprintf("project %q has not been started on this home", project), NotFound: true}
	}
	if err != nil {
		return p, nil, err
	}
	tasks, err := c.st.Tasks(ctx, project)
	if err != nil {
		return p, nil, err
	}
	byID := map[string]domain.Task{}
	for _, t := range tasks {
		byID[t.ID] = t
	}
	return p, byID, nil
}

func unknownTask(project, id string, byID map[string]domain.Task) error {
	var ids []string
	for k := range byID {
		ids = append(ids, k)
	}
	sort.Strings(ids)
	return &control.OpError{Msg: fmt.Sprintf("project %s has no task %q (its tasks: %s)", project, id, strings.Join(ids, ", ")), NotFound: true}
}

// Retry reruns finished, failed, blocked or canceled tasks: each gets a new
// attempt with its retries reset and, for an author task, the current
// content of its spec file. Retrying an author task after the integration
// phase started makes the phase start over; a phase task can be retried
// when it is the latest one.
//
// With downstream, every task after them (depending on them, directly or
// not) runs again too, but those already waiting to run.
func (c *Controller) Retry(ctx context.Context, project string, ids []string, downstream bool) (string, error) {
	if len(ids) == 0 {
		return "", &control.OpError{Msg: "name the tasks to retry"}
	}
	_, byID, err := c.projectTasks(ctx, project)
	if err != nil {
		return "", err
	}
	var notes []string
	if downstream {
		var note string
		if ids, note, err = withDownstream(project, byID, ids); err != nil {
			return "", err
		} else if note != "" {
			notes = append(notes, note)
		}
	}
	phaseIDs, authorRetried, err := checkRetry(project, ids, byID)
	if err != nil {
		return "", err
	}
	// New snapshots for author tasks whose spec changed.
	fresh := map[string]*spec.Task{}
	sp, err := spec.Load(home.SpecsDir(c.opts.Home), project)
	if err != nil {
		// Retrying with the old snapshots would silently ignore the edit
		// the operator is retrying for.
		return "", &control.OpError{Msg: fmt.Sprintf("retry %s: the specs do not load, so the edited ones cannot be taken: %v\n  fix: correct them (dispatch validate %s), then retry", project, err, project)}
	}
	// A broadcast's tasks are made as at start; should the nodes have
	// changed since, the tasks not made again keep their snapshots.
	_ = plan.Expand(c.config(), sp, c.opts.Nodes)
	for _, t := range sp.Tasks {
		fresh[t.ID] = t
	}
	err = c.st.Update(ctx, func(tx *store.Tx) error {
		phase := domain.PhaseOf(ids[0])
		if authorRetried {
			phase = domain.PhaseImplementation
			if len(phaseIDs) > 0 {
				if err := tx.DeleteTasks(ctx, project, phaseIDs, "the phase starts over"); err != nil {
					return err
				}
				notes = append(notes, "the integration phase starts over")
			}
		}
		for _, id := range ids {
			if authorRetried && slices.Contains(phaseIDs, id) {
				continue // deleted above; the phase recreates it
			}
			t := byID[id]
			set := store.TaskPatch{RetriesUsed: new(0), RateLimitRetries: new(0), LostRetries: new(0), Preemptions: new(0), NotBefore: new(time.Time{})}
			if f := fresh[id]; f != nil && f.Hash != t.SpecHash && !domain.IsPhaseID(id) {
				snap, err := sp.Snapshot(f)
				if err != nil {
					return &control.OpError{Msg: fmt.Sprintf("retry %s: %v", project, err)}
				}
				set.Snapshot, set.SpecHash = new(snap), new(f.Hash)
				notes = append(notes, id+" takes its changed spec")
			}
			if _, _, err := tx.Transition(ctx, store.Change{Project: project, Task: id, From: t.Status, To: domain.Pending,
				Kind: "retry", Message: "retried by the operator", Set: set}); err != nil {
				return err
			}
		}
		return tx.SetProject(ctx, project, store.ProjectPatch{State: new(domain.ProjectActive), Phase: new(phase), Result: new(""), FinishedAt: new(time.Time{}), Problem: new("")}, "")
	})
	if err != nil {
		return "", err
	}
	msg := fmt.Sprintf("%s: %s will run again", project, strings.Join(ids, ", "))
	if len(notes) > 0 {
		msg += " (" + strings.Join(notes, "; ") + ")"
	}
	return msg, nil
}

// checkRetry checks that each of ids may be retried (known, not running or
// waiting, a phase task only the latest) and returns the project's phase
// tasks, sorted, and whether an author task is among ids.
func checkRetry(project string, ids []string, byID map[string]domain.Task) (phaseIDs []string, authorRetried bool, err error) {
	var latest domain.Task
	for _, t := range byID {
		if domain.IsPhaseID(t.ID) {
			phaseIDs = append(phaseIDs, t.ID)
			if latest.ID == "" || t.CreatedAt.After(latest.CreatedAt) {
				latest = t
			}
		}
	}
	sort.Strings(phaseIDs)
	for _, id := range ids {
		t, ok := byID[id]
		if !ok {
			return nil, false, unknownTask(project, id, byID)
		}
		switch t.Status {
		case domain.Claimed, domain.Running:
			return nil, false, &control.OpError{Msg: fmt.Sprintf("%s/%s is running (attempt %d on %s): cancel it first", project, id, t.Attempt, t.Node)}
		case domain.Pending:
			return nil, false, &control.OpError{Msg: fmt.Sprintf("%s/%s is already waiting to run", project, id)}
		}
		if domain.IsPhaseID(id) {
			if id != latest.ID {
				return nil, false, &control.OpError{Msg: fmt.Sprintf("%s is not the latest phase task (%s): retry %s, or an author task to run the whole phase again", id, latest.ID, latest.ID)}
			}
		} else {
			authorRetried = true
		}
	}
	return phaseIDs, authorRetried, nil
}

// Cancel cancels tasks: waiting ones at once, running ones after killing
// their attempt on its node. A node that cannot be reached has the attempt
// killed when it answers again (it is then stale).
func (c *Controller) Cancel(ctx context.Context, project string, ids []string) (string, error) {
	if len(ids) == 0 {
		return "", &control.OpError{Msg: "name the tasks to cancel"}
	}
	_, byID, err := c.projectTasks(ctx, project)
	if err != nil {
		return "", err
	}
	for _, id := range ids {
		t, ok := byID[id]
		if !ok {
			return "", unknownTask(project, id, byID)
		}
		if t.Status == domain.Completed || t.Status == domain.Failed || t.Status == domain.Canceled {
			return "", &control.OpError{Msg: fmt.Sprintf("%s/%s is already %s", project, id, t.Status)}
		}
	}
	var running []domain.Task
	err = c.st.Update(ctx, func(tx *store.Tx) error {
		for _, id := range ids {
			t := byID[id]
			if t.Status == domain.Claimed || t.Status == domain.Running {
				running = append(running, t)
				if err := tx.SetAttempt(ctx, project, id, t.Attempt, store.AttemptPatch{Status: new(domain.Killed), ErrorClass: new(classKilled),
					Error: new("canceled by the operator"), CompletedAt: new(tx.Now())}); err != nil {
					return err
				}
			}
			if _, _, err := tx.Transition(ctx, store.Change{Project: project, Task: id, From: t.Status, To: domain.Canceled,
				Kind: "cancel", Message: "canceled by the operator", Set: store.TaskPatch{CompletedAt: new(tx.Now())}}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	killed, notKilled := c.killAttempts(ctx, running)
	msg := fmt.Sprintf("%s: canceled %s", project, strings.Join(ids, ", "))
	if killed > 0 {
		msg += fmt.Sprintf("; killed %d running attempt(s)", killed)
	}
	for _, why := range notKilled {
		msg += "; " + why
	}
	if len(notKilled) > 0 {
		msg += "; what was not killed is killed when its node answers"
	}
	return msg, nil
}

// killAttempts kills running attempts on their nodes. It returns how many
// it killed, and a line for each one it did not, saying why.
func (c *Controller) killAttempts(ctx context.Context, tasks []domain.Task) (killed int, notKilled []string) {
	var stale []staleAttempt
	for _, t := range tasks {
		what := fmt.Sprintf("attempt %d of %s/%s on %s not killed", t.Attempt, t.Project, t.ID, t.Node)
		n := c.nodes[t.Node]
		if n == nil {
			notKilled = append(notKilled, what+": this controller does not serve its node")
			continue
		}
		ictx, cancel := context.WithTimeout(ctx, c.callTimeout())
		inst, err := c.ensureWrapper(ictx, n)
		cancel()
		if err != nil {
			notKilled = append(notKilled, fmt.Sprintf("%s: %v", what, err))
			continue
		}
		stale = append(stale, staleAttempt{node: t.Node, project: t.Project, task: t.ID, attempt: t.Attempt,
			dir: taskDir(inst, t.Project, t.ID)})
	}
	failed := c.killStale(ctx, stale)
	for _, sa := range stale {
		if why, ok := failed[sa]; ok {
			notKilled = append(notKilled, fmt.Sprintf("attempt %d of %s/%s on %s not killed: %s", sa.attempt, sa.project, sa.task, sa.node, why))
			continue
		}
		killed++
	}
	return killed, notKilled
}

// Stop stops scheduling a project: nothing new starts; running tasks go on
// unless kill, which cancels them. `dispatch start` resumes it; canceled
// tasks run again only when retried.
func (c *Controller) Stop(ctx context.Context, project string, kill bool) (string, error) {
	p, byID, err := c.projectTasks(ctx, project)
	if err != nil {
		return "", err
	}
	// Stopping is idempotent, like `systemctl stop`: a project that has
	// finished or is stopped already is where the operator wants it.
	if p.State == domain.ProjectDone {
		return fmt.Sprintf("%s has already finished (%s); nothing to stop", project, p.Result), nil
	}
	var running []string
	for _, t := range byID {
		if t.Status == domain.Claimed || t.Status == domain.Running {
			running = append(running, t.ID)
		}
	}
	sort.Strings(running)
	msg := fmt.Sprintf("%s stopped: nothing new starts", project)
	if p.State == domain.ProjectStopped {
		msg = fmt.Sprintf("%s was already stopped: nothing new starts", project)
	} else if err := c.st.Update(ctx, func(tx *store.Tx) error {
		return tx.SetProject(ctx, project, store.ProjectPatch{State: new(domain.ProjectStopped)}, "stopped by the operator")
	}); err != nil {
		return "", err
	}
	switch {
	case kill && len(running) > 0:
		m, err := c.Cancel(ctx, project, running)
		if err != nil {
			return "", err
		}
		msg += "; " + m
	case len(running) > 0:
		msg += fmt.Sprintf("; %d running task(s) go on (%s)", len(running), strings.Join(running, ", "))
	}
	if len(running) > 0 {
		// The canceled tasks are not resumed by start: say what runs them.
		states, _, err := c.st.States(ctx, project)
		if err != nil {
			return "", err
		}
		msg += "; " + readmodel.StoppedNext(project, states)
	}
	return msg, nil
}
