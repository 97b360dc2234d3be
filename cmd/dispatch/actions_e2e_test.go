package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/dispatch-tool/dispatch/control"
	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/internal/browsertest"
)

// TestDashboardActions (issue 37 item 2) clicks the dashboard's buttons in
// a real browser against `dispatch serve --http` running a project: Retry
// on a failed task's page reruns it; Cancel on a running task's page asks
// first (keeping it does nothing), then kills it; each action is an event
// saying it came from the dashboard.
func TestDashboardActions(t *testing.T) {
	b := browsertest.Start(t)
	dir := t.TempDir()
	marker, gate := filepath.Join(dir, "failed-once"), filepath.Join(dir, "go")
	home, _ := opsHome(t, map[string]map[string]string{"web": {
		"S01-flaky.md": fmt.Sprintf("---\nmax_retries: 0\n---\n# Fail the first time\nif [ -e '%s' ]; then echo fixed; else touch '%s'; exit 1; fi\n", marker, marker),
		"S02-wait.md":  fmt.Sprintf("# Wait for the test\nwhile [ ! -e '%s' ] && [ -d '%s' ]; do sleep 0.05; done\n", gate, dir),
	}})
	unsandboxed(t, home, "the tasks use files the test keeps outside their workspace")
	addr := freeAddr(t)
	startBackground(t, nil, "--home", home, "serve", "--http", addr)
	t.Cleanup(func() { _ = os.WriteFile(gate, nil, 0o644) })
	base := "http://" + addr
	pollUntil(t, 30*time.Second, "serve --http to answer", func() bool {
		r, err := http.Get(base + "/api/v1/projects")
		if err == nil {
			r.Body.Close()
		}
		return err == nil && r.StatusCode == http.StatusUnauthorized
	})
	token := strings.TrimSpace(readFile(t, filepath.Join(home, "http.token")))
	if r := runDispatch(t, nil, "--home", home, "start", "web", "--detach"); r.code != 0 {
		t.Fatalf("start web while serve runs: %s", r)
	}
	pollUntil(t, 30*time.Second, "S01 to fail and S02 to run", func() bool {
		return taskState(t, home, "web", "S01").Status == domain.Failed && taskState(t, home, "web", "S02").Status == domain.Running
	})
	click := func(sel string) {
		t.Helper()
		if _, err := chromedp.Run(b.Ctx, chromedp.Click(chromedp.CSS(sel))); err != nil {
			t.Fatalf("click %s: %v", sel, err)
		}
	}
	state := `(document.querySelector('#view .cards .card .v') || {}).textContent`

	b.Navigate(t, base+"/?token="+token+"#/p/web/t/S01")
	b.WaitFor(t, 30*time.Second, "S01's page with a Retry button", state+` === 'failed' && document.querySelector('#task-actions button[data-action=retry]')`)
	click(`#task-actions button[data-action=retry]`)
	b.WaitFor(t, 30*time.Second, "S01 rerun and completed", state+` === 'completed'`)
	if got := browsertest.Eval[string](t, b, `document.querySelector('#task-actions .action-result').textContent`); !strings.Contains(got, "web: S01 will run again") {
		t.Errorf("after Retry the page says %q", got)
	}

	browsertest.Eval[bool](t, b, `(location.hash = '#/p/web/t/S02', true)`)
	b.WaitFor(t, 30*time.Second, "S02's page with a Cancel button", state+` === 'running' && document.querySelector('#task-actions button[data-action=cancel]')`)
	click(`#task-actions button[data-action=cancel]`)
	b.WaitFor(t, 10*time.Second, "the confirmation", `document.querySelector('dialog#confirm[open]')`)
	if q := browsertest.Eval[string](t, b, `document.querySelector('dialog#confirm p').textContent`); !strings.Contains(q, "Cancel web/S02?") ||
		!strings.Contains(q, "killed") {
		t.Errorf("the confirmation asks %q", q)
	}
	click(`#confirm-no`)
	b.WaitFor(t, 10*time.Second, "the confirmation to close", `!document.querySelector('dialog#confirm')`)
	if s := taskState(t, home, "web", "S02").Status; s != domain.Running {
		t.Fatalf("S02 is %s after the operator kept it", s)
	}
	click(`#task-actions button[data-action=cancel]`)
	b.WaitFor(t, 10*time.Second, "the confirmation", `document.querySelector('dialog#confirm[open]')`)
	click(`#confirm-yes`)
	b.WaitFor(t, 30*time.Second, "S02 canceled", state+` === 'canceled'`)
	if s := taskState(t, home, "web", "S02").Status; s != domain.Canceled {
		t.Errorf("S02 is %s after Cancel", s)
	}
	r := runDispatch(t, nil, "--home", home, "events", "web")
	for _, want := range []string{"retry S01 by the operator from the dashboard, token http.token", "cancel S02 by the operator from the dashboard, token http.token"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("no event says %q:\n%s", want, r.stdout)
		}
	}
	b.NoProblems(t)
}

// TestServeHTTPActionsBesideAController: `serve --http` beside a `start
// --detach` controller hands an action to that controller over the
// control socket, as `dispatch cancel` does; `serve --http --read-only`
// refuses it (403, saying why) and changes nothing.
func TestServeHTTPActionsBesideAController(t *testing.T) {
	t.Parallel()
	gate := filepath.Join(t.TempDir(), "go")
	home, _ := opsHome(t, map[string]map[string]string{
		"web": {"S01-wait.md": fmt.Sprintf("while [ ! -e '%s' ]; do sleep 0.05; done\n", gate)},
	})
	unsandboxed(t, home, "S01 waits for a file the test writes outside its workspace")
	t.Cleanup(func() { _ = os.WriteFile(gate, nil, 0o644) })
	if r := runDispatch(t, nil, "--home", home, "start", "web", "--detach"); r.code != 0 {
		t.Fatalf("start --detach: %s", r)
	}
	pollUntil(t, 60*time.Second, "web/S01 to run", func() bool {
		return control.Running(home) && taskState(t, home, "web", "S01").Status == domain.Running
	})
	cancelS01 := func(addr string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/api/v1/projects/web/cancel", strings.NewReader(`{"ids": ["S01"]}`))
		req.Header.Set("Content-Type", "application/json")
		if tok, err := os.ReadFile(filepath.Join(home, "http.token")); err == nil {
			req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	serve := func(args ...string) (addr string, stop func()) {
		addr = freeAddr(t)
		ctx, cancel := context.WithTimeout(context.Background(), 2*cmdTimeout)
		cmd, _, _ := dispatchCmd(ctx, nil, append([]string{"--home", home, "serve", "--http", addr}, args...)...)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		stop = func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait(); cancel() }
		t.Cleanup(stop)
		pollUntil(t, 30*time.Second, "serve --http to answer beside the controller", func() bool {
			res, err := http.Get("http://" + addr + "/api/v1/controller")
			if err == nil {
				res.Body.Close()
			}
			return err == nil && res.StatusCode == http.StatusUnauthorized
		})
		return addr, stop
	}

	addr, stop := serve("--read-only")
	if code, body := cancelS01(addr); code != http.StatusForbidden || !strings.Contains(body, "--read-only") {
		t.Errorf("cancel through serve --http --read-only: %d %s", code, body)
	}
	stop()
	if s := taskState(t, home, "web", "S01").Status; s != domain.Running {
		t.Fatalf("S01 is %s after a refused cancel", s)
	}

	addr, _ = serve()
	if code, body := cancelS01(addr); code != http.StatusOK || !strings.Contains(body, "web: canceled S01") {
		t.Fatalf("cancel through serve --http beside the controller: %d %s", code, body)
	}
	if s := taskState(t, home, "web", "S01").Status; s != domain.Canceled {
		t.Errorf("S01 is %s after the API's cancel", s)
	}
	if r := runDispatch(t, nil, "--home", home, "events", "web"); !strings.Contains(r.stdout, "cancel S01 by the operator from the API, token http.token") {
		t.Errorf("no event says where the cancel came from:\n%s", r.stdout)
	}
}
