package dashboard

import (
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/internal/browsertest"
)

// TestDashboardShowsPreemptions: a task a more urgent task stopped shows
// its preemptions beside its attempt, in the task list and on its page,
// with the class of its wait; a task never preempted shows none.
func TestDashboardShowsPreemptions(t *testing.T) {
	b := browsertest.Start(t)
	api := newFakeAPI(3)
	api.preempted = map[string]int{"T00003": 1}
	srv := serveFake(t, api)
	b.Navigate(t, srv.URL+"/#/p/big")
	b.WaitFor(t, 10*time.Second, "the preempted task's row",
		`(r => r && r.querySelector('td.num').textContent === '1 (1 preempted)' && r.querySelector('td.title .error').textContent.startsWith('preempted: preempted on n1 by hot/S01'))(document.querySelector('tr[data-id="T00003"]'))`)
	if got := browsertest.Eval[string](t, b, `document.querySelector('tr[data-id="T00001"] td.num').textContent`); got != "1" {
		t.Errorf("a task never preempted shows attempt %q", got)
	}
	b.Navigate(t, srv.URL+"/#/p/big/t/T00003")
	b.WaitFor(t, 10*time.Second, "the task page's attempt card",
		`[...document.querySelectorAll('.card')].some(c => c.querySelector('.k').textContent === 'Attempt' && c.textContent.includes('1 (1 preempted)'))`)
	b.NoProblems(t)
}
