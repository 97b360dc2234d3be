package controller

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/wire"
)

// statusCounting is the local transport counting its status Execs and its
// conversations; with refuse set, every conversation is with a command
// that answers as a wrapper without `status --serve` does (an error reply)
// and exits.
type statusCounting struct {
	*nodes.Local
	refuse         bool
	execs, convers atomic.Int32
	// last is the last conversation opened.
	last atomic.Pointer[nodes.Conversation]
}

func (s *statusCounting) Exec(ctx context.Context, argv []string, stdin []byte) (nodes.Result, error) {
	if len(argv) > 1 && argv[1] == "status" {
		s.execs.Add(1)
	}
	return s.Local.Exec(ctx, argv, stdin)
}

func (s *statusCounting) Converse(ctx context.Context, argv []string) (nodes.Conversation, error) {
	if len(argv) > 1 && argv[1] != "status" {
		return s.Local.Converse(ctx, argv) // the launch conversation
	}
	s.convers.Add(1)
	if s.refuse {
		argv = []string{"/bin/sh", "-c", `read -r l; echo '{"error":"status: flag provided but not defined: -serve","kind":"usage"}'; exit 1`}
	}
	conv, err := s.Local.Converse(ctx, argv)
	if err == nil {
		s.last.Store(&conv)
	}
	return conv, err
}

// TestPullOverConversation: a node's status calls go over one `status
// --serve` held open from one pull to the next, not one Exec each. A call
// that fails over it (its command gone) is made again with Exec, with the
// same answer, and the next pull opens a new conversation; a wrapper that
// does not answer a new conversation (an older one) is pulled with Exec.
func TestPullOverConversation(t *testing.T) {
	h := newHarness(t, "", shellProject(map[string]string{"S01-a.md": "sleep 60\n"}))
	t.Cleanup(func() { killAll(t, h) })
	n := h.ctl.nodes["local"]
	tr := &statusCounting{Local: nodes.NewLocal()}
	h.useTransport("local", tr)
	// `run` replies before the supervisor writes the first status.
	h.tickUntil("the task to run", func() bool {
		data, err := os.ReadFile(filepath.Join(h.work, "p", "tasks", "S01", "status.json"))
		return h.task("S01").Status == domain.Running && err == nil && strings.Contains(string(data), `"status":"running"`)
	})
	ctx := context.Background()
	pull := func(what string) {
		t.Helper()
		p := h.ctl.pullNode(ctx, n, []string{"p"}, h.ctl.liveOn.read(ctx, h.ctl.st, []string{"p"}, h.ctl.log))
		if p.err != nil {
			t.Fatalf("%s: %v", what, p.err)
		}
		if ts := p.tasks[taskKey("p", "S01")]; ts == nil || !ts.Alive || ts.Status == nil || ts.Status.Status != wire.StatusRunning {
			t.Fatalf("%s: S01 is %+v, want running", what, ts)
		}
	}
	if tr.execs.Load() != 0 || tr.convers.Load() != 1 {
		t.Fatalf("%d status Execs and %d conversations until S01 ran, want none and one", tr.execs.Load(), tr.convers.Load())
	}
	for i := range 3 {
		pull("a steady pull " + string(rune('1'+i)))
	}
	if tr.execs.Load() != 0 || tr.convers.Load() != 1 {
		t.Fatalf("%d status Execs and %d conversations after steady pulls, want none and one", tr.execs.Load(), tr.convers.Load())
	}
	(*tr.last.Load()).Close() // as when its session drops
	pull("the pull whose conversation is gone")
	if tr.execs.Load() != 1 {
		t.Fatalf("%d status Execs after a failed conversation, want the one that made its call again", tr.execs.Load())
	}
	pull("the pull after it")
	if tr.execs.Load() != 1 || tr.convers.Load() != 2 {
		t.Fatalf("%d status Execs and %d conversations, want 1 and a new one", tr.execs.Load(), tr.convers.Load())
	}

	tr.refuse = true
	n.exec.Close()
	for i := range 3 {
		pull("a pull of a wrapper without conversations " + string(rune('1'+i)))
	}
	if tr.execs.Load() != 4 || tr.convers.Load() != 3 {
		t.Fatalf("%d status Execs and %d conversations, want 4 (one a pull) and one refused", tr.execs.Load(), tr.convers.Load())
	}
}
