package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// freeLoopbackPort is a port on 127.0.0.1 nothing listened on a moment ago.
func freeLoopbackPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// apiClient calls a serve --http of a home.
type apiClient struct {
	base, token string
}

func (a apiClient) get(t *testing.T, path string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, a.base+path, nil)
	if a.token != "" {
		req.Header.Set("Authorization", "Bearer "+a.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, []byte(err.Error())
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// stream opens an SSE endpoint; its lines come on the channel.
func (a apiClient) stream(t *testing.T, path string) <-chan string {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, a.base+path, nil)
	req.Header.Set("Authorization", "Bearer "+a.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET %s: %v %v", path, resp, err)
	}
	lines := make(chan string, 1000)
	go func() {
		defer resp.Body.Close()
		defer close(lines)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	return lines
}

// startServeHTTP runs `dispatch serve --http` on home until the test ends.
func startServeHTTP(t *testing.T, home string) apiClient {
	t.Helper()
	port := freeLoopbackPort(t)
	ctx, cancel := context.WithCancel(context.Background())
	cmd, stdout, stderr := dispatchCmd(ctx, nil, "--home", home, "serve", "--http", fmt.Sprintf("127.0.0.1:%d", port))
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(time.Minute):
			cmd.Process.Kill()
			<-done
			t.Errorf("serve --http did not end on SIGTERM:\n%s\n%s", stdout, stderr)
		}
	})
	a := apiClient{base: fmt.Sprintf("http://127.0.0.1:%d", port)}
	deadline := time.Now().Add(time.Minute)
	for {
		if b, err := os.ReadFile(filepath.Join(home, "http.token")); err == nil && len(b) > 0 {
			a.token = strings.TrimSpace(string(b))
			if code, _ := a.get(t, "/api/v1/projects"); code == 200 {
				return a
			}
		}
		select {
		case err := <-done:
			t.Fatalf("serve --http ended: %v\n%s\n%s", err, stdout, stderr)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("serve --http did not answer")
		}
	}
}

// jsonValue parses b, dropping the keys whose values change between two
// reads of a live home (a node's load, the report's time).
func jsonValue(t *testing.T, what string, b []byte) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s: %v\n%s", what, err, b)
	}
	var strip func(any)
	strip = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for _, k := range []string{"generated_at", "last_seen", "rtt_ms", "load1", "mem_available_bytes", "disk_free_bytes"} {
				delete(x, k)
			}
			for _, e := range x {
				strip(e)
			}
		case []any:
			for _, e := range x {
				strip(e)
			}
		}
	}
	strip(v)
	return v
}

// TestServeHTTP: serve --http serves the CLI's JSON, the event stream and
// a live log of a real project on the local node, only with the token.
func TestServeHTTP(t *testing.T) {
	t.Parallel()
	flag := filepath.Join(t.TempDir(), "go")
	home, _ := opsHome(t, map[string]map[string]string{
		"web": {
			"S01-a.md":    "echo a > a.txt\n",
			"S02-slow.md": fmt.Sprintf("for i in 1 2 3; do echo line $i; done\nwhile [ ! -e %s ] && [ -d %s ]; do sleep 0.05; done\necho finished > s.txt\n", flag, filepath.Dir(flag)),
			"S03-b.md":    "---\ndepends_on: [S01]\n---\necho b > b.txt\n",
		},
	})
	// The task waits for a file of the test's: outside a sandbox.
	writeFile(t, filepath.Join(home, "specs", "web", "project.yaml"), "tool: shell\nintegration: false\nsandbox: off\n")
	api := startServeHTTP(t, home)
	if fi, err := os.Stat(filepath.Join(home, "http.token")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("http.token: %v %v", fi, err)
	}
	if code, _ := (apiClient{base: api.base}).get(t, "/api/v1/projects"); code != 401 {
		t.Fatalf("without the token: %d", code)
	}
	events := api.stream(t, "/api/v1/events?project=web")
	if r := runDispatch(t, nil, "--home", home, "start", "web", "--detach"); r.code != 0 {
		t.Fatalf("start: %s", r)
	}
	// The stream tells what happens as it is recorded.
	sawRunning := false
	for !sawRunning {
		select {
		case l, ok := <-events:
			if !ok {
				t.Fatal("the event stream ended")
			}
			sawRunning = strings.HasPrefix(l, "data: ") && strings.Contains(l, `"task":"S02"`) && strings.Contains(l, `"to":"running"`)
		case <-time.After(time.Minute):
			t.Fatal("no event said S02 runs")
		}
	}
	// Its log, followed while it runs.
	logLines := api.stream(t, "/api/v1/projects/web/tasks/S02/log?follow=1")
	var got strings.Builder
	for !strings.Contains(got.String(), "line 3") {
		select {
		case l := <-logLines:
			if v, ok := strings.CutPrefix(l, "data: "); ok {
				var c struct{ Text string }
				json.Unmarshal([]byte(v), &c)
				got.WriteString(c.Text)
			}
		case <-time.After(time.Minute):
			t.Fatalf("the followed log did not show line 3: %q", got.String())
		}
	}
	if err := os.WriteFile(flag, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	ended := false
	for l := range logLines {
		ended = ended || l == "event: end"
	}
	if !ended {
		t.Error("the followed log did not end with its attempt")
	}
	waitSummary(t, api, "web", "done")
	compareWithCLI(t, api, home)
	if code, b := api.get(t, "/api/v1/projects/web/tasks/S02/log?tail=2&follow=0"); code != 200 || string(b) != "line 2\nline 3\n" {
		t.Errorf("log tail=2: %d %q", code, b)
	}
}

func waitSummary(t *testing.T, api apiClient, project, state string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		code, b := api.get(t, "/api/v1/projects/"+project+"/summary")
		var s struct{ State string }
		if code == 200 && json.Unmarshal(b, &s) == nil && s.State == state {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not reach %s: %d %s", project, state, code, b)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// compareWithCLI: every endpoint that has a CLI twin answers its JSON.
func compareWithCLI(t *testing.T, api apiClient, home string) {
	t.Helper()
	for path, args := range map[string][]string{
		"/api/v1/projects/web":               {"status", "web", "--json"},
		"/api/v1/projects/web?run=1":         {"status", "web", "--json", "--run", "1"},
		"/api/v1/projects/web/report":        {"report", "web", "--format", "json"},
		"/api/v1/projects/web/runs":          {"runs", "web", "--json"},
		"/api/v1/nodes":                      {"nodes", "--json"},
		"/api/v1/schedules":                  {"schedule", "--json"},
		"/api/v1/projects/web/tasks/S02/log": {"logs", "web", "S02"},
	} {
		code, b := api.get(t, path)
		r := runDispatch(t, nil, append([]string{"--home", home}, args...)...)
		if code != 200 || r.code != 0 {
			t.Errorf("%s: %d %s\n%s", path, code, b, r)
			continue
		}
		if strings.HasSuffix(path, "/log") {
			if string(b) != r.stdout {
				t.Errorf("%s = %q, dispatch logs = %q", path, b, r.stdout)
			}
			continue
		}
		api, cli := jsonValue(t, path, b), jsonValue(t, strings.Join(args, " "), []byte(r.stdout))
		if fmt.Sprint(api) != fmt.Sprint(cli) {
			t.Errorf("%s differs from dispatch %s:\nAPI %s\nCLI %s", path, strings.Join(args, " "), b, r.stdout)
		}
	}
}

// TestServeHTTPRefusesExposure: an address other machines reach is refused
// without TLS (exit 2, with the ways out), and nothing listens.
func TestServeHTTPRefusesExposure(t *testing.T) {
	t.Parallel()
	home, _ := opsHome(t, nil)
	port := freeLoopbackPort(t)
	for _, args := range [][]string{
		{"serve", "--http", fmt.Sprintf("0.0.0.0:%d", port)},
		{"serve", fmt.Sprintf("--http=:%d", port)},
		{"serve", "--detach", "--http", fmt.Sprintf("0.0.0.0:%d", port)},
	} {
		r := runDispatch(t, nil, append([]string{"--home", home}, args...)...)
		if r.code != 2 || !strings.Contains(r.stderr, "refusing") || !strings.Contains(r.stderr, "--tls-cert") || !strings.Contains(r.stderr, "ssh -L") {
			t.Errorf("%v: %s", args, r)
		}
	}
	for _, args := range [][]string{
		{"serve", "--tls-cert", "c.pem"},
		{"serve", "--http", "--tls-cert", "c.pem"},
		{"serve", "--http", "nohost"},
		{"serve", "extra"},
	} {
		if r := runDispatch(t, nil, append([]string{"--home", home}, args...)...); r.code != 2 {
			t.Errorf("%v: %s", args, r)
		}
	}
	if _, err := os.Stat(filepath.Join(home, "http.token")); err == nil {
		t.Error("a refused serve made a token")
	}
}

// TestServeDetachHTTP: serve --detach --http says where the dashboard and
// its token are (the link with the token only on a terminal), and the
// daemon serves it; the token is in neither the daemon's log nor its
// command line.
func TestServeDetachHTTP(t *testing.T) {
	t.Parallel()
	home, _ := opsHome(t, nil)
	port := freeLoopbackPort(t)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	r := runDispatch(t, nil, "--home", home, "serve", "--detach", "--http", addr)
	t.Cleanup(func() { runDispatch(t, nil, "--home", home, "serve", "--stop") })
	tok, err := os.ReadFile(filepath.Join(home, "http.token"))
	if err != nil {
		t.Fatal(err)
	}
	token := strings.TrimSpace(string(tok))
	if r.code != 0 || !strings.Contains(r.stdout, "http://"+addr+"/") || strings.Contains(r.stdout, token) || !strings.Contains(r.stdout, "http.token") {
		t.Fatalf("serve --detach --http: %s", r)
	}
	api := apiClient{base: "http://" + addr, token: token}
	if code, b := api.get(t, "/api/v1/projects"); code != 200 || !strings.Contains(string(b), `"projects": []`) {
		t.Fatalf("the daemon's API: %d %s", code, b)
	}
	pid, _ := os.ReadFile(filepath.Join(home, "dispatch.pid"))
	cmdline, _ := os.ReadFile("/proc/" + strings.TrimSpace(string(pid)) + "/cmdline")
	if len(cmdline) == 0 || strings.Contains(string(cmdline), token) || !strings.Contains(string(cmdline), "--http="+addr) {
		t.Errorf("the daemon's command line: %q", cmdline)
	}
	if log := readFile(t, filepath.Join(home, "dispatch.log")); strings.Contains(log, token) || !strings.Contains(log, "http.token") {
		t.Errorf("the daemon's log:\n%s", log)
	}
	if r := runDispatch(t, nil, "--home", home, "serve", "--stop"); r.code != 0 {
		t.Fatalf("serve --stop: %s", r)
	}
	if code, _ := api.get(t, "/api/v1/projects"); code != 0 {
		t.Errorf("the API still answers after serve --stop: %d", code)
	}
}

// TestServeHTTPTokenNotInServiceOutput: a serve --http whose output is not
// a terminal — a systemd unit's (the journal) or a launchd agent's
// (dispatch.log) as serve --install writes them, a script's redirect, the
// parent of serve --detach in a pipe — says where the token is, never the
// token itself: whoever reads that journal or file would hold the API.
func TestServeHTTPTokenNotInServiceOutput(t *testing.T) {
	t.Parallel()
	home, _ := opsHome(t, nil)
	out := filepath.Join(t.TempDir(), "service.log")
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	port := freeLoopbackPort(t)
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	cmd, _, _ := dispatchCmd(ctx, nil, "--home", home, "serve", "--http", fmt.Sprintf("127.0.0.1:%d", port))
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	a := apiClient{base: fmt.Sprintf("http://127.0.0.1:%d", port)}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		if b, err := os.ReadFile(filepath.Join(home, "http.token")); err == nil && len(b) > 0 {
			a.token = strings.TrimSpace(string(b))
			if code, _ := a.get(t, "/api/v1/projects"); code == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("serve --http did not answer")
		}
	}
	cmd.Process.Signal(syscall.SIGTERM)
	cmd.Wait()
	said := readFile(t, out)
	if strings.Contains(said, a.token) || !strings.Contains(said, "http.token") {
		t.Errorf("serve --http with its output in a file wrote:\n%s", said)
	}
	// The parent of a detached serve, its output piped.
	port = freeLoopbackPort(t)
	r := runDispatch(t, nil, "--home", home, "serve", "--detach", "--http", fmt.Sprintf("127.0.0.1:%d", port))
	defer runDispatch(t, nil, "--home", home, "serve", "--stop")
	if r.code != 0 || strings.Contains(r.stdout+r.stderr, a.token) || !strings.Contains(r.stdout, "http.token") {
		t.Errorf("serve --detach --http in a pipe: %s", r)
	}
	runDispatch(t, nil, "--home", home, "serve", "--stop")
	// On the operator's terminal, the link with the token.
	port = freeLoopbackPort(t)
	if said := onTerminal(t, "--home", home, "serve", "--detach", "--http", fmt.Sprintf("127.0.0.1:%d", port)); !strings.Contains(said, "?token="+a.token) {
		t.Errorf("serve --detach --http on a terminal:\n%s", said)
	}
}

// TestServeHTTPConnectionFlood: anyone who can connect to the port (another
// user of the machine) opens thousands of connections without the token
// and holds them. The daemon accepts a bounded number: its controller
// keeps file descriptors to read specs and answer dispatch start (it used
// to run out of them: "too many open files", start timed out).
func TestServeHTTPConnectionFlood(t *testing.T) {
	home, _ := opsHome(t, map[string]map[string]string{"web": {"S01-a.md": "echo a\n"}})
	api := startServeHTTP(t, home)
	pid, err := os.ReadFile(filepath.Join(home, "dispatch.lock"))
	if err != nil {
		t.Fatal(err)
	}
	var p int
	fmt.Sscanf(string(pid), "pid %d", &p)
	if p == 0 {
		t.Fatalf("no pid in dispatch.lock: %q", pid)
	}
	fds := func() int {
		es, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", p))
		return len(es)
	}
	before := fds()
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	host := strings.TrimPrefix(api.base, "http://")
	for range 3000 {
		c, err := net.DialTimeout("tcp", host, 5*time.Second)
		if err != nil {
			break
		}
		c.Write([]byte("GET /api/v1/projects HTTP/1.1\r\nHost: x\r\n\r\n"))
		conns = append(conns, c)
	}
	time.Sleep(time.Second)
	if n := fds(); n > before+600 {
		t.Errorf("serve --http holds %d descriptors with %d connections open (%d before)", n, len(conns), before)
	}
	if r := runDispatch(t, nil, "--home", home, "start", "web", "--detach"); r.code != 0 {
		t.Errorf("start during the flood: %s", r)
	}
}

// TestServeOutlivesRunningOutOfDescriptors: a daemon that runs out of file
// descriptors for a moment (here: a low limit and connections to its HTTP
// port) takes commands again once they are back: its control socket kept
// no accept error for good (dispatch start, serve --stop and every
// operator command used to time out on it until a restart).
func TestServeOutlivesRunningOutOfDescriptors(t *testing.T) {
	home, _ := opsHome(t, nil)
	port := freeLoopbackPort(t)
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", `ulimit -n 120 && exec "$0" "$@"`,
		dispatchBin, "--home", home, "serve", "--http", fmt.Sprintf("127.0.0.1:%d", port))
	cmd.Env = baseEnv
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() {
		cmd.Process.Kill()
		<-done
	}()
	a := apiClient{base: fmt.Sprintf("http://127.0.0.1:%d", port)}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		if b, err := os.ReadFile(filepath.Join(home, "http.token")); err == nil && len(b) > 0 {
			a.token = strings.TrimSpace(string(b))
			if code, _ := a.get(t, "/api/v1/projects"); code == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("serve --http did not answer")
		}
	}
	// Connections keep coming while commands try the control socket:
	// the HTTP server takes every descriptor that frees.
	var conns []net.Conn
	dial := func(n int) {
		for range n {
			c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 5*time.Second)
			if err != nil {
				return
			}
			c.Write([]byte("GET /api/v1/projects HTTP/1.1\r\nHost: x\r\n\r\n"))
			conns = append(conns, c)
		}
	}
	dial(150)
	for range 3 {
		dial(30)
		time.Sleep(200 * time.Millisecond)
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		c, _, _ := dispatchCmd(sctx, nil, "--home", home, "schedule")
		c.Run()
		scancel()
	}
	for _, c := range conns {
		c.Close()
	}
	time.Sleep(time.Second)
	if r := runDispatch(t, nil, "--home", home, "serve", "--stop"); r.code != 0 || strings.Contains(r.stdout+r.stderr, "timeout") {
		t.Fatalf("serve --stop after the descriptors came back: %s", r)
	}
	select {
	case <-done:
		done <- nil
	case <-time.After(30 * time.Second):
		t.Fatalf("serve did not stop:\n%s", out.String())
	}
}
