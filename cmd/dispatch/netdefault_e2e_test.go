package main

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// countingServer is an HTTP server on the host's 127.0.0.1 that counts
// the connections it accepted.
func countingServer(t *testing.T, body string) (srv *httptest.Server, conns *atomic.Int32) {
	t.Helper()
	conns = new(atomic.Int32)
	srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, body)
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, conns
}

// TestAgentNetworkDefaultThroughDispatch (issue 32 item 8): on a local
// node with the default sandbox: auto, where bwrap works, a (fake) claude
// whose api_mode points ANTHROPIC_BASE_URL at a fake provider on loopback
// reaches that provider but not another loopback listener: the listener
// sees no connection, the attempt fails and report.md and status name the
// refused destination with the line to add. With network: open in
// project.yaml the same agent reaches the listener; a shell task with no
// network setting does too.
func TestAgentNetworkDefaultThroughDispatch(t *testing.T) {
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Fatalf("this test needs bubblewrap (make test installs it): %v", err)
	}
	provider, providerConns := countingServer(t, "hello from the provider\n")
	other, otherConns := countingServer(t, "loot\n")
	otherAddr := strings.TrimPrefix(other.URL, "http://")
	// The tool lives outside /tmp (the sandbox's /tmp is the attempt's own).
	bin, err := os.MkdirTemp("/var/tmp", "dispatch-netdefault-bin-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(bin) })
	fake := fmt.Sprintf(`#!/bin/sh
cat > /dev/null
curl -sf -m 20 -o provider.txt "$ANTHROPIC_BASE_URL/v1/messages" || echo "provider: curl exit $?" > provider.txt
if curl -sf -m 20 -o /dev/null %s/steal; then echo reached > other.txt; exit 0; fi
echo "could not reach %s" >&2
exit 1
`, other.URL, otherAddr)
	writeFile(t, filepath.Join(bin, "claude"), fake)
	if err := os.Chmod(filepath.Join(bin, "claude"), 0o755); err != nil {
		t.Fatal(err)
	}
	run := func(project, spec string) (home string, r result) {
		t.Helper()
		home = t.TempDir()
		work := filepath.Join(t.TempDir(), "work")
		writeFile(t, filepath.Join(home, "nodes.yaml"), testController+fmt.Sprintf(`nodes:
  - name: local
    ssh: null
    slots: 1
    work_dir: %s
    tool: claude
    api_mode: m
api_modes:
  m:
    env:
      ANTHROPIC_BASE_URL: %s
      PATH: %s:/usr/local/bin:/usr/bin:/bin
`, work, provider.URL, bin))
		writeFile(t, filepath.Join(home, "specs", "p", "project.yaml"), "integration: false\nmax_retries: 0\n"+project)
		writeFile(t, filepath.Join(home, "specs", "p", "S01-net.md"), spec)
		return home, runDispatch(t, nil, "--home", home, "start", "p")
	}

	home, r := run("", "# Fetch\nDo it.\n")
	out := filepath.Join(home, "runs", "p", "S01", "output")
	if r.code == 0 {
		t.Errorf("start: the agent reached %s by default: %s", otherAddr, r)
	}
	if got := readFile(t, filepath.Join(out, "provider.txt")); got != "hello from the provider\n" || providerConns.Load() == 0 {
		t.Errorf("the agent did not reach its provider: provider.txt %q, %d connections\n%s", got, providerConns.Load(),
			tailOf(filepath.Join(home, "runs", "p", "S01", "task.log")))
	}
	if n := otherConns.Load(); n != 0 {
		t.Errorf("the other listener accepted %d connections from the sandboxed agent", n)
	}
	line := fmt.Sprintf(`network: {allow: ["%s"]}`, otherAddr)
	if md := readFile(t, filepath.Join(home, "runs", "p", "report.md")); !strings.Contains(md, line) || !strings.Contains(md, "refused "+otherAddr) {
		t.Errorf("report.md does not name the refused %s with the line %q:\n%s", otherAddr, line, md)
	}
	if s, _ := getStatus(t, home, "p"); !strings.Contains(s.task(t, "S01").Error, line) {
		t.Errorf("status error %q lacks the line %q", s.task(t, "S01").Error, line)
	}

	// network: open on the project: the same agent reaches the listener.
	home, r = run("network: open\n", "# Fetch\nDo it.\n")
	if r.code != 0 || otherConns.Load() == 0 {
		t.Errorf("with network: open the agent did not reach %s (%d connections): %s\n%s", otherAddr, otherConns.Load(), r,
			tailOf(filepath.Join(home, "runs", "p", "S01", "task.log")))
	}

	// A shell task keeps the node's network.
	before := otherConns.Load()
	home, r = run("tool: shell\n", fmt.Sprintf("# Fetch\ncurl -sf -m 20 -o got.txt %s/x\n", other.URL))
	if r.code != 0 || otherConns.Load() == before {
		t.Errorf("the shell task did not reach %s: %s\n%s", otherAddr, r, tailOf(filepath.Join(home, "runs", "p", "S01", "task.log")))
	}
}

// TestInitRegistryAllowList: `dispatch init` writes the usual package
// registries as an allow list in nodes.yaml, commented out so the user
// opts in; uncommented as it is, it is valid and is the node's network:
// the example's tasks run with it (launch.json's network_allow).
func TestInitRegistryAllowList(t *testing.T) {
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Fatalf("this test needs bubblewrap (make test installs it): %v", err)
	}
	dir := filepath.Join(t.TempDir(), "home")
	if r := runDispatch(t, nil, "init", dir); r.code != 0 {
		t.Fatalf("init: %s", r)
	}
	cfg := readFile(t, filepath.Join(dir, "nodes.yaml"))
	var opened []string
	commented := 0
	for _, l := range strings.Split(cfg, "\n") {
		if strings.HasPrefix(l, "    # network:") || strings.HasPrefix(l, "    #   ") {
			commented++
			l = "    " + strings.TrimPrefix(l, "    # ")
		}
		opened = append(opened, l)
	}
	for _, want := range []string{"registry.npmjs.org:443", "pypi.org:443", "proxy.golang.org:443", "index.crates.io:443", "github.com:443"} {
		if !strings.Contains(cfg, "#     - "+want) {
			t.Errorf("nodes.yaml lacks the commented entry %s:\n%s", want, cfg)
		}
	}
	if commented < 10 {
		t.Fatalf("nodes.yaml has %d commented lines of the allow list:\n%s", commented, cfg)
	}
	work := filepath.Join(t.TempDir(), "w")
	writeFile(t, filepath.Join(dir, "nodes.yaml"), strings.Replace(strings.Join(opened, "\n"), "~/.dispatch/work", work, 1))
	if r := runDispatch(t, nil, "--home", dir, "start", "example"); r.code != 0 {
		t.Fatalf("start example with the registries' allow list: %s\n%s", r, readFile(t, filepath.Join(dir, "nodes.yaml")))
	}
	launch := readFile(t, filepath.Join(work, "example", "tasks", "S01", "launch.json"))
	for _, want := range []string{`"network":"allow"`, `"registry.npmjs.org:443"`, `"*.githubusercontent.com:443"`} {
		if !strings.Contains(strings.ReplaceAll(launch, " ", ""), want) {
			t.Errorf("launch.json lacks %s: %s", want, launch)
		}
	}
}
