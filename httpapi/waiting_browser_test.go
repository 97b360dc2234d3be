package httpapi

import (
	"net/http/httptest"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/dashboard"
	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/internal/browsertest"
	"github.com/dispatch-tool/dispatch/store"
)

// TestDashboardShowsWaitingJob drives the dashboard in a real browser
// (chromium headless) over a home whose task S00001 runs on a Slurm node
// while its job waits in the queue, recorded as the controller records it
// (launch: running with the job's id; jobWaits: the attempt's waiting and
// the task's warning): the task list and the task's page show it
// "waiting" with Slurm's reason, never "running", the page a "Slurm job"
// card with the job's id and how long it has waited; S00002, not started,
// shows neither.
func TestDashboardShowsWaitingJob(t *testing.T) {
	const reason = "Slurm job 7 PENDING: ReqNodeNotAvail, UnavailableNodes:c01"
	h := newTestHome(t, 2)
	ctx := t.Context()
	err := h.st.Update(ctx, func(tx *store.Tx) error {
		n, err := tx.Claim(ctx, "p", "S00001", "local")
		if err != nil {
			return err
		}
		now := tx.Now()
		if _, _, err := tx.Transition(ctx, store.Change{Project: "p", Task: "S00001", From: domain.Claimed, To: domain.Running,
			Set: store.TaskPatch{StartedAt: new(now.Add(-time.Minute))}}); err != nil {
			return err
		}
		if err := tx.SetTask(ctx, "p", "S00001", store.TaskPatch{Warning: new(reason)}); err != nil {
			return err
		}
		return tx.SetAttempt(ctx, "p", "S00001", n, store.AttemptPatch{Status: new(domain.Running), StartedAt: new(now.Add(-time.Minute)),
			SlurmJob: new("7"), Waiting: new(reason)})
	})
	if err != nil {
		t.Fatal(err)
	}
	h.srv.UI = dashboard.Handler()
	ts := httptest.NewServer(h.srv.Handler())
	t.Cleanup(func() { ts.CloseClientConnections(); ts.Close() })
	b := browsertest.Start(t) // closed first: its event stream ends before the server's Close waits for it

	const row = `document.querySelector('#tasks tr[data-id="S00001"] td.status')`
	b.Navigate(t, ts.URL+"/?token="+h.srv.Token+"#/p/p")
	b.WaitFor(t, 20*time.Second, "S00001's row", row)
	if got := browsertest.Eval[string](t, b, row+`.querySelector('.state').textContent`); got != "waiting" {
		t.Errorf("S00001's row shows the state %q, want waiting", got)
	}
	if got := browsertest.Eval[string](t, b, row+`.querySelector('.text') ? `+row+`.querySelector('.text').textContent : ''`); got != reason {
		t.Errorf("S00001's row says %q, want Slurm's reason %q", got, reason)
	}
	if got := browsertest.Eval[string](t, b, `document.querySelector('#tasks tr[data-id="S00002"] td.status').textContent`); got != "pending" {
		t.Errorf("S00002's row shows %q, want pending alone", got)
	}

	// cardOf is the text of the task page's card named k ('' when none).
	cardOf := func(k string) string {
		return browsertest.Eval[string](t, b, `(c => c ? c.querySelector('.v').textContent : '')([...document.querySelectorAll('.card')].find(c => c.querySelector('.k').textContent === '`+k+`'))`)
	}
	browsertest.Eval[bool](t, b, `(location.hash = '#/p/p/t/S00001', true)`)
	b.WaitFor(t, 20*time.Second, "S00001's page", `[...document.querySelectorAll('.card .k')].some(k => k.textContent === 'Slurm job')`)
	if got := cardOf("State"); got != "waiting"+reason {
		t.Errorf("the State card says %q, want waiting with Slurm's reason", got)
	}
	if got := cardOf("Slurm job"); got != "7" {
		t.Errorf("the Slurm job card says %q, want 7", got)
	}
	if got := cardOf("Running for"); got != "" {
		t.Errorf("the page says it runs for %q while its job waits", got)
	}
	if got := cardOf("Waiting for"); got == "" {
		t.Error("the page has no Waiting for card")
	}
	// No log to follow yet: following it would fail on the node.
	if got := browsertest.Eval[string](t, b, `document.getElementById('log-state').textContent`); got != "attempt 1 waits in its queue: no log yet" {
		t.Errorf("the log says %q while the job waits", got)
	}
	browsertest.Eval[bool](t, b, `(location.hash = '#/p/p/t/S00002', true)`)
	b.WaitFor(t, 20*time.Second, "S00002's page", `document.getElementById('task-title') && document.getElementById('task-title').textContent === 'task 2'`)
	if got := cardOf("Slurm job"); got != "" {
		t.Errorf("S00002, never launched, has a Slurm job card %q", got)
	}
	b.NoProblems(t)
}
