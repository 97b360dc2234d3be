package controller

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/wire"
)

// chainYAML polls once an hour: only the status streams can move a chain
// along in a test's time.
const chainYAML = `
controller:
  poll_interval: 1h
nodes:
  - name: local
    slots: 2
    work_dir: WORK
`

func chainSpecs() map[string]string {
	return map[string]string{
		"project.yaml": "tool: shell\nintegration: false\n",
		"S01-a.md":     "sleep 0.5\n",
		"S02-b.md":     "---\ndepends_on: [S01]\n---\nsleep 0.5\n",
		"S03-c.md":     "---\ndepends_on: [S02]\n---\nsleep 0.5\n",
	}
}

// runUntilDone runs the controller until its projects are finished, within
// limit (a failure means the loop waited for a poll it should not have).
func runUntilDone(t *testing.T, h *harness, limit time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	if err := h.ctl.Run(ctx, 0, nil); err != nil {
		t.Fatalf("Run: %v (with poll_interval 1h only the status streams could have moved the project)", err)
	}
	for _, id := range []string{"S01", "S02", "S03"} {
		if tk := h.task(id); tk.Status != domain.Completed {
			t.Errorf("%s = %s", id, tk.Status)
		}
	}
}

// TestStreamWakesTheLoop: each step of a chain starts as soon as the one
// before ends, told by the node's status stream, not by the hourly poll.
//
// The debug log names what ended each wait between ticks (the stream here,
// never the hourly poll), and how long each step of a tick took, so that a
// batch that stalls says what it waited for, between ticks or in one.
func TestStreamWakesTheLoop(t *testing.T) {
	h := newHarness(t, chainYAML, chainSpecs())
	var logs lockedBuffer
	h.ctl.log = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	runUntilDone(t, h, time.Minute)
	out := logs.String()
	if !strings.Contains(out, "tick wait") || !strings.Contains(out, "woke_by=stream") || strings.Contains(out, "woke_by=poll") {
		t.Errorf("the debug log does not name the stream as what ended the waits:\n%s", out)
	}
	for _, step := range []string{"msg=tick took=", " pull=", " decide=", " kill=", " launch=", " collect=", " collect_after_launch=", " finish=", " launched=1 "} {
		if !strings.Contains(out, step) {
			t.Errorf("the debug log does not say how long each step of a tick took (no %q):\n%s", step, out)
		}
	}
}

// TestWakeAfterAMovingTickIsNotHeldBack: a stream's wake after a tick
// that launched or changed something is followed at once (the burst's
// coalesceWait), not a wake gap after that tick began; after a tick that
// changed nothing the gap still holds it back. The gap is an hour here:
// held back, awaitTick ends only with its context.
func TestWakeAfterAMovingTickIsNotHeldBack(t *testing.T) {
	h := newHarness(t, chainYAML, chainSpecs())
	h.ctl.wakeGap = time.Hour
	await := func(moved, movedBefore bool, limit time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), limit)
		defer cancel()
		h.ctl.signalWake()
		return h.ctl.awaitTick(ctx, time.Hour, "active", time.Now(), [2]bool{moved, movedBefore})
	}
	if err := await(true, false, 10*time.Second); err != nil {
		t.Errorf("the wake after a tick that moved tasks was held back: %v", err)
	}
	if err := await(false, true, 10*time.Second); err != nil {
		t.Errorf("the wake after the tick that followed one that moved tasks was held back: %v", err)
	}
	if err := await(false, false, 50*time.Millisecond); err == nil {
		t.Error("the wake after two ticks that changed nothing was not held back by the wake gap")
	}
}

func TestWakeDelay(t *testing.T) {
	gap := 100 * time.Millisecond
	for _, tc := range []struct {
		moved, movedBefore bool
		sinceTick          time.Duration
		want               time.Duration
	}{
		{false, false, 0, gap},
		{false, false, 30 * time.Millisecond, 70 * time.Millisecond},
		{false, false, 99 * time.Millisecond, coalesceWait},
		{false, false, time.Second, coalesceWait},
		{true, false, 0, coalesceWait},
		{true, false, 30 * time.Millisecond, coalesceWait},
		{false, true, 0, coalesceWait},
		{true, true, 30 * time.Millisecond, coalesceWait},
	} {
		if got := wakeDelay(tc.moved, tc.movedBefore, gap, tc.sinceTick); got != tc.want {
			t.Errorf("wakeDelay(%v, %v, %v, %v) = %v, want %v", tc.moved, tc.movedBefore, gap, tc.sinceTick, got, tc.want)
		}
	}
}

// streamer replaces a transport's Stream.
type streamer struct {
	nodes.Transport
	calls  atomic.Int32
	stream func(ctx context.Context, argv []string, onLine func([]byte) bool) error
}

func (s *streamer) Stream(ctx context.Context, argv []string, onLine func([]byte) bool) error {
	s.calls.Add(1)
	return s.stream(ctx, argv, onLine)
}

func withStreamer(h *harness, s *streamer) {
	s.Transport = nodes.NewLocal()
	h.ctl = New(Options{Home: h.home, Config: h.cfg, Store: h.st, Transports: map[string]nodes.Transport{"local": s},
		Wrappers: wrappers, Now: h.clock.Now, Jitter: func() float64 { return 0 }})
}

// TestBrokenStreamsFallBackToPolling: a stream that sends garbage, or goes
// silent after its hello, is dropped and opened again; meanwhile the poll
// moves the project.
func TestBrokenStreamsFallBackToPolling(t *testing.T) {
	for _, tc := range []struct {
		name   string
		stream func(ctx context.Context, argv []string, onLine func([]byte) bool) error
	}{
		{"garbage", func(ctx context.Context, argv []string, onLine func([]byte) bool) error {
			onLine([]byte(`{"type":"change","tasks":["p/S01"]}`))
			onLine([]byte("\x1b[31mnot a frame"))
			return nil
		}},
		{"wrong version", func(ctx context.Context, argv []string, onLine func([]byte) bool) error {
			onLine([]byte(`{"type":"hello","version":"someone-else"}`))
			return nil
		}},
		{"silent", func(ctx context.Context, argv []string, onLine func([]byte) bool) error {
			onLine([]byte(`{"type":"hello","version":"` + wrapperVersion(argv) + `"}`))
			<-ctx.Done()
			return ctx.Err()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			yaml := chainYAML
			h := newHarness(t, yaml, chainSpecs())
			h.cfg.Controller.PollInterval = 300 * time.Millisecond
			s := &streamer{stream: tc.stream}
			withStreamer(h, s)
			h.ctl.streamBeat, h.ctl.streamRetry = 50*time.Millisecond, 20*time.Millisecond
			runUntilDone(t, h, time.Minute)
			if n := s.calls.Load(); n < 2 {
				t.Errorf("the broken stream was opened %d time(s); want it dropped and opened again", n)
			}
		})
	}
}

// wrapperVersion is the version in a `watch` command line's wrapper path.
func wrapperVersion(argv []string) string {
	const prefix = "dispatch-wrapper-"
	p := argv[0]
	for i := len(p) - 1; i >= 0; i-- {
		if p[i] == '/' {
			p = p[i+1:]
			break
		}
	}
	if len(p) > len(prefix) {
		return p[len(prefix):]
	}
	return ""
}

// TestStreamOpensOnceTheWrapperIsChecked: the status stream opens as soon
// as a pull has checked the node's wrapper, not after the stream loop's
// pause (here an hour): the first steps of a batch need it.
func TestStreamOpensOnceTheWrapperIsChecked(t *testing.T) {
	h := newHarness(t, chainYAML, chainSpecs())
	h.ctl.streamRetry = time.Hour
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h.ctl.watchNodes(ctx)
	n := h.ctl.nodes["local"]
	// Before any pull the stream loop finds no wrapper and waits.
	h.tick() // installs and checks the wrapper
	for deadline := time.Now().Add(20 * time.Second); !n.streamUp.Load(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the stream did not open after the wrapper was checked (it waits out the loop's pause)")
		}
	}
	killAll(t, h)
}

// TestStreamStatePartialPulls: a node's stream stands in for its status
// call only after a full pull, while nothing may have been missed, and
// until the full pull is due again; a partial pull carries what the stream
// told of the served projects, once; a full pull drops what the stream
// told before it began.
func TestStreamStatePartialPulls(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	served := map[string]bool{"p": true}
	frame := func(statuses ...wire.TaskStatus) wire.Frame {
		f := wire.Frame{Type: wire.FrameChange}
		for _, ts := range statuses {
			f.Tasks = append(f.Tasks, taskKey(ts.Project, ts.Task))
			f.Statuses = append(f.Statuses, ts)
		}
		return f
	}
	status := func(project, task string, attempt int) wire.TaskStatus {
		return wire.TaskStatus{Project: project, Task: task, Alive: true,
			Status: &wire.Status{Status: wire.StatusRunning, Attempt: attempt}}
	}
	keys := func(p *pull) []string {
		if p == nil {
			return nil
		}
		return slices.Sorted(maps.Keys(p.tasks))
	}

	var s streamState
	s.add(frame(status("p", "S01", 1)), t0)
	if p := s.partial(served, time.Minute, t0); p != nil {
		t.Fatalf("partial pull before any full pull: %v", keys(p))
	}
	facts := &wire.NodeStatus{WrapperVersion: "v1", Facts: wire.Facts{MemAvailableBytes: 7}}
	// The full pull began after S01's frame: S01 is dropped, S02 (told
	// while the status call ran) is kept.
	s.add(frame(status("p", "S02", 1)), t0.Add(2*time.Second))
	s.fullDone(facts, 3*time.Millisecond, t0.Add(time.Second))
	s.add(frame(status("p", "S03", 1), status("other", "S09", 1)), t0.Add(3*time.Second))
	p := s.partial(served, time.Minute, t0.Add(4*time.Second))
	if got := keys(p); !slices.Equal(got, []string{"p/S02", "p/S03"}) {
		t.Fatalf("partial pull holds %v, want p/S02 and p/S03 (not the other project's, not what the full pull saw)", got)
	}
	if !p.partial || p.status.WrapperVersion != "v1" || p.status.Facts.MemAvailableBytes != 7 || p.rtt != 3*time.Millisecond {
		t.Errorf("partial pull %+v %+v: want partial, with the last full pull's facts", p, p.status)
	}
	if got := keys(s.partial(served, time.Minute, t0.Add(5*time.Second))); len(got) != 0 {
		t.Errorf("the next partial pull holds %v again, want nothing new", got)
	}
	if p := s.partial(served, time.Minute, t0.Add(61*time.Second)); p != nil {
		t.Error("partial pull a poll interval after the last full one; want a full pull")
	}
	if p := s.partial(served, 0, t0.Add(5*time.Second)); p != nil {
		t.Error("partial pull with no poll interval (a Tick outside Run); want a full pull")
	}
	// A frame naming tasks without their statuses, or a stream that
	// (re)opens, may hide changes: the next pull is full.
	s.add(wire.Frame{Type: wire.FrameChange, Tasks: []string{"p/S04"}}, t0.Add(6*time.Second))
	if p := s.partial(served, time.Minute, t0.Add(6*time.Second)); p != nil {
		t.Error("partial pull after a frame without statuses; want a full pull")
	}
	s.fullDone(facts, time.Millisecond, t0.Add(7*time.Second))
	if p := s.partial(served, time.Minute, t0.Add(8*time.Second)); p == nil {
		t.Fatal("no partial pull right after a full one")
	}
	s.reset(t0.Add(8 * time.Second))
	if p := s.partial(served, time.Minute, t0.Add(8*time.Second)); p != nil {
		t.Error("partial pull after the stream reopened; want a full pull")
	}
	// The stream's hello comes while a full pull is out: that pull may
	// have read the node before the stream's starting look, and what ended
	// between the two is in neither. It is not enough; one begun after the
	// hello is.
	s.fullDone(facts, time.Millisecond, t0.Add(7500*time.Millisecond))
	if p := s.partial(served, time.Minute, t0.Add(9*time.Second)); p != nil {
		t.Error("partial pull after a full pull begun before the stream's hello; want another full pull")
	}
	s.fullDone(facts, time.Millisecond, t0.Add(8500*time.Millisecond))
	if p := s.partial(served, time.Minute, t0.Add(9*time.Second)); p == nil {
		t.Error("no partial pull after a full pull begun after the hello")
	}
	// Likewise after a frame without statuses.
	s.add(wire.Frame{Type: wire.FrameChange, Tasks: []string{"p/S05"}}, t0.Add(10*time.Second))
	s.fullDone(facts, time.Millisecond, t0.Add(9500*time.Millisecond))
	if p := s.partial(served, time.Minute, t0.Add(11*time.Second)); p != nil {
		t.Error("partial pull after a full pull begun before a frame without statuses; want another full pull")
	}
}

// statusCounter counts a transport's `wrapper status` calls.
type statusCounter struct {
	nodes.Transport
	calls atomic.Int32
}

func (s *statusCounter) Exec(ctx context.Context, argv []string, stdin []byte) (nodes.Result, error) {
	if len(argv) > 1 && argv[1] == "status" {
		s.calls.Add(1)
	}
	return s.Transport.Exec(ctx, argv, stdin)
}

// TestStreamSparesTheStatusCalls: while a node's stream is open, the ticks
// act on the statuses its frames carry: a chain whose every step is told by
// the stream needs a full status call only to start and when the stream
// opens, not one per tick.
func TestStreamSparesTheStatusCalls(t *testing.T) {
	h := newHarness(t, chainYAML, chainSpecs())
	sc := &statusCounter{Transport: nodes.NewLocal()}
	h.ctl = New(Options{Home: h.home, Config: h.cfg, Store: h.st, Transports: map[string]nodes.Transport{"local": sc},
		Wrappers: wrappers, Now: h.clock.Now, Jitter: func() float64 { return 0 }})
	ticks := 0
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := h.ctl.Run(ctx, 0, func(TickResult) { ticks++ }); err != nil {
		t.Fatalf("Run: %v", err)
	}
	for _, id := range []string{"S01", "S02", "S03"} {
		if tk := h.task(id); tk.Status != domain.Completed {
			t.Errorf("%s = %s", id, tk.Status)
		}
	}
	// One call checks the wrapper before the stream can open, one follows
	// the stream's hello; a third may come if the stream reopened.
	if n := int(sc.calls.Load()); n > 3 || n >= ticks {
		t.Errorf("%d status calls in %d ticks; want at most 3: the stream's frames carry the statuses", n, ticks)
	}
}
