package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dispatch-tool/dispatch/controller/executor"
	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/store"
	"github.com/dispatch-tool/dispatch/wire"
)

// nodeRuntime is what the controller keeps in memory about a node between
// ticks: the resolved work_dir and the installed wrapper.
type nodeRuntime struct {
	// cfg is the node as nodes.yaml says; a reload that changes neither
	// its name nor how it is reached makes a new nodeRuntime with the new
	// cfg and the same nodeConn, so that the goroutines still holding the
	// old one share its lanes and connection.
	cfg nodes.Node
	*nodeConn
}

// nodeConn is a node's connection and what goes on over it.
type nodeConn struct {
	tr nodes.Transport
	// exec starts, watches and kills the node's attempts over tr (see
	// exec.go); it holds the node's status conversation.
	exec executor.Executor
	// name is the node's: its wrapper is asked about that node's attempts
	// alone (--node), as the work_dir may hold another node's too.
	name string
	// stopStream ends the node's status stream loop (nil: none runs).
	// Only the control loop's goroutine uses it.
	stopStream context.CancelFunc

	// pulling and working are set while a status call, or a launch or
	// collection, is outstanding on the node; see onNodes. They are separate
	// so that a long collection never makes a healthy node miss its pull.
	pulling atomic.Bool
	working atomic.Bool
	// collecting is set while the node's finished attempts are being
	// collected: beside the tick's launches, never beside another
	// collection.
	collecting atomic.Bool

	// inst is the node's checked wrapper installation (absolute work_dir
	// and wrapper path), nil until checked and again once a call shows it
	// broken. It is replaced whole, never changed in place: the pull that
	// checks it runs beside launches, kills and collections on the same
	// node, and each of those loads it once and works with that value.
	inst atomic.Pointer[nodes.Installed]

	// streamUp is set while the node's status stream is open (see
	// stream.go).
	streamUp atomic.Bool
	// checked receives a value (without blocking) each time the wrapper
	// is found installed, so that the stream opens at once.
	checked chan struct{}

	// streamed holds what the node's stream told since the tick took it
	// last; see streamState.
	streamed streamState

	// listing is what the node's next status call needs of the earlier
	// ones: whether to list every task, and which to name.
	listing listState

	// busy counts the goroutines that use tr: the node's stream loop and
	// its workers (onNodes), which may outlive the tick that started them.
	// tr is closed only once it is zero.
	busy sync.WaitGroup
}

// streamState is what a node's status stream told between two ticks, and
// what its last full status call said, so that a tick can act on the
// stream's statuses without a status call of its own (a partial pull).
type streamState struct {
	mu sync.Mutex
	// tasks are the latest statuses the stream carried, by task key, with
	// when each came.
	tasks map[string]streamedTask
	// needFull is set when the stream may have missed something: it has
	// just (re)opened, or a frame named tasks without their statuses.
	needFull bool
	// last is the last full pull's reply (facts, version) and its time.
	last     *wire.NodeStatus
	lastRTT  time.Duration
	lastFull time.Time
	// resetAt is when a full pull was last asked for (the stream's hello:
	// what changed before its starting look was never streamed). Only a
	// pull begun after it clears needFull.
	resetAt time.Time
}

type streamedTask struct {
	ts wire.TaskStatus
	at time.Time
}

// add records a change frame's statuses.
func (s *streamState) add(f wire.Frame, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(f.Statuses) != len(f.Tasks) {
		s.needFull, s.resetAt = true, now
		return
	}
	if s.tasks == nil {
		s.tasks = map[string]streamedTask{}
	}
	for _, ts := range f.Statuses {
		if ts.Status != nil {
			ts.Status.Clamp()
		}
		s.tasks[taskKey(ts.Project, ts.Task)] = streamedTask{ts: ts, at: now}
	}
}

// reset asks for a full pull begun after at and forgets what the stream
// told.
func (s *streamState) reset(at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.needFull, s.tasks, s.resetAt = true, nil, at
}

// fullDone records a full pull that started at began: what the stream told
// before then is older than it and dropped. A pull begun before the last
// reset (a stream's hello that came while it was out) may have read the
// node before the stream's starting look: what ended between the two was
// in neither, and only a full pull begun after the hello finds it. Taking
// that pull for enough left such tasks running until the next poll (a
// 200-task batch took 30.4 s instead of 2).
func (s *streamState) fullDone(st *wire.NodeStatus, rtt time.Duration, began time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.needFull = began.Before(s.resetAt)
	s.last, s.lastRTT, s.lastFull = st, rtt, began
	for k, t := range s.tasks {
		if t.at.Before(began) {
			delete(s.tasks, k)
		}
	}
}

// partial takes the streamed statuses of the served projects as a pull,
// or returns nil when the node needs a full one: no full pull yet, one
// asked for, or the last older than every.
func (s *streamState) partial(served map[string]bool, every time.Duration, now time.Time) *pull {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.needFull || s.last == nil || every <= 0 || now.Sub(s.lastFull) >= every {
		return nil
	}
	st := &wire.NodeStatus{WrapperVersion: s.last.WrapperVersion, Time: s.last.Time, Facts: s.last.Facts}
	p := &pull{partial: true, status: st, rtt: s.lastRTT, tasks: map[string]*wire.TaskStatus{}}
	for k, t := range s.tasks {
		if served[t.ts.Project] {
			st.Tasks = append(st.Tasks, t.ts)
		}
		delete(s.tasks, k)
	}
	for i := range st.Tasks {
		t := &st.Tasks[i]
		p.tasks[taskKey(t.Project, t.Task)] = t
	}
	return p
}

// listState chooses between a node's full and live status calls (see
// fullListEvery).
type listState struct {
	mu sync.Mutex
	// calls counts the status calls since the last full one, that one
	// included; 0 asks for a full one next. lastFull is when that one
	// was asked for.
	calls    int
	lastFull time.Time
	// seen are the tasks ("project/ID") the last call found live (a
	// supervisor holding the lock, or a status saying running): a live
	// call names them, so that an attempt the node's index does not hold
	// (a stale one being killed) stays in sight once a full call found it.
	seen []string
	// held are the entries of the last reply that a live call may name
	// (every entry of a live reply, the live ones of a full reply), by
	// "project/ID", each with the wrapper's tag: a live call sends the
	// tags, and the node answers a task whose entry is unchanged with its
	// heartbeat alone (wire.NodeStatus.Same), so that a steady reply
	// carries what changed. Each points into the reply that carried it
	// (its Tasks, which nothing changes once done returns): a
	// wire.TaskStatus is over the 128 bytes a map keeps in place, so a
	// map of values allocated every entry of every call (1,000 a steady
	// tick of 1,000 running tasks, TestListStateDoneAllocs).
	held, spare map[string]*wire.TaskStatus
	// once is namedOnce's set.
	once map[string]struct{}
}

// next reports whether the next call may be a live one, and the tasks it
// names besides those the database has on the node. fresh asks for a
// full call.
func (l *listState) next(fresh bool, now time.Time) (live bool, seen []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if fresh || l.calls <= 0 || l.calls >= fullListEvery && now.Sub(l.lastFull) >= fullListGap {
		return false, nil
	}
	return true, slices.Clone(l.seen)
}

// tags returns, in the order of named, the tags of the held entries of
// the named tasks ("" for one not held), for a live call's request; nil
// when none is held.
func (l *listState) tags(named []string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.held) == 0 {
		return nil
	}
	out := make([]string, len(named))
	for i, k := range named {
		if ts := l.held[k]; ts != nil {
			out[i] = ts.Tag
		}
	}
	return out
}

// done records a call's reply and returns the key ("project/ID") of each
// of st.Tasks, in order. It first puts back into st.Tasks the held entry
// of every task the reply says is unchanged (st.Same), with the heartbeat
// the reply gives: what follows sees every task as before. A task said
// unchanged that is not held (a node answering what it was not asked) is
// left out, and the next call is a full one.
func (l *listState) done(st *wire.NodeStatus, live bool, at time.Time) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	whole := st.Same == nil || st.Same.Len() == len(st.Same.Tasks) && live
	full := len(st.Tasks) // the entries the reply carries whole
	// The keys of the entries put back are the reply's own strings, kept
	// in place in st.Same.Tasks (j <= i).
	var kept []string
	if st.Same != nil {
		kept = st.Same.Tasks[:0]
	}
	for i := range st.Same.Len() {
		ts, ok := l.held[st.Same.Tasks[i]]
		if !ok || !live {
			whole = false
			continue
		}
		e := *ts
		e.Heartbeat = st.Same.Heartbeats[i]
		st.Tasks = append(st.Tasks, e)
		kept = append(kept, st.Same.Tasks[i])
	}
	st.Same = nil
	keys := make([]string, len(st.Tasks))
	seen := l.seen[:0] // next hands out copies: its room is kept
	// The map of the call before last is filled again: its room is kept.
	held := l.spare
	if held == nil {
		held = make(map[string]*wire.TaskStatus, len(st.Tasks))
	}
	clear(held)
	for i := range st.Tasks {
		ts := &st.Tasks[i]
		if i >= full {
			keys[i] = kept[i-full] // held, so nameable
		} else {
			keys[i] = taskKey(ts.Project, ts.Task)
			// Names the wrapper would refuse (a forged reply) are not asked for.
			if !nameable(ts.Project) || !nameable(ts.Task) {
				continue
			}
		}
		alive := ts.Alive || ts.Status != nil && ts.Status.Status == wire.StatusRunning
		if alive {
			seen = append(seen, keys[i])
		}
		if ts.Tag != "" && (alive || live) {
			held[keys[i]] = ts
		}
	}
	l.seen, l.held, l.spare = seen, held, l.held
	switch {
	case !whole:
		l.calls = 0
	case live:
		l.calls++
	default:
		l.calls, l.lastFull = 1, at
	}
	return keys
}

// nameable reports whether name can be a directory name a status call
// names (what the wrapper's validName accepts).
func nameable(name string) bool {
	return name != "" && name != "." && name != ".." && !strings.ContainsAny(name, "/\x00")
}

// failed asks for a full call next: the node may have changed unseen.
func (l *listState) failed() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = 0
}

// setInstalled records n's checked installation and tells the stream.
func (n *nodeRuntime) setInstalled(inst *nodes.Installed) {
	n.inst.Store(inst)
	select {
	case n.checked <- struct{}{}:
	default:
	}
}

// installed returns the node's checked installation, or nil.
func (n *nodeRuntime) installed() *nodes.Installed { return n.inst.Load() }

// pull is the outcome of one node's status call in a tick.
type pull struct {
	node string
	err  error
	// skipped is set when the previous status call is still outstanding:
	// the node keeps the state it had.
	skipped bool
	status  *wire.NodeStatus
	rtt     time.Duration
	// began is when the status call went out (the stream's clock).
	began time.Time
	// same counts the entries the node said were unchanged (a live call's
	// wire.NodeStatus.Same), now among status.Tasks.
	same int
	// tasks indexes status.Tasks by project and task ID.
	tasks map[string]*wire.TaskStatus
	// partial is set when tasks are only those the node's stream reported
	// since the last tick, not every task of the node: a task missing
	// from it was not looked at (facts and version are the last full
	// pull's).
	partial bool
	// unlisted holds, by project, the projects whose tasks directory the
	// node could not list (wire.NodeStatus.Unlisted): a task of theirs
	// missing from tasks is unknown, neither gone nor ended.
	unlisted map[string]wire.Unlisted
	// silent is, for a failed pull, how long the node had said nothing
	// when the tick began (its transport's word, see nodes.Hearer): it
	// went offline that long ago, not when this call failed.
	silent time.Duration
}

// offlineFrom is when a node whose pull failed at now went silent.
func (p *pull) offlineFrom(now time.Time) time.Time {
	return now.Add(-p.silent)
}

func taskKey(project, id string) string { return project + "/" + id }

// onNodes runs fn for each named node in parallel (bounded by
// max_parallel_ssh) and waits for them up to wait. A node still busy with an
// earlier call (a hung node whose call has not timed out yet) is skipped, and
// a node that does not finish in time keeps running in the background, still
// marked busy: a hung node never stalls a tick. When it ends, it wakes the
// loop (wait > 0): no tick waited for what it did (a collection, a kill,
// a pull), and the next one might otherwise come at the next poll. It
// returns the nodes that finished.
func (c *Controller) onNodes(names []string, lane func(*nodeRuntime) *atomic.Bool, wait time.Duration, fn func(n *nodeRuntime)) map[string]bool {
	done := make(chan string, len(names))
	sem := make(chan struct{}, max(c.config().Controller.MaxParallelSSH, 1))
	// mu guards gaveUp, set once this call stopped waiting.
	var mu sync.Mutex
	gaveUp := false
	started := 0
	for _, name := range names {
		n := c.nodes[name]
		if n == nil || !lane(n).CompareAndSwap(false, true) {
			continue
		}
		started++
		n.busy.Add(1)
		go func() {
			defer n.busy.Done()
			defer func() {
				mu.Lock()
				defer mu.Unlock()
				if !gaveUp {
					done <- name
				} else if wait > 0 {
					c.signalWake()
				}
			}()
			defer lane(n).Store(false)
			sem <- struct{}{}
			defer func() { <-sem }()
			fn(n)
		}()
	}
	finished := make(map[string]bool, started)
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for len(finished) < started {
		select {
		case name := <-done:
			finished[name] = true
		case <-timer.C:
			mu.Lock()
			gaveUp = true
			mu.Unlock()
			for {
				select {
				case name := <-done:
					finished[name] = true
				default:
					return finished
				}
			}
		}
	}
	return finished
}

// nodeNames lists the nodes this controller serves.
func (c *Controller) nodeNames() []string {
	names := make([]string, 0, len(c.nodes))
	for name := range c.nodes {
		names = append(names, name)
	}
	return names
}

// pullAll calls `status` once on every node, in parallel. A node that fails
// or does not answer within twice ssh_connect_timeout is reported in its
// pull; the others go on.
func (c *Controller) pullAll(ctx context.Context, projects []string) map[string]*pull {
	var mu sync.Mutex
	got := make(map[string]*pull, len(c.nodes))
	wait := 2 * c.config().Controller.SSHConnectTimeout
	started := map[string]bool{}
	served := map[string]bool{}
	for _, p := range projects {
		served[p] = true
	}
	now := time.Now() // the stream's own clock, not the database's
	var full, gaveUp []string
	silence := map[string]time.Duration{}
	for _, name := range c.nodeNames() {
		n := c.nodes[name]
		// A node whose stream is open and whose last full pull is recent
		// is pulled from what its stream told: no status call.
		if n.streamUp.Load() && n.installed() != nil {
			if p := n.streamed.partial(served, c.fullPullEvery, now); p != nil {
				got[name] = p
				continue
			}
		}
		if h, ok := n.tr.(nodes.Hearer); ok {
			var given bool
			if silence[name], given = h.Silence(); given {
				// Its keepalives went unanswered: offline since its last
				// word, without waiting for a new connection to time out.
				// The call still goes out, and a node back answers the
				// next tick.
				got[name] = &pull{err: fmt.Errorf("no answer to SSH keepalives for %s (node frozen or cut off)", silence[name].Round(100*time.Millisecond))}
				gaveUp = append(gaveUp, name)
				continue
			}
		}
		started[name] = !n.pulling.Load()
		full = append(full, name)
	}
	var liveOn map[string][]string
	if len(full) > 0 {
		liveOn = c.liveOn.read(ctx, c.st, projects, c.log)
	}
	c.onNodes(gaveUp, pulling, 0, func(n *nodeRuntime) { c.pullNode(ctx, n, projects, nil) })
	gathered := false
	c.onNodes(full, pulling, wait, func(n *nodeRuntime) {
		p := c.pullNode(ctx, n, projects, liveOn)
		mu.Lock()
		defer mu.Unlock()
		if gathered {
			// This tick stopped waiting: no tick applies what the call
			// read, so it is not the full pull the stream's state asks
			// for (taken for one, it dropped what the stream told before
			// it began, unapplied, until the next full pull a poll
			// later). onNodes wakes the loop: a tick asks again now.
			return
		}
		if p.err == nil {
			n.streamed.fullDone(p.status, p.rtt, p.began)
		}
		got[n.cfg.Name] = p
	})
	mu.Lock()
	defer mu.Unlock()
	gathered = true
	out := make(map[string]*pull, len(c.nodes))
	for name := range c.nodes {
		p := got[name]
		switch {
		case p != nil:
		case !started[name]:
			p = &pull{skipped: true, err: errors.New("the previous status call has not answered yet")}
		default:
			p = &pull{err: fmt.Errorf("no answer within %s (node hung or unreachable)", wait)}
		}
		p.node = name
		if p.err != nil {
			p.silent = silence[name]
		}
		out[name] = p
	}
	return out
}

func pulling(n *nodeRuntime) *atomic.Bool    { return &n.pulling }
func working(n *nodeRuntime) *atomic.Bool    { return &n.working }
func collecting(n *nodeRuntime) *atomic.Bool { return &n.collecting }

// callTimeout bounds one remote call (a status, a push, a run, a fetch).
func (c *Controller) callTimeout() time.Duration {
	return max(c.config().Controller.SSHConnectTimeout*3, 5*time.Second)
}

// installTimeout bounds checking and installing the wrapper, which uploads
// a few megabytes over what may be a slow link.
const installTimeout = 2 * time.Minute

// fullListEvery is how often a node's status call lists every task
// directory of the served projects. The others list only the node's live
// index (tasks/.live, kept by the wrapper) and the tasks the database has
// claimed or running there, so that a steady pull costs what runs on the
// node, not every task the projects ever ran there. The full listing
// finds an attempt the index lost (a task that reached it, a wrapper
// killed between its marker and its launch): a live attempt the database
// does not expect is found by the next full listing, and named in every
// call after it while it lives (see listState). The first call after the
// wrapper is (re)checked and the first after a failed call are full too.
//
// A full listing reads every task directory, so it also waits
// fullListGap after the last: while tasks end by the thousand, ticks
// come many a second, and a listing every tenth of them would make the
// work of a batch grow with the square of its tasks.
const fullListEvery = 10

// fullListGap is the least time between two full listings of a node (see
// fullListEvery).
const fullListGap = 30 * time.Second

func (c *Controller) pullNode(ctx context.Context, n *nodeRuntime, projects []string, liveOn map[string][]string) *pull {
	if n.tr == nil {
		return &pull{err: fmt.Errorf("no transport for node %s", n.cfg.Name)}
	}
	fresh := n.installed() == nil
	ictx, icancel := context.WithTimeout(ctx, installTimeout)
	inst, err := c.ensureWrapper(ictx, n)
	icancel()
	if err != nil {
		n.listing.failed()
		return &pull{err: err}
	}
	ctx, cancel := context.WithTimeout(ctx, c.callTimeout())
	defer cancel()
	now := c.now()
	live, named := n.listing.next(fresh, now)
	if live && liveOn == nil {
		live = false // the database's list could not be read (logged)
	}
	if live {
		named = n.listing.namedOnce(append(named, liveOn[n.cfg.Name]...))
	}
	var tags []string
	if live {
		tags = n.listing.tags(named)
	}
	start := time.Now()
	var running []string
	if liveOn != nil {
		running = append([]string{}, liveOn[n.cfg.Name]...) // not nil: the database's word
	}
	st, err := n.exec.Status(ctx, inst, executor.Query{Projects: projects, Live: live, Named: named, Tags: tags, Running: running})
	rtt := time.Since(start)
	if err != nil {
		n.listing.failed()
		var re *executor.ReplyError
		if errors.As(err, &re) {
			// Check the installation again next time, unless another
			// call has replaced it meanwhile.
			n.inst.CompareAndSwap(inst, nil)
		}
		return &pull{err: err}
	}
	same := st.Same.Len()
	keys := n.listing.done(st, live, now)
	p := &pull{status: st, rtt: rtt, began: start, same: same, tasks: make(map[string]*wire.TaskStatus, len(st.Tasks))}
	for i := range st.Tasks {
		p.tasks[keys[i]] = &st.Tasks[i]
	}
	for _, u := range st.Unlisted {
		if p.unlisted == nil {
			p.unlisted = map[string]wire.Unlisted{}
		}
		// The directory is the controller's own path for it: the node's
		// word is shown to the operator in a command to run.
		u.Dir = path.Join(inst.WorkDir, u.Project, "tasks")
		p.unlisted[u.Project] = u
	}
	return p
}

// namedOnce drops from named, in place, the tasks named before: the live
// tasks the last call found are most often those the database has on the
// node, and a name twice is a tag twice in the request and a lookup twice
// on the node. Its set is kept from call to call (a new one was a
// twentieth of a steady pull's CPU).
func (l *listState) namedOnce(named []string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.once == nil {
		l.once = make(map[string]struct{}, len(named))
	}
	clear(l.once)
	out := named[:0]
	for _, k := range named {
		if _, dup := l.once[k]; !dup {
			l.once[k] = struct{}{}
			out = append(out, k)
		}
	}
	return out
}

// liveCache holds the claimed and running tasks of every node, as the
// database had them at a change counter (store.Version): the status calls
// of a tick name them, and a steady tick reads the counter alone.
type liveCache struct {
	mu       sync.Mutex
	version  int64
	projects string
	byNode   map[string][]string
}

// read returns the live tasks of projects by node, read again when the
// database changed since the last read; nil when they cannot be read.
func (l *liveCache) read(ctx context.Context, st *store.Store, projects []string, log *slog.Logger) map[string][]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	key := strings.Join(projects, "\x00")
	v, err := st.Version(ctx)
	if err == nil && l.byNode != nil && v == l.version && key == l.projects {
		return l.byNode
	}
	var byNode map[string][]string
	if err == nil {
		byNode, err = st.Live(ctx, projects)
	}
	if err != nil {
		log.Warn("listing every task of the nodes", "err", err)
		l.byNode = nil
		return nil
	}
	l.version, l.projects, l.byNode = v, key, byNode
	return byNode
}

// NodeFacts asks an installed wrapper for the node's status and facts
// (`dispatch nodes check`).
func NodeFacts(ctx context.Context, tr nodes.Transport, inst nodes.Installed) (*wire.NodeStatus, error) {
	return executor.Facts(ctx, tr, inst)
}

// ensureWrapper makes sure the node's wrapper is installed and returns the
// installation; the result is kept until a call shows it broken.
func (c *Controller) ensureWrapper(ctx context.Context, n *nodeRuntime) (*nodes.Installed, error) {
	if inst := n.installed(); inst != nil {
		return inst, nil
	}
	inst, err := nodes.EnsureWrapper(ctx, n.tr, n.cfg.WorkDir, c.opts.Wrappers)
	if err != nil {
		return nil, err
	}
	if inst.Reinstalled {
		c.log.Info("installed wrapper", keyNode, n.cfg.Name, "path", inst.Path, "platform", inst.OS+"/"+inst.Arch)
	}
	if c.opts.Home != "" {
		// For `nodes check` and `validate` to find: another node over the
		// same work_dir (see nodes.SharedWith).
		if err := nodes.WriteMarker(ctx, n.tr, inst.WorkDir, nodes.Marker{Node: n.cfg.Name, Home: nodes.HomeID(c.opts.Home)}, time.Now()); err != nil {
			c.log.Warn("node marker not written", keyNode, n.cfg.Name, "err", err)
		}
	}
	n.setInstalled(&inst)
	return &inst, nil
}
