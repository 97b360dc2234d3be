package main

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/internal/browsertest"
)

// freeAddr returns a loopback address with a port nobody listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestDashboardLive drives the dashboard of `dispatch serve --http` in a
// real browser (Debian's chromium, headless) while a project runs on the
// local node: the tasks appear, a task's change arrives without a reload, a
// task page follows a live log, and a title holding HTML is shown as text.
// With DISPATCH_SCREENSHOT=1 it saves the run page as docs/dashboard.png.
func TestDashboardLive(t *testing.T) {
	b := browsertest.Start(t)
	dir := t.TempDir()
	release, stop := filepath.Join(dir, "release"), filepath.Join(dir, "stop")
	home, _ := opsHome(t, map[string]map[string]string{"web": {
		"S01-wait.md":  fmt.Sprintf("# Wait for the test\nwhile [ ! -e '%s' ] && [ -d '%s' ]; do sleep 0.05; done\necho released\n", release, filepath.Dir(release)),
		"S02-html.md":  fmt.Sprintf("# <img src=x onerror=alert(1)>\nwhile [ ! -e '%s' ] && [ -d '%s' ]; do sleep 0.05; done\n", stop, filepath.Dir(stop)),
		"S03-log.md":   fmt.Sprintf("# Print a line every 200ms\ni=0\nwhile [ ! -e '%s' ] && [ -d '%s' ]; do i=$((i+1)); echo \"tick $i\"; sleep 0.2; done\n", stop, filepath.Dir(stop)),
		"S04-after.md": "---\ndepends_on: [S01]\n---\n# After the wait\necho after\n",
	}})
	unsandboxed(t, home, "the tasks wait for files the test writes outside their workspace")
	addr := freeAddr(t)
	startBackground(t, nil, "--home", home, "serve", "--http", addr)
	t.Cleanup(func() { // before the kill of serve: let the tasks end
		_ = os.WriteFile(release, nil, 0o644)
		_ = os.WriteFile(stop, nil, 0o644)
	})
	base := "http://" + addr
	pollUntil(t, 30*time.Second, "serve --http to answer", func() bool {
		r, err := http.Get(base + "/api/v1/projects")
		if err == nil {
			r.Body.Close()
		}
		return err == nil && r.StatusCode == http.StatusUnauthorized
	})
	token := strings.TrimSpace(readFile(t, filepath.Join(home, "http.token")))
	if r := runDispatch(t, nil, "--home", home, "start", "web", "--detach"); r.code != 0 || !strings.Contains(r.stdout, "handed to the running controller") {
		t.Fatalf("start web while serve runs: %s", r)
	}
	row := func(id string) string { return `document.querySelector('#tasks tr[data-id="` + id + `"]')` }
	status := func(id string) string { return row(id) + `.querySelector('td.status').textContent` }

	b.Navigate(t, base+"/?token="+token+"#/p/web")
	b.WaitFor(t, 30*time.Second, "the four tasks, S01 and S03 running",
		`['S01','S02','S03','S04'].every(id => `+row("'+id+'")+`) && `+status("S01")+` === 'running' && `+status("S03")+` === 'running'`)
	if got := browsertest.Eval[string](t, b, row("S02")+`.querySelector('td.title .text').textContent`); got != "<img src=x onerror=alert(1)>" {
		t.Errorf("S02's title shows as %q", got)
	}
	if n := browsertest.Eval[int](t, b, `document.querySelectorAll('img').length`); n != 0 {
		t.Errorf("the page has %d img elements: a title became HTML", n)
	}
	if strings.Contains(browsertest.Eval[string](t, b, `location.href`), token) {
		t.Error("the token stays in the address bar")
	}
	if os.Getenv("DISPATCH_SCREENSHOT") == "1" {
		b.WaitFor(t, 10*time.Second, "the project's summary", `document.querySelector('.cards')`)
		saveScreenshot(t, b)
	}

	browsertest.Eval[bool](t, b, `window.__sameDocument = true`)
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	b.WaitFor(t, 10*time.Second, "S01 and S04 to complete on screen", status("S01")+` === 'completed' && `+status("S04")+` === 'completed'`)

	browsertest.Eval[bool](t, b, `(location.hash = '#/p/web/t/S03', true)`)
	b.WaitFor(t, 10*time.Second, "S03's log", `/tick 3\n/.test(document.getElementById('log').textContent)`)
	seen := browsertest.Eval[string](t, b, `document.getElementById('log').textContent`)
	last := strings.Fields(seen[strings.LastIndex(seen, "tick "):])[1]
	n, _ := strconv.Atoi(last)
	b.WaitFor(t, 10*time.Second, "S03's log to grow", fmt.Sprintf(`document.getElementById('log').textContent.includes('tick %d\n')`, n+3))
	if err := os.WriteFile(stop, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	b.WaitFor(t, 10*time.Second, "S03 to end on its page", `document.getElementById('log-state').textContent.includes('ended')`)

	browsertest.Eval[bool](t, b, `(location.hash = '#/p/web/graph', true)`)
	b.WaitFor(t, 10*time.Second, "the graph", `document.querySelectorAll('svg.graph g[data-id]').length === 4`)
	if !browsertest.Eval[bool](t, b, `window.__sameDocument === true`) {
		t.Error("the page reloaded")
	}
	b.NoProblems(t)
}

// saveScreenshot writes the window to docs/dashboard.png (the README's
// picture), refusing one over 200 KB.
func saveScreenshot(t *testing.T, b *browsertest.Browser) {
	t.Helper()
	png := b.Screenshot(t)
	if len(png) > 200<<10 {
		t.Fatalf("the screenshot is %d KB; keep it under 200 KB", len(png)>>10)
	}
	if err := os.WriteFile(filepath.Join("..", "..", "docs", "dashboard.png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("saved docs/dashboard.png (%d KB)", len(png)>>10)
}
