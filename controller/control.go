package controller

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/readmodel"
	"github.com/dispatch-tool/dispatch/spec"
	"github.com/dispatch-tool/dispatch/store"
)

// Request is an operator command for the controller of a home: the running
// one receives it over the control socket; when none runs, the command
// takes the lock and runs it in-process.
type Request struct {
	Op      string       `json:"op"` // start, retry, cancel, stop, enable, disable (a schedule), shutdown (dispatch serve), ping
	Project string       `json:"project"`
	Tasks   []string     `json:"tasks,omitempty"`
	Kill    bool         `json:"kill,omitempty"`
	Start   StartOptions `json:"start,omitempty"`
}

// Reply is the controller's answer to a Request.
type Reply struct {
	Message string `json:"message,omitempty"`
	Error   string `json:"error,omitempty"`
	// Usage is set when the request itself was wrong (an unknown task): the
	// command exits 2.
	Usage bool `json:"usage,omitempty"`
}

// OpError is a request that cannot be carried out as asked.
type OpError struct{ Msg string }

func (e *OpError) Error() string { return e.Msg }

// ErrNoController means no controller answers on the home's socket.
var ErrNoController = errors.New("no controller is running on this home")

// SocketPath is the control socket of a home: dispatch.sock in it, or, when
// that path is too long for a unix socket, a name derived from the home in
// SocketDir.
func SocketPath(home string) string {
	p := filepath.Join(home, "dispatch.sock")
	if len(p) < 100 {
		return p
	}
	sum := sha256.Sum256([]byte(home))
	return filepath.Join(SocketDir(), hex.EncodeToString(sum[:8])+".sock")
}

// SocketDir is where the control sockets of homes with long paths live:
// dispatch-<uid> in the temp directory, private to its user (0700). It is
// the same in every session of the user, unlike $XDG_RUNTIME_DIR, so that
// a controller started from one shell answers the commands of another.
func SocketDir() string {
	return filepath.Join(os.TempDir(), fmt.Sprintf("dispatch-%d", os.Getuid()))
}

// SocketError is a control socket, or its directory, that belongs to
// another user or is open to them: dispatch neither listens nor talks there.
type SocketError struct {
	Path string
	Msg  string
	Fix  string
}

// BadInput marks an unsafe control socket as the operator's to fix (exit 2).
func (e *SocketError) BadInput() bool { return true }

func (e *SocketError) Error() string {
	return fmt.Sprintf("control socket %s: %s\n  fix: %s", e.Path, e.Msg, e.Fix)
}

// trustedUID reports whether a process or file of uid may command, or
// answer for, the controllers of this user: the user itself or root.
func trustedUID(uid int) bool { return uid == os.Getuid() || uid == 0 }

// checkSocketDir checks the private directory of fallback sockets, creating
// it (0700) when create is set; it must be a directory of this user that no
// one else can write or list.
func checkSocketDir(dir string, create bool) error {
	fi, err := os.Lstat(dir)
	if errors.Is(err, fs.ErrNotExist) && create {
		if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("create the control socket directory: %w", err)
		}
		fi, err = os.Lstat(dir)
	}
	if err != nil {
		return err
	}
	fix := fmt.Sprintf("remove %s (or set TMPDIR to a directory of your own) and start again", dir)
	switch uid, ok := fileOwner(fi); {
	case !fi.IsDir():
		return &SocketError{Path: dir, Msg: "its directory is not a directory (a symbolic link?)", Fix: fix}
	case ok && uid != os.Getuid():
		return &SocketError{Path: dir, Msg: fmt.Sprintf("its directory belongs to uid %d, not to you (uid %d)", uid, os.Getuid()), Fix: fix}
	case fi.Mode().Perm()&0o077 != 0:
		return &SocketError{Path: dir, Msg: fmt.Sprintf("its directory is open to other users (mode %04o)", fi.Mode().Perm()), Fix: fix}
	}
	return nil
}

// checkSocketFile checks an existing socket file: it must be this user's
// (or root's). ok is false when there is none.
func checkSocketFile(path string) (ok bool, err error) {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if uid, known := fileOwner(fi); known && !trustedUID(uid) {
		return false, &SocketError{Path: path, Msg: fmt.Sprintf("it belongs to uid %d, not to you (uid %d): another user may be listening there", uid, os.Getuid()),
			Fix: "remove it if it is not your controller's, then start again"}
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return false, &SocketError{Path: path, Msg: "it is not a socket", Fix: "remove it, then start again"}
	}
	return true, nil
}

func fileOwner(fi fs.FileInfo) (int, bool) {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int(st.Uid), true
	}
	return 0, false
}

// dial connects to the controller of home after checking that the socket
// and its directory are this user's, and that the process answering is.
func dial(ctx context.Context, home string) (net.Conn, error) {
	path := SocketPath(home)
	if dir := filepath.Dir(path); dir != filepath.Clean(home) {
		if err := checkSocketDir(dir, false); errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%w (%v)", ErrNoController, err)
		} else if err != nil {
			return nil, err
		}
	}
	exists, err := checkSocketFile(path)
	if err != nil {
		return nil, err
	}
	if !exists {
		return nil, fmt.Errorf("%w (no socket %s)", ErrNoController, path)
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("%w (%v)", ErrNoController, err)
	}
	uid, err := peerUID(conn)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("control socket %s: check who answers: %w", path, err)
	}
	if !trustedUID(uid) {
		conn.Close()
		return nil, &SocketError{Path: path, Msg: fmt.Sprintf("the process answering is uid %d, not you (uid %d)", uid, os.Getuid()),
			Fix: "stop that process, remove the socket, then start again"}
	}
	return conn, nil
}

// Running reports whether a controller of this user answers on the home's
// socket.
func Running(home string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	conn, err := dial(ctx, home)
	if err != nil {
		return false
	}
	conn.Close()
	return true
}

// Send delivers a request to the running controller of home.
func Send(ctx context.Context, home string, req Request) (Reply, error) {
	conn, err := dial(ctx, home)
	if err != nil {
		return Reply{}, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(2 * time.Minute))
	if err := json.NewEncoder(conn).Encode(req); err != nil {
		return Reply{}, fmt.Errorf("send to the controller: %w", err)
	}
	var rep Reply
	if err := json.NewDecoder(bufio.NewReader(conn)).Decode(&rep); err != nil {
		return Reply{}, fmt.Errorf("read the controller's answer: %w", err)
	}
	return rep, nil
}

// request is a Request waiting for the control loop.
type request struct {
	req   Request
	reply chan Reply
}

// Serve listens on the home's control socket and hands each request to the
// control loop (Run), which alone writes the database. The returned
// function stops listening, ends the connections still open and waits for
// their handlers, then removes the socket.
func (c *Controller) Serve(ctx context.Context) (func(), error) {
	path := SocketPath(c.opts.Home)
	if dir := filepath.Dir(path); dir != filepath.Clean(c.opts.Home) {
		if err := checkSocketDir(dir, true); err != nil {
			return nil, err
		}
	}
	if exists, err := checkSocketFile(path); err != nil {
		return nil, err
	} else if exists {
		_ = os.Remove(path) // left by a killed controller; we hold the lock
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("control socket %s: %w", path, err)
	}
	// Until this chmod the umask decides; serveConn checks every peer anyway.
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, fmt.Errorf("control socket %s: %w", path, err)
	}
	c.requests = make(chan request)
	if c.ended == nil {
		c.ended = make(chan struct{})
	}
	ctx, cancel := context.WithCancel(ctx)
	var handlers sync.WaitGroup
	handlers.Add(1)
	go func() {
		defer handlers.Done()
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			handlers.Add(1)
			go func() {
				defer handlers.Done()
				c.serveConn(ctx, conn)
			}()
		}
	}()
	return func() {
		cancel()
		l.Close()
		handlers.Wait()
		os.Remove(path)
	}, nil
}

// serveConn answers one connection; it ends, closing conn, when ctx does.
func (c *Controller) serveConn(ctx context.Context, conn net.Conn) {
	defer conn.Close()
	// A peer that sends nothing holds no handler once serving stops.
	answered := make(chan struct{})
	var closer sync.WaitGroup
	closer.Add(1)
	go func() {
		defer closer.Done()
		select {
		case <-ctx.Done():
			conn.Close()
		case <-answered:
		}
	}()
	defer func() { close(answered); closer.Wait() }()
	_ = conn.SetDeadline(time.Now().Add(2 * time.Minute))
	// Only this user (or root) commands this controller.
	if uid, err := peerUID(conn); err != nil || !trustedUID(uid) {
		msg := fmt.Sprintf("refused: this controller takes requests from uid %d only", os.Getuid())
		if err != nil {
			msg = "refused: cannot tell who is asking: " + err.Error()
		}
		c.log.Warn("control socket: request refused", "peer_uid", uid, "error", err)
		_ = json.NewEncoder(conn).Encode(Reply{Error: msg})
		return
	}
	var req Request
	if err := json.NewDecoder(bufio.NewReader(conn)).Decode(&req); err != nil {
		_ = json.NewEncoder(conn).Encode(Reply{Error: "bad request: " + err.Error(), Usage: true})
		return
	}
	r := request{req: req, reply: make(chan Reply, 1)}
	ending := Reply{Error: "the controller is ending; try again once it has (dispatch start runs one)"}
	select {
	case c.requests <- r:
	case <-c.ended:
		_ = json.NewEncoder(conn).Encode(ending)
		return
	case <-ctx.Done():
		return
	}
	select {
	case rep := <-r.reply:
		_ = json.NewEncoder(conn).Encode(rep)
	case <-c.ended:
		// Run answers before it ends: an answer given is in r.reply.
		select {
		case rep := <-r.reply:
			_ = json.NewEncoder(conn).Encode(rep)
		default:
			_ = json.NewEncoder(conn).Encode(ending)
		}
	case <-ctx.Done():
	}
}

// Do carries out an operator request; the control loop calls it between
// ticks, and a command that took the lock itself calls it directly.
func (c *Controller) Do(ctx context.Context, req Request) Reply {
	var msg string
	var err error
	switch req.Op {
	case "start":
		// A start handed over follows nodes.yaml as it is now.
		var diff nodes.ConfigDiff
		if diff, err = c.ReloadNodes(ctx); err != nil {
			err = &OpError{Msg: fmt.Sprintf("nodes.yaml not reloaded (the running controller keeps the nodes it had), so %s was not started: %v", req.Project, err)}
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
		msg, err = c.Retry(ctx, req.Project, req.Tasks)
	case "cancel":
		msg, err = c.Cancel(ctx, req.Project, req.Tasks)
	case "stop":
		msg, err = c.Stop(ctx, req.Project, req.Kill)
	case "enable", "disable":
		msg, err = SetScheduleEnabled(ctx, c.st, filepath.Join(c.opts.Home, "specs"), req.Project, req.Op == "enable", c.now())
		c.nextSchedule = time.Time{} // look at it now
	case "ping":
		// Who answers: `dispatch schedule` says whether a daemon serves.
		msg = "controller"
		if c.opts.Daemon {
			msg = "daemon"
		}
	case "shutdown":
		if !c.opts.Daemon {
			err = &OpError{Msg: "this controller is not a dispatch serve daemon: it ends by itself when its projects are finished (dispatch stop <project> stops one)"}
			break
		}
		c.shutdown = true
		msg = fmt.Sprintf("dispatch serve (pid %d) stops; running tasks go on and are collected by the next controller", os.Getpid())
	default:
		err = &OpError{Msg: fmt.Sprintf("unknown request %q", req.Op)}
	}
	if err != nil {
		var oe *OpError
		return Reply{Error: err.Error(), Usage: errors.As(err, &oe)}
	}
	return Reply{Message: msg}
}

// startProject loads a project's specs and serves it (a `dispatch start`
// handed to this controller).
func (c *Controller) startProject(ctx context.Context, name string, so StartOptions) (string, error) {
	p, err := spec.Load(filepath.Join(c.opts.Home, "specs"), name)
	if err != nil {
		return "", &OpError{Msg: err.Error()}
	}
	if _, err := Plan(c.config(), p, c.opts.Nodes, so); err != nil {
		return "", &OpError{Msg: err.Error()}
	}
	res, err := AddProject(ctx, c.st, c.config(), c.opts.Home, p, so)
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

func (c *Controller) projectTasks(ctx context.Context, project string) (store.Project, map[string]store.Task, error) {
	p, err := c.st.Project(ctx, project)
	if errors.Is(err, store.ErrNotFound) {
		return p, nil, &OpError{Msg: fmt.Sprintf("project %q has not been started on this home", project)}
	}
	if err != nil {
		return p, nil, err
	}
	tasks, err := c.st.Tasks(ctx, project)
	if err != nil {
		return p, nil, err
	}
	byID := map[string]store.Task{}
	for _, t := range tasks {
		byID[t.ID] = t
	}
	return p, byID, nil
}

func unknownTask(project, id string, byID map[string]store.Task) error {
	var ids []string
	for k := range byID {
		ids = append(ids, k)
	}
	sort.Strings(ids)
	return &OpError{Msg: fmt.Sprintf("project %s has no task %q (its tasks: %s)", project, id, strings.Join(ids, ", "))}
}

// phaseOf is the phase a phase task belongs to.
func phaseOf(id string) string {
	switch {
	case id == store.IntegrationID:
		return store.PhaseIntegration
	case strings.HasPrefix(id, "V"):
		return store.PhaseVerification
	}
	return store.PhaseFix
}

// Retry reruns finished, failed, blocked or canceled tasks: each gets a new
// attempt with its retries reset and, for an author task, the current
// content of its spec file. Retrying an author task after the integration
// phase started makes the phase start over; a phase task can be retried
// when it is the latest one.
func (c *Controller) Retry(ctx context.Context, project string, ids []string) (string, error) {
	if len(ids) == 0 {
		return "", &OpError{Msg: "name the tasks to retry"}
	}
	_, byID, err := c.projectTasks(ctx, project)
	if err != nil {
		return "", err
	}
	var latest store.Task
	var phaseIDs []string
	for _, t := range byID {
		if store.IsPhaseID(t.ID) {
			phaseIDs = append(phaseIDs, t.ID)
			if latest.ID == "" || t.CreatedAt.After(latest.CreatedAt) {
				latest = t
			}
		}
	}
	sort.Strings(phaseIDs)
	authorRetried := false
	for _, id := range ids {
		t, ok := byID[id]
		if !ok {
			return "", unknownTask(project, id, byID)
		}
		switch t.Status {
		case store.Claimed, store.Running:
			return "", &OpError{Msg: fmt.Sprintf("%s/%s is running (attempt %d on %s): cancel it first", project, id, t.Attempt, t.Node)}
		case store.Pending:
			return "", &OpError{Msg: fmt.Sprintf("%s/%s is already waiting to run", project, id)}
		}
		if store.IsPhaseID(id) {
			if id != latest.ID {
				return "", &OpError{Msg: fmt.Sprintf("%s is not the latest phase task (%s): retry %s, or an author task to run the whole phase again", id, latest.ID, latest.ID)}
			}
		} else {
			authorRetried = true
		}
	}
	// New snapshots for author tasks whose spec changed.
	fresh := map[string]*spec.Task{}
	sp, err := spec.Load(filepath.Join(c.opts.Home, "specs"), project)
	if err != nil {
		// Retrying with the old snapshots would silently ignore the edit
		// the operator is retrying for.
		return "", &OpError{Msg: fmt.Sprintf("retry %s: the specs do not load, so the edited ones cannot be taken: %v\n  fix: correct them (dispatch validate %s), then retry", project, err, project)}
	}
	for _, t := range sp.Tasks {
		fresh[t.ID] = t
	}
	var notes []string
	err = c.st.Update(ctx, func(tx *store.Tx) error {
		phase := phaseOf(ids[0])
		if authorRetried {
			phase = store.PhaseImplementation
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
			set := store.TaskPatch{RetriesUsed: new(0), RateLimitRetries: new(0), LostRetries: new(0), NotBefore: new(time.Time{})}
			if f := fresh[id]; f != nil && f.Hash != t.SpecHash && !store.IsPhaseID(id) {
				set.Snapshot, set.SpecHash = new(f.Snapshot), new(f.Hash)
				notes = append(notes, id+" takes its changed spec")
			}
			if _, _, err := tx.Transition(ctx, store.Change{Project: project, Task: id, From: t.Status, To: store.Pending,
				Kind: "retry", Message: "retried by the operator", Set: set}); err != nil {
				return err
			}
		}
		return tx.SetProject(ctx, project, store.ProjectPatch{State: new(store.ProjectActive), Phase: new(phase), Result: new(""), FinishedAt: new(time.Time{}), Problem: new("")}, "")
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

// Cancel cancels tasks: waiting ones at once, running ones after killing
// their attempt on its node. A node that cannot be reached has the attempt
// killed when it answers again (it is then stale).
func (c *Controller) Cancel(ctx context.Context, project string, ids []string) (string, error) {
	if len(ids) == 0 {
		return "", &OpError{Msg: "name the tasks to cancel"}
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
		if t.Status == store.Completed || t.Status == store.Failed || t.Status == store.Canceled {
			return "", &OpError{Msg: fmt.Sprintf("%s/%s is already %s", project, id, t.Status)}
		}
	}
	var running []store.Task
	err = c.st.Update(ctx, func(tx *store.Tx) error {
		for _, id := range ids {
			t := byID[id]
			if t.Status == store.Claimed || t.Status == store.Running {
				running = append(running, t)
				if err := tx.SetRun(ctx, project, id, t.Attempt, store.RunPatch{Status: new(store.Killed), ErrorClass: new(store.Killed),
					Error: new("canceled by the operator"), CompletedAt: new(tx.Now())}); err != nil {
					return err
				}
			}
			if _, _, err := tx.Transition(ctx, store.Change{Project: project, Task: id, From: t.Status, To: store.Canceled,
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
func (c *Controller) killAttempts(ctx context.Context, tasks []store.Task) (killed int, notKilled []string) {
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
	if p.State == store.ProjectDone {
		return fmt.Sprintf("%s has already finished (%s); nothing to stop", project, p.Result), nil
	}
	var running []string
	for _, t := range byID {
		if t.Status == store.Claimed || t.Status == store.Running {
			running = append(running, t.ID)
		}
	}
	sort.Strings(running)
	msg := fmt.Sprintf("%s stopped: nothing new starts", project)
	if p.State == store.ProjectStopped {
		msg = fmt.Sprintf("%s was already stopped: nothing new starts", project)
	} else if err := c.st.Update(ctx, func(tx *store.Tx) error {
		return tx.SetProject(ctx, project, store.ProjectPatch{State: new(store.ProjectStopped)}, "stopped by the operator")
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
