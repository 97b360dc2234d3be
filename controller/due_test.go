package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/service"
)

// Issue 25: a wait ends when it is due, not at the next poll. Every test
// here runs the real loop (Run) on the real clock with poll_interval 30s,
// and measures the wait from the events it recorded: a wait that lasted
// until a poll would take 30 s, a due one takes the backoff or timeout it
// names plus a tick.

// dueLimit is the most a wait may exceed its due time here: far under the
// 30 s poll, far over a tick on a loaded machine.
const dueLimit = 10 * time.Second

// onTheRealClock makes the harness's controller and store use the real
// clock, with transports tr (local ones where nil).
func onTheRealClock(h *harness, tr map[string]nodes.Transport, daemon bool) {
	h.st.Now = time.Now
	all := map[string]nodes.Transport{}
	for _, n := range h.cfg.Nodes {
		all[n.Name] = tr[n.Name]
		if all[n.Name] == nil {
			all[n.Name] = nodes.NewLocal()
		}
	}
	opts := Options{Home: h.home, Config: h.cfg, Store: h.st, Transports: all, Wrappers: wrappers,
		Jitter: func() float64 { return 0 }}
	if daemon {
		opts.Between = (&service.Schedules{St: h.st, SpecsDir: filepath.Join(h.home, "specs"), Log: slog.New(slog.DiscardHandler), Now: time.Now}).Between
	}
	h.ctl = New(opts)
}

// runWhile runs the controller's loop until done says so (or limit).
func runWhile(t *testing.T, h *harness, limit time.Duration, done func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	err := h.ctl.Run(ctx, 0, func(TickResult) {
		if done() {
			cancel()
		}
	})
	if !done() {
		t.Fatalf("Run: %v before the awaited state; tasks: %s", err, h.dump())
	}
}

// eventAt returns when the first event of project matching kind and text
// (in its message) was recorded.
func eventAt(t *testing.T, h *harness, project, task, kind, text string) time.Time {
	t.Helper()
	evs, err := h.st.Events(context.Background(), project, 0, 100000)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		if (task == "" || e.Task == task) && e.Kind == kind && strings.Contains(e.Message, text) {
			return e.Time
		}
	}
	var all []string
	for _, e := range evs {
		all = append(all, fmt.Sprintf("%s %s %s: %s", e.Time.Format("15:04:05.000"), e.Task, e.Kind, e.Message))
	}
	t.Fatalf("no %s event of %s/%s saying %q in:\n%s", kind, project, task, text, strings.Join(all, "\n"))
	return time.Time{}
}

const dueYAML = `
controller:
  poll_interval: 30s
  retry_backoff: 1s
  retry_backoff_max: 1s
  node_offline_timeout: 2s
  ssh_connect_timeout: 1s
nodes:
  - name: local
    slots: 2
    work_dir: WORK
`

// TestRetryStartsWhenDueNotAtThePoll: a retry 1 s after a failure is
// claimed when its backoff ends; it used to wait for the next 30 s poll.
func TestRetryStartsWhenDueNotAtThePoll(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "failed-once")
	h := newHarness(t, unsandboxed(dueYAML, "the task leaves a marker outside its workspace for its retry"), shellProject(map[string]string{
		"S01-flaky.md": fmt.Sprintf("if [ -e '%s' ]; then echo ok; exit 0; fi\ntouch '%s'\nexit 3\n", marker, marker),
	}))
	onTheRealClock(h, nil, false)
	runWhile(t, h, time.Minute, func() bool { return h.task("S01").Status == domain.Completed })
	retry := eventAt(t, h, "p", "S01", "retry", "retry 1 of")
	var claim time.Time
	evs, _ := h.st.Events(context.Background(), "p", 0, 1000)
	for _, e := range evs {
		if e.Task == "S01" && e.Kind == "claim" && e.Attempt == 2 {
			claim = e.Time
		}
	}
	t.Logf("retry decided at %s, claimed %s later (backoff 1s, poll 30s)", retry.Format("15:04:05.000"), claim.Sub(retry))
	if wait := claim.Sub(retry); wait < time.Second || wait > time.Second+dueLimit {
		t.Fatalf("retry due 1s after %s was claimed %s later (poll_interval 30s)", retry.Format("15:04:05.000"), wait)
	}
}

// switchable is a node transport that can be taken down: every call then
// fails at once, as with a node whose sshd is stopped.
type switchable struct {
	nodes.Transport
	down atomic.Bool
}

var errNodeDown = errors.New("connection refused (node down in the test)")

func (s *switchable) Exec(ctx context.Context, argv []string, stdin []byte) (nodes.Result, error) {
	if s.down.Load() {
		return nodes.Result{}, errNodeDown
	}
	return s.Transport.Exec(ctx, argv, stdin)
}

func (s *switchable) Stream(ctx context.Context, argv []string, onLine func([]byte) bool) error {
	if s.down.Load() {
		return errNodeDown
	}
	return s.Transport.Stream(ctx, argv, func(line []byte) bool { return !s.down.Load() && onLine(line) })
}

// TestLostNodeRequeuesAtOnceWithoutARetry: when a node goes down mid-run,
// its task is requeued as soon as node_offline_timeout has passed, without
// using a retry (max_retries: 0), and runs on the other node. It used to
// use a retry and wait its backoff plus a poll.
func TestLostNodeRequeuesAtOnceWithoutARetry(t *testing.T) {
	stop := filepath.Join(t.TempDir(), "stop")
	yaml := strings.Replace(dueYAML, `nodes:
  - name: local
    slots: 2
    work_dir: WORK
`, `nodes:
  - name: n1
    slots: 1
    work_dir: WORK/n1
  - name: n2
    slots: 1
    work_dir: WORK/n2
`, 1)
	// On n1 a task waits (until the test ends); on n2 it is done at once.
	body := fmt.Sprintf("---\nmax_retries: 0\n---\nif [ \"$DISPATCH_NODE\" = n1 ]; then while [ ! -e '%s' ]; do sleep 0.1; done; touch '%s.seen'; fi\necho done\n", stop, stop)
	h := newHarness(t, unsandboxed(yaml, "the task on n1 waits for a file the test writes outside its workspace"), shellProject(map[string]string{"S01-a.md": body, "S02-b.md": body}))
	n1 := &switchable{Transport: nodes.NewLocal()}
	onTheRealClock(h, map[string]nodes.Transport{"n1": n1}, false)
	t.Cleanup(func() {
		// The attempt left on n1 ends before the test's files go.
		if err := os.WriteFile(stop, nil, 0o644); err != nil {
			t.Error(err)
			return
		}
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			if _, err := os.Stat(stop + ".seen"); err == nil {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Error("the attempt left on n1 did not end")
	})
	var onN1 string
	runWhile(t, h, time.Minute, func() bool {
		for _, id := range []string{"S01", "S02"} {
			if tk := h.task(id); tk.Node == "n1" && tk.Status == domain.Running && onN1 == "" {
				onN1 = id
				n1.down.Store(true)
			}
		}
		return onN1 != "" && h.task(onN1).Status == domain.Completed
	})
	tk := h.task(onN1)
	if tk.Node != "n2" || tk.RetriesUsed != 0 || tk.LostRetries != 1 {
		t.Fatalf("%s: node %s, retries used %d, lost requeues %d; want n2, 0, 1", onN1, tk.Node, tk.RetriesUsed, tk.LostRetries)
	}
	lost := eventAt(t, h, "p", onN1, "retry", "lost with its node")
	var down, claimed time.Time
	evs, _ := h.st.Events(context.Background(), "p", 0, 1000)
	for _, e := range evs {
		if e.Task == onN1 && e.Kind == "status" && e.ToStatus == string(domain.Running) && down.IsZero() {
			down = e.Time // n1 went down right after this was seen
		}
		if e.Task == onN1 && e.Kind == "claim" && e.Attempt == 2 {
			claimed = e.Time
		}
	}
	t.Logf("node down after %s; lost and requeued %s later (node_offline_timeout 2s); claimed on n2 %s after that",
		down.Format("15:04:05.000"), lost.Sub(down), claimed.Sub(lost))
	// Offline by 2 s after it went down; the requeue and the claim at once.
	if wait := lost.Sub(down); wait > 2*time.Second+dueLimit {
		t.Fatalf("%s was lost %s after its node went down (node_offline_timeout 2s, poll 30s)", onN1, wait)
	}
	if wait := claimed.Sub(lost); wait < 0 || wait > dueLimit {
		t.Fatalf("%s was claimed again %s after it was lost", onN1, wait)
	}
}

// TestScheduledRunIsClaimedAtOnce: the tasks of a run the daemon begins
// are claimed by the tick right after; the loop used to sleep a whole poll
// first, so the next occurrence found the run still going and skipped it.
func TestScheduledRunIsClaimedAtOnce(t *testing.T) {
	h := newHarness(t, dueYAML, shellProject(map[string]string{"S01-a.md": "echo a\n"}))
	ctx := context.Background()
	h.tickUntil("p to finish", func() bool { p, _ := h.st.Project(ctx, "p"); return p.State == domain.ProjectDone })
	q := filepath.Join(h.home, "specs", "q")
	if err := os.MkdirAll(q, 0o755); err != nil {
		t.Fatal(err)
	}
	// Due in a few seconds: the loop is settled (its node streams open
	// and quiet) when the run begins.
	at := time.Now().Add(4 * time.Second).Format(time.RFC3339)
	for name, text := range map[string]string{
		"project.yaml": "tool: shell\nintegration: false\nschedule: {at: \"" + at + "\"}\n",
		"S01-a.md":     "echo a\n",
	} {
		if err := os.WriteFile(filepath.Join(q, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	onTheRealClock(h, nil, true)
	runWhile(t, h, time.Minute, func() bool {
		p, err := h.st.Project(ctx, "q")
		return err == nil && p.State == domain.ProjectDone
	})
	began := eventAt(t, h, "q", "", service.ScheduleEvent, "starting a run")
	claimed := eventAt(t, h, "q", "S01", "claim", "")
	t.Logf("scheduled run began at %s; its task claimed %s later (poll 30s)", began.Format("15:04:05.000"), claimed.Sub(began))
	if wait := claimed.Sub(began); wait > dueLimit {
		t.Fatalf("the scheduled run began at %s; its task was claimed %s later (poll 30s)", began.Format("15:04:05.000"), wait)
	}
}
