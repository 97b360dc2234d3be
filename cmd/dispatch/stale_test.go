package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/control"
	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/httpapi"
	"github.com/dispatch-tool/dispatch/internal/browsertest"
	"github.com/dispatch-tool/dispatch/readmodel"
)

// staleStatus is what the views say of the controller and, with
// --refresh, of the nodes.
type staleStatus struct {
	Controller *struct {
		Running  bool   `json:"running"`
		LastSeen string `json:"last_seen"`
	} `json:"controller"`
	Tasks   []taskJSON             `json:"tasks"`
	Refresh *readmodel.RefreshView `json:"refresh"`
}

// TestNoControllerSaysSo (issue 38): a controller stopped while a task runs
// — by serve --stop, SIGTERM or SIGKILL — leaves status, nodes, report,
// runs, the API and MCP saying that none runs and since when, with running
// tasks shown as last seen; status --refresh asks the node, shows the task
// ended there, and writes nothing.
func TestNoControllerSaysSo(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"serve --stop", "SIGTERM", "SIGKILL"} {
		t.Run(strings.ReplaceAll(how, " ", "_"), func(t *testing.T) {
			t.Parallel()
			gate := filepath.Join(t.TempDir(), "go")
			home, _ := opsHome(t, map[string]map[string]string{
				"web": {"S01-wait.md": fmt.Sprintf("while [ ! -e '%s' ]; do sleep 0.05; done\necho done > out.txt\n", gate)},
			})
			unsandboxed(t, home, "S01 waits for a file the test writes outside its workspace")
			stopController(t, home, how)

			// What the views say while the task still runs on its node.
			s := staleStatusOf(t, home)
			if s.Controller == nil || s.Controller.Running || s.Controller.LastSeen == "" {
				t.Fatalf("status --json controller = %+v; want running false with last_seen", s.Controller)
			}
			r := runDispatch(t, nil, "--home", home, "status", "web")
			first, _, _ := strings.Cut(r.stdout, "\n")
			if !strings.HasPrefix(first, "no controller is running (last tick ") || !strings.Contains(first, "dispatch start web") ||
				!strings.Contains(r.stdout, "running at ") {
				t.Errorf("status text does not say no controller runs:\n%s", r.stdout)
			}
			r = runDispatch(t, nil, "--home", home, "nodes")
			if !strings.HasPrefix(r.stdout, "no controller is running") || !strings.Contains(r.stdout, "last seen") ||
				strings.Contains(r.stdout, " online ") {
				t.Errorf("nodes does not say no controller runs:\n%s", r.stdout)
			}
			assertControllerJSON(t, "nodes --json", runDispatch(t, nil, "--home", home, "nodes", "--json").stdout)
			r = runDispatch(t, nil, "--home", home, "report", "web")
			if !strings.Contains(r.stdout, "no controller is running") {
				t.Errorf("report of the unfinished run does not say no controller runs:\n%s", r.stdout)
			}
			assertControllerJSON(t, "report --format json", runDispatch(t, nil, "--home", home, "report", "web", "--format", "json").stdout)
			r = runDispatch(t, nil, "--home", home, "runs", "web")
			if !strings.Contains(r.stdout, "running (no controller)") || !strings.Contains(r.stdout, "no controller is running") {
				t.Errorf("runs does not say the run's controller went away:\n%s", r.stdout)
			}
			assertControllerJSON(t, "API status", apiGet(t, home, "/api/v1/projects/web"))
			assertControllerJSON(t, "API nodes", apiGet(t, home, "/api/v1/nodes"))
			assertControllerJSON(t, "API controller", "{\"controller\":"+apiGet(t, home, "/api/v1/controller")+"}")

			// The task ends on its node; the database does not know.
			before := tree(t, home)
			if err := os.WriteFile(gate, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			var fresh staleStatus
			pollUntil(t, 30*time.Second, "status --refresh to see S01 end on its node", func() bool {
				r := runDispatch(t, nil, "--home", home, "status", "web", "--json", "--refresh")
				fresh = staleStatus{}
				if r.code != 0 || json.Unmarshal([]byte(r.stdout), &fresh) != nil || fresh.Refresh == nil {
					t.Fatalf("status --refresh --json: %s", r)
				}
				return len(fresh.Refresh.Tasks) == 1 && fresh.Refresh.Tasks[0].OnNode == "completed"
			})
			if rt := fresh.Refresh.Tasks[0]; rt.ID != "S01" || rt.Database != domain.Running || !rt.Differs || rt.Node != "local" {
				t.Errorf("refresh of S01 = %+v; want completed on local, running in the database, differs", rt)
			}
			r = runDispatch(t, nil, "--home", home, "status", "web", "--refresh")
			if !strings.Contains(r.stdout, "asked the nodes at") || !strings.Contains(r.stdout, "completed at") ||
				!strings.Contains(r.stdout, "dispatch start web (or dispatch serve) collects them") {
				t.Errorf("status --refresh text:\n%s", r.stdout)
			}
			if got := taskState(t, home, "web", "S01").Status; got != domain.Running {
				t.Errorf("S01 in the database after --refresh: %s; want still running (nothing recorded)", got)
			}
			text := toolText(t, callTool(t, mcpSession(t, home), "status", map[string]any{"project": "web", "refresh": true}))
			if !strings.Contains(text, "No controller is running") || !strings.Contains(text, "S01 is completed on local") {
				t.Errorf("MCP status with refresh:\n%s", text)
			}
			var api staleStatus
			if err := json.Unmarshal([]byte(apiGet(t, home, "/api/v1/projects/web?refresh=1")), &api); err != nil || api.Refresh == nil ||
				len(api.Refresh.Tasks) != 1 || api.Refresh.Tasks[0].OnNode != "completed" {
				t.Errorf("API status ?refresh=1: %+v (%v)", api.Refresh, err)
			}
			assertTreeUnchanged(t, home, before)

			// A controller resumes and collects what finished.
			if r := runDispatch(t, nil, "--home", home, "start", "web"); r.code != 0 {
				t.Fatalf("start web after the controller went away: %s", r)
			}
			if s := staleStatusOf(t, home); s.Controller == nil || s.Controller.Running {
				t.Errorf("after start ended: controller = %+v", s.Controller)
			}
			if r := runDispatch(t, nil, "--home", home, "status", "web"); strings.Contains(r.stdout, "no controller is running") {
				t.Errorf("a finished project's status still warns:\n%s", r.stdout)
			}
		})
	}
}

// stopController starts web under a controller, waits for S01 to run, then
// stops the controller as how says, and waits until none answers.
func stopController(t *testing.T, home, how string) {
	t.Helper()
	var cmd *exec.Cmd
	if how == "serve --stop" {
		if r := runDispatch(t, nil, "--home", home, "serve", "--detach"); r.code != 0 {
			t.Fatalf("serve --detach: %s", r)
		}
		t.Cleanup(func() { runDispatch(t, nil, "--home", home, "serve", "--stop") })
		if r := runDispatch(t, nil, "--home", home, "start", "web", "--detach"); r.code != 0 {
			t.Fatalf("start --detach handed to serve: %s", r)
		}
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), 2*cmdTimeout)
		t.Cleanup(cancel)
		cmd, _, _ = dispatchCmd(ctx, nil, "--home", home, "start", "web")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	}
	pollUntil(t, 60*time.Second, "web/S01 to run", func() bool {
		return control.Running(home) && taskState(t, home, "web", "S01").Status == domain.Running
	})
	switch how {
	case "serve --stop":
		if r := runDispatch(t, nil, "--home", home, "serve", "--stop"); r.code != 0 {
			t.Fatalf("serve --stop: %s", r)
		}
	case "SIGTERM":
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	case "SIGKILL":
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
	pollUntil(t, 30*time.Second, "the controller to be gone", func() bool { return !control.Running(home) })
}

func staleStatusOf(t *testing.T, home string) staleStatus {
	t.Helper()
	r := runDispatch(t, nil, "--home", home, "status", "web", "--json")
	var s staleStatus
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &s) != nil {
		t.Fatalf("status --json: %s", r)
	}
	return s
}

func assertControllerJSON(t *testing.T, what, out string) {
	t.Helper()
	var v struct {
		Controller *struct {
			Running  *bool  `json:"running"`
			LastSeen string `json:"last_seen"`
		} `json:"controller"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil || v.Controller == nil || v.Controller.Running == nil ||
		*v.Controller.Running || v.Controller.LastSeen == "" {
		t.Errorf("%s: want \"controller\": {\"running\": false, \"last_seen\": ...}; got %s", what, out)
	}
}

// apiGet answers path from the home's API as `dispatch serve --http` would.
func apiGet(t *testing.T, home, path string) string {
	t.Helper()
	srv := &httpapi.Server{Home: home, Token: "t0ken", Config: filepath.Join(home, "nodes.yaml"), Refresh: refreshViews}
	defer srv.Close()
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	req, _ := http.NewRequest(http.MethodGet, ts.URL+path, nil)
	req.Header.Set("Authorization", "Bearer t0ken")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s %s", path, res.Status, b)
	}
	return string(b)
}

// TestDashboardSaysNoController (issue 38): the dashboard shows a banner
// while no controller runs for the home, and none before one ever ran.
func TestDashboardSaysNoController(t *testing.T) {
	t.Parallel()
	gate := filepath.Join(t.TempDir(), "go")
	home, _ := opsHome(t, map[string]map[string]string{
		// It also ends once the gate's directory is gone: the cleanup writes
		// the gate and removes its directory within the loop's 50 ms.
		"web": {"S01-wait.md": fmt.Sprintf("g='%s'; while [ ! -e \"$g\" ] && [ -d \"${g%%/*}\" ]; do sleep 0.05; done\n", gate)},
	})
	unsandboxed(t, home, "S01 waits for a file the test writes outside its workspace")
	t.Cleanup(func() { _ = os.WriteFile(gate, nil, 0o644) })
	srv := &httpapi.Server{Home: home, Token: "t0ken", Config: filepath.Join(home, "nodes.yaml"), UI: dashboardUI()}
	t.Cleanup(func() { srv.Close() })
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	b := browsertest.Start(t) // closed first: its event stream ends before the server's Close waits for it

	b.Navigate(t, ts.URL+"/?token=t0ken#/")
	b.WaitFor(t, 10*time.Second, "the projects page", `document.querySelector('main h1')`)
	if browsertest.Eval[bool](t, b, `!document.getElementById('stale').hidden`) {
		t.Error("the banner shows before any controller ran")
	}
	stopController(t, home, "SIGKILL")
	browsertest.Eval[bool](t, b, `(location.hash = '#/p/web', true)`)
	b.WaitFor(t, 15*time.Second, "the no-controller banner",
		`!document.getElementById('stale').hidden && document.getElementById('stale').textContent.includes('No controller is running (last tick ')`)
	if got := browsertest.Eval[string](t, b, `document.getElementById('stale').textContent`); !strings.Contains(got, "dispatch start <project>") {
		t.Errorf("the banner does not say what resumes: %q", got)
	}
	b.NoProblems(t)
}
