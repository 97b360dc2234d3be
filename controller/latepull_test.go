package controller

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/wire"
)

// heldStatus holds a transport's `wrapper status` calls, once armed, until
// the test lets them go: a node whose status call outlasts the tick's wait
// for it.
type heldStatus struct {
	nodes.Transport
	armed   chan struct{} // closed: the calls are held
	entered chan struct{}
	release chan struct{}
}

func (h *heldStatus) Exec(ctx context.Context, argv []string, stdin []byte) (nodes.Result, error) {
	if len(argv) > 1 && argv[1] == "status" {
		select {
		case <-h.armed:
			h.entered <- struct{}{}
			<-h.release
		default:
		}
	}
	return h.Transport.Exec(ctx, argv, stdin)
}

// TestALatePullDropsNothingTheStreamTold: a status call that answers after
// its tick stopped waiting for it (a node slow for more than twice
// ssh_connect_timeout) is no tick's, so it is not the full pull the node's
// stream asks for: what the stream told before it began (here S01's end)
// was dropped as if that pull had brought it, and no tick learnt it until
// the next full pull a poll interval later (a stalled batch, issue 32 item
// 12). The next pull carries S01's end, and the late answer wakes the loop.
func TestALatePullDropsNothingTheStreamTold(t *testing.T) {
	h := newHarness(t, "", shellProject(map[string]string{"S01-a.md": "true\n"}))
	held := &heldStatus{Transport: nodes.NewLocal(), armed: make(chan struct{}), entered: make(chan struct{}, 1), release: make(chan struct{})}
	h.ctl = New(Options{Home: h.home, Config: h.cfg, Store: h.st, Transports: map[string]nodes.Transport{"local": held},
		Wrappers: wrappers, Now: h.clock.Now, Jitter: func() float64 { return 0 }})
	h.tick() // installs the wrapper, pulls in full, launches S01
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		b, _ := os.ReadFile(filepath.Join(h.work, "p", "tasks", "S01", "status.json"))
		if strings.Contains(string(b), `"completed"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("S01 did not complete on the node: %s", b)
		}
	}
	// As under Run: the node's stream is open and stands in for its status
	// calls between full pulls. It has just said hello (a full pull is
	// asked for), then told S01's end.
	ctx := context.Background()
	c, n := h.ctl, h.ctl.nodes["local"]
	c.fullPullEvery = time.Hour
	n.streamUp.Store(true)
	n.streamed.reset(time.Now())
	n.streamed.add(wire.Frame{Type: wire.FrameChange, Tasks: []string{"p/S01"}, Statuses: []wire.TaskStatus{{Project: "p", Task: "S01",
		Status: &wire.Status{Status: wire.StatusCompleted, Attempt: 1}}}}, time.Now())
	// The full pull's status call outlasts the tick's wait.
	h.cfg.Controller.SSHConnectTimeout = 50 * time.Millisecond
	close(held.armed)
	if p := c.pullAll(ctx, []string{"p"})["local"]; p.err == nil {
		t.Fatalf("the held status call answered in its tick: %+v", p)
	}
	<-held.entered
	close(held.release)
	if !wokeWithin(c, 30*time.Second) {
		t.Error("the late status call's answer woke no tick: the loop waits for the next poll")
	}
	for deadline := time.Now().Add(30 * time.Second); n.pulling.Load(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the late status call did not end")
		}
	}
	p := c.pullAll(ctx, []string{"p"})["local"]
	if p.err != nil {
		t.Fatalf("the pull after the late one: %v", p.err)
	}
	if ts := p.tasks["p/S01"]; ts == nil || ts.Status == nil || ts.Status.Status != wire.StatusCompleted {
		t.Fatalf("the pull after the late one does not carry S01's end (partial: %v, tasks: %d): what the stream told "+
			"before the late call began was dropped unapplied", p.partial, len(p.tasks))
	}
}

// TestWorkPastItsTickWakesTheLoop: a node's call that outlasts the tick's
// wait for it (a collection, a kill) goes on in the background; when it
// ends, it wakes the loop, as no tick waited for what it did (the last
// collections of a project, without which it cannot finish): the next
// tick came at the next poll. A call that ends in time wakes nothing.
func TestWorkPastItsTickWakesTheLoop(t *testing.T) {
	h := newHarness(t, "", shellProject(map[string]string{"S01-a.md": "true\n"}))
	c := h.ctl
	woke := func() bool {
		select {
		case <-c.wake:
			return true
		default:
			return false
		}
	}
	finished := c.onNodes([]string{"local"}, collecting, time.Minute, func(*nodeRuntime) {})
	if w := woke(); !finished["local"] || w {
		t.Fatalf("a call that ended in time: finished %v, woke the loop %v; want finished, no wake", finished["local"], w)
	}
	release := make(chan struct{})
	if finished := c.onNodes([]string{"local"}, collecting, 10*time.Millisecond, func(*nodeRuntime) { <-release }); finished["local"] {
		t.Fatal("the held call finished in time")
	}
	if woke() {
		t.Fatal("the loop was woken before the held call ended")
	}
	close(release)
	if !wokeWithin(c, 30*time.Second) {
		t.Error("the call that outlasted its tick ended without waking the loop: the next tick waits for the poll")
	}
}

// wokeWithin reports whether something asks c's loop for a tick within d.
func wokeWithin(c *Controller, d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-c.wake:
		return true
	case <-timer.C:
		return false
	}
}
