package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/control"
	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/httpapi"
	"github.com/dispatch-tool/dispatch/internal/browsertest"
)

// TestFrozenControllerSaysSo: a controller whose process is SIGSTOPped
// still holds the home and its socket accepts, but it does nothing:
// status (text, JSON), the API, MCP and the dashboard's banner say it is stopped and frozen with its
// pid, not running; once SIGCONT resumes it, it is running again and
// finishes the run.
func TestFrozenControllerSaysSo(t *testing.T) {
	t.Parallel()
	gate := filepath.Join(t.TempDir(), "go")
	home, _ := opsHome(t, map[string]map[string]string{
		"web": {"S01-wait.md": fmt.Sprintf("while [ ! -e '%s' ]; do sleep 0.05; done\necho done > out.txt\n", gate)},
	})
	unsandboxed(t, home, "S01 waits for a file the test writes outside its workspace")
	ctx, cancel := context.WithTimeout(context.Background(), 2*cmdTimeout)
	t.Cleanup(cancel)
	cmd, stdout, stderr := dispatchCmd(ctx, nil, "--home", home, "start", "web")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	pollUntil(t, 60*time.Second, "web/S01 to run", func() bool {
		return control.Running(home) && taskState(t, home, "web", "S01").Status == domain.Running
	})

	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	pollUntil(t, 10*time.Second, "the controller to be frozen", func() bool { return control.Find(home).Frozen })
	r := runDispatch(t, nil, "--home", home, "status", "web")
	first, _, _ := strings.Cut(r.stdout, "\n")
	if want := fmt.Sprintf("controller stopped (pid %d is frozen: SIGSTOP", pid); !strings.HasPrefix(first, want) ||
		!strings.Contains(first, fmt.Sprintf("kill -CONT %d", pid)) {
		t.Errorf("status text of a frozen controller, first line %q; want it to start %q and name kill -CONT:\n%s", first, want, r.stdout)
	}
	for what, out := range map[string]string{
		"status --json": runDispatch(t, nil, "--home", home, "status", "web", "--json").stdout,
		"API status":    apiGet(t, home, "/api/v1/projects/web"),
	} {
		var v struct {
			Controller *struct {
				Running bool `json:"running"`
				Frozen  bool `json:"frozen"`
				PID     int  `json:"pid"`
			} `json:"controller"`
		}
		if err := json.Unmarshal([]byte(out), &v); err != nil || v.Controller == nil || v.Controller.Running ||
			!v.Controller.Frozen || v.Controller.PID != pid {
			t.Errorf("%s: want \"controller\": {\"running\": false, \"frozen\": true, \"pid\": %d}; got %s", what, pid, out)
		}
	}

	text := toolText(t, callTool(t, mcpSession(t, home), "status", map[string]any{"project": "web"}))
	if !strings.Contains(text, fmt.Sprintf("The controller is stopped (pid %d is frozen", pid)) {
		t.Errorf("MCP status of a frozen controller:\n%s", text)
	}
	srv := &httpapi.Server{Home: home, Token: "t0ken", Config: filepath.Join(home, "nodes.yaml"), UI: dashboardUI()}
	t.Cleanup(func() { srv.Close() })
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	b := browsertest.Start(t)
	b.Navigate(t, ts.URL+"/?token=t0ken#/p/web")
	b.WaitFor(t, 15*time.Second, "the frozen-controller banner",
		fmt.Sprintf(`!document.getElementById('stale').hidden && document.getElementById('stale').textContent.includes('pid %d is frozen')`, pid))
	if got := browsertest.Eval[string](t, b, `document.getElementById('stale').textContent`); !strings.Contains(got, fmt.Sprintf("kill -CONT %d", pid)) {
		t.Errorf("the banner does not say what resumes the controller: %q", got)
	}
	b.NoProblems(t)

	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	pollUntil(t, 10*time.Second, "the controller to run again", func() bool {
		s := staleStatusOf(t, home)
		return s.Controller != nil && s.Controller.Running
	})
	if r := runDispatch(t, nil, "--home", home, "status", "web"); strings.Contains(r.stdout, "frozen") {
		t.Errorf("status of a resumed controller still says frozen:\n%s", r.stdout)
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("start after SIGCONT: %v\n--- stdout:\n%s--- stderr:\n%s", err, stdout, stderr)
	}
}
