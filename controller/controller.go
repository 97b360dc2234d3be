package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dispatch-tool/dispatch/control"
	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/home"
	"github.com/dispatch-tool/dispatch/internal/crashpoint"
	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/policy"
	"github.com/dispatch-tool/dispatch/store"
)

// Log keys.
const (
	keyNode    = "node"
	keyProject = "project"
	keyTask    = "task"
	keyAttempt = "attempt"
)

// claimGrace is how long a claimed attempt may go without a status on its
// node before the controller concludes its launch never happened and requeues
// it. A controller killed mid-launch leaves such claims behind.
const claimGrace = 30 * time.Second

// restartGrace is how long a restarted controller waits before it requeues
// the claims of the controller that died: enough for a `run` that was
// already executing on a node to write its status.
const restartGrace = 2 * time.Second

// activeWait is the pause between ticks while tasks are starting or ending.
const activeWait = 250 * time.Millisecond

// Options configures a Controller.
type Options struct {
	// Home is the dispatch home: runs/ and the report are written under it.
	Home   string
	Config *nodes.Config
	Store  *store.Store
	// Transports reaches each node of Config by name.
	Transports map[string]nodes.Transport
	Wrappers   *nodes.Wrappers
	// Now is the controller's clock; remote clocks are never compared with it.
	Now func() time.Time
	// Jitter returns a number in [0, 1) used to spread retries; rand by default.
	Jitter func() float64
	// LookupEnv expands ${VAR} in api_mode env; os.LookupEnv by default.
	LookupEnv func(string) (string, bool)
	Logger    *slog.Logger
	// Nodes restricts scheduling to these node names when not empty.
	Nodes []string
	// Project, when set, is the project of a foreground `dispatch start`:
	// Run ends once it and every project handed to this controller (a
	// start or retry over the control socket) are finished, though other
	// projects stay active (an interrupted start's); their attempts go on
	// on their nodes for the next controller. Empty: Run serves every
	// active project to its end.
	Project string
	// Between, when set, makes the controller a daemon (`dispatch serve`;
	// package service provides it): Run does not end when every project it
	// serves is finished, only on a shutdown request or when its context
	// ends, and calls Between after each tick, before it waits for the
	// next. Between may begin runs with start, as a `dispatch start`
	// handed to the controller does; it returns when Run should tick at the
	// latest (zero: no demand of its own) and whether it began a run, whose
	// tasks the next tick claims at once.
	Between func(ctx context.Context, start func(ctx context.Context, project string, so control.StartOptions) (string, error)) (due time.Time, begun bool)
	// SetSchedule enables or disables the schedule of a project, for a
	// `dispatch schedule enable|disable` handed to the controller; now is
	// the controller's clock. Nil: such requests are refused.
	SetSchedule func(ctx context.Context, project string, enabled bool, now time.Time) (string, error)
	// Reload re-reads and validates nodes.yaml, for each start handed to
	// the controller and each value of Hangup (SIGHUP); nil: never.
	Reload func() (*nodes.Config, error)
	// Open opens the connection of a node a reload adds or reaches anew.
	Open   func(*nodes.Config, nodes.Node) (nodes.Transport, error)
	Hangup <-chan os.Signal
}

// Controller schedules the tasks of every active project of a home.
type Controller struct {
	opts Options
	// cfg is nodes.yaml as last read; a reload replaces it (never changes
	// it in place), in the control loop's goroutine, which alone reads
	// this field. Every other goroutine (node workers, streams) reads
	// config(), which live holds.
	cfg   *nodes.Config
	live  atomic.Pointer[nodes.Config]
	st    *store.Store
	log   *slog.Logger
	now   func() time.Time
	nodes map[string]*nodeRuntime
	// taskCache holds the task rows the ticks read, in the control loop's
	// goroutine (see taskCache).
	taskCache taskCache
	// liveOn holds the live tasks by node for the status calls, in the
	// control loop's goroutine (see liveCache).
	liveOn liveCache
	// liveCounts are the busy slots and api_mode use the last committed
	// tick read (store.Tx.LiveCounts), in the control loop's goroutine.
	liveCounts *store.LiveCounts
	// settled holds the projects with nothing to collect (see
	// settledCache).
	settled settledCache
	// unusable names the nodes whose api_mode needs a variable this
	// controller's environment lacks, and those draining, with the
	// reason; they take no task.
	unusable map[string]string
	// draining names the nodes kept only for the attempts they run, with
	// why (see reload.go); closing counts the connections of retired
	// nodes still being closed. The control loop's goroutine owns both,
	// and streams, the context of the stream loops while Run runs.
	draining map[string]string
	closing  sync.WaitGroup
	streams  context.Context
	// started is when this controller began: offline time is only counted
	// from what this controller saw itself, never inherited from a
	// controller that stopped long ago.
	started time.Time

	// killMu guards what is known of stale attempts: those announced by an
	// event (see killKey), and what the last killStale could not confirm
	// (see unkilled).
	killMu        sync.Mutex
	announced     map[string]bool
	killFailures  map[string]int
	unkilledNodes map[string]bool
	unkilledTasks map[string]bool
	// unlistedSince is when each node first named each project it could
	// not list, as the last recorded tick had them, each said in an event
	// (see decideUnlisted); the control loop's goroutine owns it.
	unlistedSince map[unlistedKey]time.Time
	// unseenAt is when each attempt was last not seen (its node unheard,
	// or unable to list its project), as the last recorded tick had it
	// (see applier.unseen); the control loop's goroutine owns it.
	unseenAt map[attemptKey]time.Time
	// preempting holds the preemptions under way (see preempt.go), by
	// the stopped attempt's killKey; the control loop's goroutine owns it.
	preempting map[string]underWay

	// requests carries operator commands from the control socket to Run;
	// ended is closed when Run has ended, so that no handler waits for it.
	requests chan control.Call
	ended    chan struct{}
	endOnce  sync.Once
	// shutdown is set by a "shutdown" request (dispatch serve --stop):
	// Run ends after it.
	shutdown bool
	// handed names the projects started or retried over the control
	// socket, whose starts may follow them: a controller of
	// Options.Project runs until they are finished too. The control
	// loop's goroutine owns it.
	handed map[string]bool
	// wake asks Run for a tick now: a node's status stream saw a change.
	wake chan struct{}
	// fullPullEvery is how often a node with an open status stream is
	// still pulled in full (Run's poll interval); between full pulls a
	// tick acts on what the stream told. Zero (a Tick outside Run): every
	// tick pulls every node in full.
	fullPullEvery time.Duration
	// streamBeat is the beat asked of the nodes' status streams;
	// streamRetry the first pause before a dropped one is opened again.
	streamBeat, streamRetry time.Duration
	// wakeGap is the shortest time from the start of a tick that changed
	// nothing to the next tick a stream wakes (see wakeDelay).
	wakeGap time.Duration

	// notices delivers the projects' notifications (see notices.go).
	notices notices

	// collectNext holds, by attempt, when a collection that failed may be
	// tried again (see collectFailed).
	collectNext sync.Map
	// inCollection holds the tasks (taskKey) whose attempt is being
	// collected: a collection may outlast its tick, and a task is never
	// launched again into the directory its files are read from.
	inCollection sync.Map
	// room is the ledger of the room collections may write under the
	// home's runs/ (see roomLedger); roomWaits holds, by attempt, the note
	// of a collection waiting for room that others hold (see outcome);
	// waitingNow holds, by attempt, those refused so since the current
	// collection round began (see waitingForRoomNow).
	room       *roomLedger
	roomWaits  sync.Map
	waitingNow sync.Map

	// troubles counts, by project and step (troubleKey), the ticks in a
	// row in which that step failed (see projectTrouble). Only the tick
	// touches it.
	troubles map[string]int
}

// New returns a controller; it does no I/O.
func New(opts Options) *Controller {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Jitter == nil {
		opts.Jitter = rand.Float64
	}
	if opts.LookupEnv == nil {
		opts.LookupEnv = os.LookupEnv
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	c := &Controller{opts: opts, cfg: opts.Config, st: opts.Store, log: opts.Logger, now: opts.Now,
		nodes: map[string]*nodeRuntime{}, started: opts.Now(), wake: make(chan struct{}, 1), troubles: map[string]int{}, ended: make(chan struct{}),
		streamBeat: defaultStreamBeat, streamRetry: defaultStreamRetry, wakeGap: wakeGap}
	c.room = newRoomLedger(c.readRunsFree)
	c.live.Store(opts.Config)
	allowed := map[string]bool{}
	for _, n := range opts.Nodes {
		allowed[n] = true
	}
	c.unusable = map[string]string{}
	for _, n := range opts.Config.Nodes {
		if len(allowed) > 0 && !allowed[n.Name] {
			continue
		}
		c.nodes[n.Name] = c.newNodeRuntime(n, opts.Transports[n.Name])
		if why := policy.ModeProblem(opts.Config, n, opts.LookupEnv); why != "" {
			c.unusable[n.Name] = why
			c.log.Warn("node takes no tasks", keyNode, n.Name, "reason", why)
		}
	}
	return c
}

// config is nodes.yaml as last read, for any goroutine.
func (c *Controller) config() *nodes.Config { return c.live.Load() }

// TickResult says what one tick did.
type TickResult struct {
	Launched int
	Changed  int
	// Done lists the projects that finished in this tick.
	Done []string
	// Wake is when the next tick has something to decide by the clock
	// alone (a retry's backoff or a pause ends, an offline node's tasks
	// are lost); zero when nothing is due. Run ticks then at the latest.
	Wake time.Time
}

// Tick runs one pass of the control loop (SPEC §7 steps 1-7).
func (c *Controller) Tick(ctx context.Context) (TickResult, error) {
	var res TickResult
	// What the tick decided to tell goes out when it ends, one message
	// per target, its failed attempts' logs collected by then.
	defer c.flushNotices(ctx)
	took := newTickSteps()
	defer took.log(c.log, &res)
	projects, names, err := c.servedProjects(ctx)
	if err != nil {
		return res, err
	}
	pulls := c.pullAll(ctx, names)
	took.step(&took.pull)
	crashpoint.At(crashpoint.AfterPull)
	out, err := c.decide(ctx, projects, names, pulls)
	took.step(&took.decide)
	if err != nil {
		return res, fmt.Errorf("apply node status: %w", err)
	}
	// A project whose rows do not read back is left out of the rest of
	// the tick, and stopped after a few; the others go on.
	if projects, names, err = c.leaveOut(ctx, projects, names, out.damaged); err != nil {
		return res, err
	}
	crashpoint.At(crashpoint.AfterApply)
	res.Changed, res.Wake = out.changed, earliest(out.wake, out.pauseEnd, c.now())
	claims := out.claims
	if len(claims) > 0 {
		crashpoint.At(crashpoint.AfterClaim)
	}
	// Stale attempts are killed in their nodes' background lanes; their
	// nodes took no claim in this tick.
	c.killStale(ctx, out.stale)
	took.step(&took.kill)
	// What finished is collected while the new attempts launch: on a
	// node, a launch and a collection are two SSH sessions side by side. A
	// task being launched again is left for the next tick, since its
	// directory is being taken over.
	launching := map[string]bool{}
	for _, cl := range claims {
		launching[taskKey(cl.task.Project, cl.task.ID)] = true
	}
	collected := make(chan error, 1)
	go func() {
		began := time.Now()
		err := c.collectAll(ctx, names, pulls, launching)
		took.collect = time.Since(began)
		collected <- err
	}()
	res.Launched = c.launchAll(ctx, claims)
	took.step(&took.launch)
	if err := <-collected; err != nil {
		c.log.Warn("collect outputs", "err", err)
	}
	took.step(&took.collectAfter)
	done, err := c.finishProjects(ctx, projects)
	took.step(&took.finish)
	if err != nil {
		return res, err
	}
	res.Done = done
	return res, nil
}

// tickSteps is how long each step of a tick took, for the debug log: a
// batch that waits inside a tick, not between two, names the step.
type tickSteps struct {
	began, mark time.Time
	// collect runs beside the launches; collectAfter is how long the
	// tick waited for it once they were done.
	pull, decide, kill, launch, collect, collectAfter, finish time.Duration
}

func newTickSteps() *tickSteps {
	now := time.Now()
	return &tickSteps{began: now, mark: now}
}

// step adds the time since the last step to d.
func (s *tickSteps) step(d *time.Duration) {
	now := time.Now()
	*d += now.Sub(s.mark)
	s.mark = now
}

func (s *tickSteps) log(log *slog.Logger, res *TickResult) {
	r := func(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
	log.Debug("tick", "took", r(time.Since(s.began)), "pull", r(s.pull), "decide", r(s.decide), "kill", r(s.kill),
		"launch", r(s.launch), "collect", r(s.collect), "collect_after_launch", r(s.collectAfter), "finish", r(s.finish),
		"launched", res.Launched, "changed", res.Changed)
}

// Run ticks every poll interval, again right after a tick that launched
// tasks, and at once when a node's status stream reports a change, until
// every project it serves is finished or ctx is cancelled.
// onTick, when not nil, is called after every tick.
func (c *Controller) Run(ctx context.Context, poll time.Duration, onTick func(TickResult)) error {
	if poll <= 0 {
		poll = c.config().Controller.PollInterval
	}
	// What Run starts ends with it: the stream loops and the node workers
	// still at work are told to stop (ctx), then Close waits for them
	// before it closes the transports, and the control socket's handlers
	// waiting for this loop are told it ended.
	ctx, stop := context.WithCancel(ctx)
	defer func() {
		stop()
		c.endOnce.Do(func() { close(c.ended) })
		c.Close()
	}()
	c.fullPullEvery = poll
	c.streams = ctx
	c.watchNodes(ctx)
	movedBefore := false
	for {
		tickStart := time.Now()
		res, err := c.Tick(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			// Nothing a tick does is lost by stopping halfway: the next
			// tick starts again from the database and the nodes.
			c.log.Error("tick failed; trying again at the next poll", "err", err)
		} else {
			// What status shows is what this tick saw: when no controller
			// runs any more, the views say since when (issue 38).
			if c.opts.Home != "" {
				home.MarkTick(c.opts.Home, time.Now())
			}
			if onTick != nil {
				onTick(res)
			}
		}
		c.settleDrains(ctx)
		_, served, err := c.servedProjects(ctx)
		if err != nil {
			return err
		}
		if runEnds(served, c.opts.Project, c.handed, c.opts.Between != nil, c.shutdown) {
			return nil
		}
		wait, why := poll, "poll"
		moved := res.Launched > 0 || res.Changed > 0
		recent := [2]bool{moved, movedBefore}
		movedBefore = moved
		if moved {
			// While tasks start and end, look again soon: short tasks then
			// finish in well under a poll interval, and freed slots refill
			// at once. A quiet batch is pulled every poll interval.
			wait, why = min(poll, activeWait), "active"
		}
		// A retry's backoff, a pause, an offline node's timeout: what falls
		// due by the clock alone is decided when it is due, not at the
		// next poll.
		if !res.Wake.IsZero() && res.Wake.Sub(c.now()) < wait {
			wait, why = max(res.Wake.Sub(c.now()), 0), "due"
		}
		if c.opts.Between != nil {
			// Scheduled runs start when they are due, and their tasks are
			// claimed by the tick right after.
			due, begun := c.opts.Between(ctx, c.startProject)
			if !due.IsZero() && due.Sub(c.now()) < wait {
				wait, why = max(due.Sub(c.now()), 0), "schedule"
			}
			if begun {
				wait, why = 0, "run begun"
			}
		}
		if err := c.awaitTick(ctx, wait, why, tickStart, recent); err != nil {
			return err
		}
	}
}

// awaitTick waits for the next tick, serving operator commands meanwhile;
// a tick follows every command at once, and a stream's wake after
// wakeDelay (moved: whether the last tick and the one before it
// launched or changed something). The
// debug log names what ended each wait and how long it was (why: the
// timer's reason), so that a batch that stalls says what it waited for.
func (c *Controller) awaitTick(ctx context.Context, wait time.Duration, why string, tickStart time.Time, moved [2]bool) error {
	began := time.Now()
	timer := time.NewTimer(wait)
	defer timer.Stop()
	woke := why
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
	case r := <-c.requests:
		r.Reply <- c.Do(ctx, r.Req)
		woke = "command"
	case <-c.opts.Hangup:
		c.reloadAndLog(ctx)
		woke = "hangup"
	case <-c.wake:
		// A node said something changed: tick now, once the rest of the
		// burst is in.
		timer.Stop()
		if !sleepCtx(ctx, wakeDelay(moved[0], moved[1], c.wakeGap, time.Since(tickStart))) {
			return ctx.Err()
		}
		select {
		case <-c.wake:
		default:
		}
		woke = "stream"
	}
	c.log.Debug("tick wait", "woke_by", woke, "waited", time.Since(began).Round(time.Millisecond), "planned", wait, "planned_for", why)
	return nil
}

// wakeDelay is how long a stream's wake waits before its tick: the
// burst's coalesceWait, and after two ticks in a row that changed nothing
// (moved, movedBefore: the last tick and the one before it launched or
// changed a task) until gap has passed since the last one began, however
// fast a node (or a task rewriting its own status.json) reports changes.
// A tick that moved tasks, and the one after it, are followed at once:
// freed slots are refilled while the next tasks end, and the tick after
// a launch often moves nothing (a frame saying what the launch reply
// said) while the launched tasks' ends are on their way. Ticks that move
// tasks are bounded by the tasks' transitions, which nothing on a node
// can repeat at will.
func wakeDelay(moved, movedBefore bool, gap, sinceTick time.Duration) time.Duration {
	if moved || movedBefore {
		gap = 0
	}
	return max(coalesceWait, gap-sinceTick)
}

// Close closes the node transports, each once the goroutines still using
// it (its stream loop, its workers) have ended: Run has told them to stop;
// a Tick's workers end at their calls' deadlines.
func (c *Controller) Close() {
	c.drainNotices()
	for _, n := range c.nodes {
		n.busy.Wait()
		n.exec.Close()
		if n.tr != nil {
			_ = n.tr.Close()
		}
	}
	c.closing.Wait()
}

// servedProjects returns the active projects, which the tick schedules and
// advances, and the names of every project it serves: the active ones and
// the stopped ones whose attempts still run or whose results are not
// collected yet. Stop means "start nothing new": what runs goes on, is
// pulled, applied and collected, and is never taken for a stale attempt.
func (c *Controller) servedProjects(ctx context.Context) (active []domain.Project, served []string, err error) {
	all, err := c.st.Projects(ctx)
	if err != nil {
		return nil, nil, err
	}
	for _, p := range all {
		switch p.State {
		case domain.ProjectActive:
			active = append(active, p)
			served = append(served, p.Name)
		case domain.ProjectStopped:
			live, err := c.st.HasLiveWork(ctx, p.Name)
			if err != nil {
				return nil, nil, err
			}
			if live {
				served = append(served, p.Name)
			}
		}
	}
	return active, served, nil
}

// runEnds decides whether Run ends after a tick: on a shutdown request; a
// daemon never otherwise; a controller with nothing left to serve; a
// foreground start's (own) once neither its project nor any project
// handed to it is served, whatever else stays active.
func runEnds(served []string, own string, handed map[string]bool, daemon, shutdown bool) bool {
	switch {
	case shutdown:
		return true
	case daemon:
		return false
	case own == "":
		return len(served) == 0
	}
	for _, p := range served {
		if p == own || handed[p] {
			return false
		}
	}
	return true
}

// errNoRetry marks a launch failure that retrying cannot fix.
var errNoRetry = errors.New("not retryable")
