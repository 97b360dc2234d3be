package controller

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/notify"
)

// refuseKill is a node whose wrapper refuses every kill.
type refuseKill struct{ nodes.Transport }

func (r refuseKill) Exec(ctx context.Context, argv []string, stdin []byte) (nodes.Result, error) {
	if len(argv) > 1 && argv[1] == "kill" {
		return nodes.Result{ExitCode: 1, Stderr: []byte("kill refused by the node")}, nil
	}
	return r.Transport.Exec(ctx, argv, stdin)
}

// TestCancelReportsOnlyAttemptsKilled: a cancel whose kill the node
// refuses says so, with the node's reason, and does not count the attempt
// as killed.
func TestCancelReportsOnlyAttemptsKilled(t *testing.T) {
	h := newHarness(t, "", shellProject(map[string]string{"S01-a.md": "sleep 30\n"}))
	defer killAll(t, h)
	h.tickUntil("S01 to run", func() bool { return h.task("S01").Status == domain.Running })
	real := h.ctl.nodes["local"].tr
	h.useTransport("local", refuseKill{real})
	msg, err := h.ctl.Cancel(context.Background(), "p", []string{"S01"})
	h.useTransport("local", real)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(msg, "killed 1") {
		t.Errorf("cancel says it killed an attempt the node refused to kill: %q", msg)
	}
	if !strings.Contains(msg, "attempt 1 of p/S01 on local not killed") || !strings.Contains(msg, "kill refused by the node") {
		t.Errorf("cancel does not say which attempt was not killed and why: %q", msg)
	}
}

// lockedBuffer is a log sink safe for concurrent writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestNoticeOutcomeNotRecordedIsLogged: when the event that records a
// notification's outcome cannot be written, the log says so.
func TestNoticeOutcomeNotRecordedIsLogged(t *testing.T) {
	h := newHarness(t, "", shellProject(map[string]string{"S01-a.md": "echo hi\n"}))
	var logs lockedBuffer
	h.ctl.log = slog.New(slog.NewTextHandler(&logs, nil))
	h.st.Close() // every write fails from here on
	h.ctl.noticeOutcome(notify.Outcome{Message: notify.Message{Event: notify.RunFinished, Project: "p"}, Via: "webhook", Tries: 1})
	if got := logs.String(); !strings.Contains(got, "record the outcome of a notification") || !strings.Contains(got, "run_finished sent by webhook") {
		t.Fatalf("the lost outcome is not logged: %q", got)
	}
}
