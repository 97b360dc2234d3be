package controller

import (
	"bytes"
	"context"
	"net"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/home"
	"github.com/dispatch-tool/dispatch/nodes"
)

// ourGoroutines returns the stacks, by goroutine header, of the goroutines
// running code of this module.
func ourGoroutines() map[string]string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	out := map[string]string{}
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		s := string(g)
		if !strings.Contains(s, "github.com/dispatch-tool/dispatch/") {
			continue
		}
		id, _, _ := strings.Cut(s, " [") // "goroutine 12"
		out[id] = s
	}
	return out
}

// leakedSince lists the goroutines of this module that were not running at
// before. A goroutine whose owner has seen it finish (its WaitGroup's Done
// runs in a defer) may still be returning: it is given a moment to go, as
// goleak does; one that is still blocked after it is a leak.
func leakedSince(before map[string]string) []string {
	var out []string
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		out = out[:0]
		for id, s := range ourGoroutines() {
			if _, ok := before[id]; !ok {
				out = append(out, s)
			}
		}
		if len(out) == 0 || time.Now().After(deadline) {
			return out
		}
	}
}

// slowToEnd is a node whose status stream, once told to stop, takes a real
// process's time to end (as an SSH session closing does), and which
// records a Close that comes while a stream is still open.
type slowToEnd struct {
	nodes.Transport
	open        atomic.Int32
	closedUnder atomic.Bool
	streaming   chan struct{}
}

func (s *slowToEnd) Stream(ctx context.Context, argv []string, onLine func([]byte) bool) error {
	s.open.Add(1)
	defer s.open.Add(-1)
	select {
	case s.streaming <- struct{}{}:
	default:
	}
	err := s.Transport.Stream(ctx, argv, onLine)
	_, _ = s.Transport.Exec(context.WithoutCancel(ctx), []string{"sleep", "0.5"}, nil)
	return err
}

func (s *slowToEnd) Close() error {
	if s.open.Load() > 0 {
		s.closedUnder.Store(true)
	}
	return s.Transport.Close()
}

// TestRunLeavesNoGoroutineBehind: once Run has returned and the control
// socket is stopped, no goroutine of the controller is left (stream
// loops, node workers, socket handlers, even one holding a silent
// connection), and no transport was closed under a call still using it.
func TestRunLeavesNoGoroutineBehind(t *testing.T) {
	h := newHarness(t, "", shellProject(map[string]string{"S01-a.md": "sleep 30\n"}))
	defer killAll(t, h)
	before := ourGoroutines()
	tr := &slowToEnd{Transport: nodes.NewLocal(), streaming: make(chan struct{}, 1)}
	h.useTransport("local", tr)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stopServing, err := h.ctl.Serve(ctx)
	if err != nil {
		t.Fatal(err)
	}
	silent, err := net.Dial("unix", home.SocketPath(h.home))
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	ran := make(chan error, 1)
	go func() { ran <- h.ctl.Run(ctx, 50*time.Millisecond, nil) }()
	select {
	case <-tr.streaming:
	case err := <-ran:
		t.Fatalf("Run ended before the node's stream opened: %v", err)
	case <-time.After(90 * time.Second):
		t.Fatal("the node's status stream never opened")
	}
	cancel()
	<-ran
	stopServing()
	if tr.closedUnder.Load() {
		t.Error("the node's transport was closed while its status stream was still open")
	}
	if leaked := leakedSince(before); len(leaked) > 0 {
		t.Fatalf("%d goroutine(s) of the controller outlive Run and the socket:\n%s", len(leaked), strings.Join(leaked, "\n\n"))
	}
}

// hangsUntilCancelled is a node that answers no call until its deadline,
// then takes a real session's time to end, and records a Close that comes
// while a call is still open.
type hangsUntilCancelled struct {
	nodes.Transport
	open        atomic.Int32
	closedUnder atomic.Bool
}

func (h *hangsUntilCancelled) Exec(ctx context.Context, argv []string, stdin []byte) (nodes.Result, error) {
	h.open.Add(1)
	defer h.open.Add(-1)
	<-ctx.Done()
	time.Sleep(200 * time.Millisecond)
	return nodes.Result{}, ctx.Err()
}

func (h *hangsUntilCancelled) Close() error {
	if h.open.Load() > 0 {
		h.closedUnder.Store(true)
	}
	return h.Transport.Close()
}

// TestCloseWaitsForTheWorkersATickLeft: a tick does not wait for a hung
// node past its pull's wait and leaves that node's worker running; Close
// waits for it before it closes the node's transport, and leaves no
// goroutine of the controller behind.
func TestCloseWaitsForTheWorkersATickLeft(t *testing.T) {
	yaml := `
controller:
  ssh_connect_timeout: 1s
nodes:
  - name: local
    slots: 2
    work_dir: WORK
`
	h := newHarness(t, yaml, shellProject(map[string]string{"S01-a.md": "true\n"}))
	h.tickUntil("S01 to complete", func() bool { return h.task("S01").Status == domain.Completed })
	before := ourGoroutines()
	tr := &hangsUntilCancelled{Transport: nodes.NewLocal()}
	h.useTransport("local", tr)
	began := time.Now()
	h.tick()
	t.Logf("tick: %s", time.Since(began))
	if tr.open.Load() == 0 {
		t.Fatal("the tick ended with no call to the hung node still open: nothing left to wait for")
	}
	h.ctl.Close()
	t.Logf("tick and close: %s", time.Since(began))
	if tr.closedUnder.Load() {
		t.Error("the node's transport was closed while a worker's call was still open")
	}
	if leaked := leakedSince(before); len(leaked) > 0 {
		t.Fatalf("%d goroutine(s) of the controller outlive Close:\n%s", len(leaked), strings.Join(leaked, "\n\n"))
	}
}
