package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dispatch-tool/dispatch/controller/executor"
	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/wire"
)

// Each node keeps one long-lived status stream, `wrapper watch`, over one
// SSH session: a frame comes as soon as a task's status.json changes (or
// its supervisor dies), and the controller ticks at once instead of waiting
// for the next poll. The poll goes on as the fallback and the full pull. A
// stream that ends, sends garbage or stays silent (four beats) is
// dropped, a tick checks the node at once, and the stream is opened again
// after a pause that grows while it keeps failing. Silence means four beats
// without a frame.

const (
	// defaultStreamBeat is how often `watch` says it is alive.
	defaultStreamBeat = 5 * time.Second
	// defaultStreamRetry is the first pause before a dropped stream is
	// opened again, doubling up to streamRetryMax while it keeps failing.
	defaultStreamRetry = time.Second
	streamRetryMax     = 30 * time.Second
	// streamStable is how long a stream must have lasted for its next
	// failure to count as a first one again.
	streamStable = time.Minute
	// coalesceWait gathers a burst of frames (several tasks ending
	// together, on several nodes) into one tick.
	coalesceWait = 5 * time.Millisecond
	// wakeGap is the shortest time from the start of a tick that changed
	// nothing to the next one a stream wakes (Controller.wakeGap).
	wakeGap = 100 * time.Millisecond
)

// errStreamFrame ends a stream that sent something that is not a frame.
var errStreamFrame = errors.New("not a frame")

// signalWake asks Run for a tick now; a wake already pending is enough.
func (c *Controller) signalWake() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// watchNodes keeps a status stream open to each node until ctx ends.
// Each stream loop counts among its node's goroutines (nodeRuntime.busy).
func (c *Controller) watchNodes(ctx context.Context) {
	for _, n := range c.nodes {
		c.watchNode(ctx, n)
	}
}

// watchNode keeps n's status stream open until ctx ends, if its executor
// streams (executor.Watcher); one that does not is pulled alone.
func (c *Controller) watchNode(ctx context.Context, n *nodeRuntime) {
	w, ok := n.exec.(executor.Watcher)
	if n.tr == nil || !ok {
		return
	}
	ctx, n.stopStream = context.WithCancel(ctx)
	n.busy.Add(1)
	go func() {
		defer n.busy.Done()
		c.streamLoop(ctx, n, w)
	}()
}

// streamLoop opens n's stream whenever its wrapper is installed, and again
// after it drops.
func (c *Controller) streamLoop(ctx context.Context, n *nodeRuntime, w executor.Watcher) {
	pause := c.streamRetry
	for ctx.Err() == nil {
		inst := n.installed()
		if inst == nil {
			// The pull installs or checks the wrapper first: ask for one
			// (a failed pull drops the installation, and with a long
			// poll_interval no tick would come otherwise), then look
			// again as soon as a pull has checked it, or after the
			// pause, longer while the node stays down.
			c.signalWake()
			if !waitCtx(ctx, pause, n.checked) {
				return
			}
			pause = min(2*pause, streamRetryMax)
			continue
		}
		began := time.Now()
		err := c.runStream(ctx, n, w, inst)
		n.streamUp.Store(false)
		n.streamed.reset(time.Now())
		if ctx.Err() != nil {
			return
		}
		c.log.Info("status stream dropped; polling the node meanwhile", keyNode, n.cfg.Name, "err", err, "retry_in", pause)
		// Whatever the stream would have told since it broke, the pull
		// finds out now.
		c.signalWake()
		if time.Since(began) > streamStable {
			pause = c.streamRetry
		}
		if !sleepCtx(ctx, pause) {
			return
		}
		pause = min(2*pause, streamRetryMax)
	}
}

// runStream reads one stream of n until it ends or fails.
func (c *Controller) runStream(ctx context.Context, n *nodeRuntime, w executor.Watcher, inst *nodes.Installed) error {
	sctx, cancel := context.WithCancelCause(ctx)
	var watchdog sync.WaitGroup
	defer func() { cancel(nil); watchdog.Wait() }()
	var last atomic.Int64
	last.Store(time.Now().UnixNano())
	// Silent for four beats: dropped.
	silence := 4 * c.streamBeat
	watchdog.Add(1)
	go func() {
		defer watchdog.Done()
		t := time.NewTicker(c.streamBeat)
		defer t.Stop()
		for {
			select {
			case <-sctx.Done():
				return
			case now := <-t.C:
				if now.Sub(time.Unix(0, last.Load())) > silence {
					cancel(fmt.Errorf("no frame for %s", silence))
					return
				}
			}
		}
	}()
	var bad error
	err := w.Watch(sctx, inst, c.streamBeat, func(line []byte) bool {
		f, err := parseFrame(line, inst.Version)
		if err != nil {
			bad = err
			return false
		}
		last.Store(time.Now().UnixNano())
		switch f.Type {
		case wire.FrameHello:
			// Changes since the last pull were not streamed: the next
			// tick pulls the node in full, now.
			n.streamed.reset(time.Now())
			n.streamUp.Store(true)
			c.signalWake()
		case wire.FrameChange:
			n.streamed.add(f, time.Now())
			c.signalWake()
		}
		return true
	})
	switch {
	case bad != nil:
		return bad
	case context.Cause(sctx) != nil && ctx.Err() == nil:
		return context.Cause(sctx)
	}
	return err
}

// parseFrame reads one line of `watch`; anything else ends the stream.
func parseFrame(line []byte, version string) (wire.Frame, error) {
	var f wire.Frame
	if err := json.Unmarshal(line, &f); err != nil {
		return f, fmt.Errorf("%w: %q", errStreamFrame, truncate(string(line), 80))
	}
	switch f.Type {
	case wire.FrameHello:
		if f.Version != version {
			return f, fmt.Errorf("%w: hello from wrapper %q, want %q", errStreamFrame, truncate(f.Version, 80), version)
		}
	case wire.FrameChange, wire.FrameBeat:
	default:
		return f, fmt.Errorf("%w: type %q", errStreamFrame, truncate(f.Type, 80))
	}
	return f, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// waitCtx waits d or until ready receives; false when ctx ended first.
func waitCtx(ctx context.Context, d time.Duration, ready <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-ready:
		return true
	case <-t.C:
		return true
	}
}

// sleepCtx waits d; false when ctx ended first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
