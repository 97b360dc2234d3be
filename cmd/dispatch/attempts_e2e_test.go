package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/internal/browsertest"
)

// TestDashboardAttemptsOfEveryRun runs a project twice (`start --fresh`)
// and reads a task's page in a real browser (chromium headless): while run
// 2 has not run the task, its page lists run 1's attempt rather than "not
// run yet"; after it, both attempts, newest first, each with its run, and
// the log picker reads either attempt's log (issue 32, item 10).
func TestDashboardAttemptsOfEveryRun(t *testing.T) {
	b := browsertest.Start(t)
	dir := t.TempDir()
	hold, marker := filepath.Join(dir, "hold"), filepath.Join(dir, "marker")
	home, _ := opsHome(t, map[string]map[string]string{"web": {
		"S01-say.md":   "# Say which run\nwhile [ -e '" + hold + "' ]; do sleep 0.05; done\necho \"says: $(cat '" + marker + "')\"\n",
		"S02-after.md": "---\ndepends_on: [S01]\n---\n# After S01\necho after\n",
	}})
	unsandboxed(t, home, "S01 reads and waits on files the test writes outside its workspace")
	writeFile(t, marker, "first run")
	if r := runDispatch(t, nil, "--home", home, "start", "web"); r.code != 0 {
		t.Fatalf("run 1 of web: %s", r)
	}

	writeFile(t, marker, "second run")
	writeFile(t, hold, "")
	api := startServeHTTP(t, home)
	t.Cleanup(func() { _ = os.Remove(hold) }) // before the kill of serve: let S01 end
	if r := runDispatch(t, nil, "--home", home, "start", "web", "--fresh", "--detach"); r.code != 0 {
		t.Fatalf("start web --fresh while serve runs: %s", r)
	}

	// rows is the attempts table as "attempt/run/state" rows, in order.
	const rows = `Array.from(document.querySelectorAll('#attempts tbody tr')).map(r => r.dataset.attempt + '/' + r.dataset.run + '/' + r.querySelector('td .state').textContent.trim()).join(' ')`
	b.Navigate(t, api.base+"/?token="+api.token+"#/p/web/t/S02")
	b.WaitFor(t, 30*time.Second, "S02's page in run 2, before it runs, to list run 1's attempt",
		`document.querySelector('#attempts') && `+rows+` === '1/1/completed'`)
	if txt := browsertest.Eval[string](t, b, `document.getElementById('view').textContent`); strings.Contains(txt, "not run yet") {
		t.Errorf("S02's page says \"not run yet\" with an attempt of run 1 listed: %q", txt)
	}

	browsertest.Eval[bool](t, b, `(location.hash = '#/p/web/t/S01', true)`)
	b.WaitFor(t, 30*time.Second, "S01's run 2 attempt running, above run 1's", rows+` === '2/2/running 1/1/completed'`)
	if err := os.Remove(hold); err != nil {
		t.Fatal(err)
	}
	b.WaitFor(t, 30*time.Second, "S01's attempts of both runs, newest first", rows+` === '2/2/completed 1/1/completed'`)
	b.WaitFor(t, 10*time.Second, "the newest attempt's log", `document.getElementById('log').textContent.includes('says: second run')`)
	pick := func(attempt string) {
		browsertest.Eval[bool](t, b, `(() => { const s = document.querySelector('select[aria-label=attempt]'); s.value = '`+attempt+`'; s.dispatchEvent(new Event('change')); return true; })()`)
	}
	if got := browsertest.Eval[string](t, b, `Array.from(document.querySelectorAll('select[aria-label=attempt] option')).map(o => o.textContent).join(', ')`); got != "newest attempt, attempt 2 (run 2), attempt 1 (run 1)" {
		t.Errorf("the log picker offers %q", got)
	}
	pick("1")
	b.WaitFor(t, 10*time.Second, "run 1's attempt's log", `document.getElementById('log').textContent.includes('says: first run')`)

	browsertest.Eval[bool](t, b, `(location.hash = '#/p/web/t/S02', true)`)
	b.WaitFor(t, 30*time.Second, "S02's attempts of both runs, newest first", rows+` === '2/2/completed 1/1/completed'`)
	b.NoProblems(t)
}
