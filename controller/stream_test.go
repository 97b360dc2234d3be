package controller

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/store"
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
		if tk := h.task(id); tk.Status != store.Completed {
			t.Errorf("%s = %s", id, tk.Status)
		}
	}
}

// TestStreamWakesTheLoop: each step of a chain starts as soon as the one
// before ends, told by the node's status stream, not by the hourly poll.
func TestStreamWakesTheLoop(t *testing.T) {
	h := newHarness(t, chainYAML, chainSpecs())
	runUntilDone(t, h, time.Minute)
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
