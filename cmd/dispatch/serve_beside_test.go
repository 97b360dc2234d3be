package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/control"
	"github.com/dispatch-tool/dispatch/domain"
)

// TestServeHTTPBesideAController (issue 32 item 6): `serve --http` while a
// `start --detach` controller runs serves the dashboard and API beside it,
// without its lock; the API shows the live run; stopping the
// server leaves the controller running; `--detach` is refused with why.
func TestServeHTTPBesideAController(t *testing.T) {
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
	addr := freeAddr(t)
	if r := runDispatch(t, nil, "--home", home, "serve", "--http", addr, "--detach"); r.code == 0 ||
		!strings.Contains(r.stderr, "without --detach, dispatch serve --http serves the dashboard and API beside it") {
		t.Errorf("serve --http --detach beside a controller: %s", r)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*cmdTimeout)
	defer cancel()
	cmd, stdout, _ := dispatchCmd(ctx, nil, "--home", home, "serve", "--http", addr)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	get := func(path string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+path, nil)
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
	pollUntil(t, 30*time.Second, "serve --http to answer beside the controller", func() bool {
		code, _ := get("/api/v1/controller")
		return code == http.StatusOK
	})
	var st staleStatus
	code, body := get("/api/v1/projects/web")
	if code != http.StatusOK || json.Unmarshal([]byte(body), &st) != nil || len(st.Tasks) != 1 || st.Tasks[0].Status != "running" ||
		st.Controller == nil || !st.Controller.Running {
		t.Fatalf("API status beside the controller: %d %s", code, body)
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	_ = cmd.Wait()
	if !strings.Contains(stdout.String(), "serving only the dashboard and API beside it") {
		t.Errorf("serve does not say it serves beside the controller: %q", stdout.String())
	}
	if cmd.ProcessState.ExitCode() != 0 {
		t.Errorf("serve --http beside a controller exited %d on SIGTERM", cmd.ProcessState.ExitCode())
	}
	if !control.Running(home) {
		t.Fatal("stopping the web server stopped the controller")
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	pollUntil(t, 60*time.Second, "the controller to finish web", func() bool {
		return taskState(t, home, "web", "S01").Status == domain.Completed && !control.Running(home)
	})
}
