package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/internal/sshdtest"
	"github.com/dispatch-tool/dispatch/wire"
)

// testController is the controller: block of the agent tests' nodes.yaml:
// quick polls and retries.
const testController = `controller:
  poll_interval: 200ms
  ssh_connect_timeout: 5s
  retry_backoff: 100ms
  retry_backoff_max: 1s
`

// policyHome is an operator home with one sshd node, n1, whose nodes.yaml
// ends with extra (api_modes and the like); node adds lines to the node.
func policyHome(t *testing.T, node, extra string) (*sshHome, *sshdtest.Server) {
	t.Helper()
	h := newSSHHome(t)
	srv := h.client.StartServer(t, "n1")
	h.client.Trust(t, srv)
	writeFile(t, filepath.Join(h.home, "nodes.yaml"), testController+fmt.Sprintf(`nodes:
  - name: n1
    ssh: %s@127.0.0.1:%d
    slots: 2
    work_dir: %s
    tool: shell
%s%s`, h.client.User, srv.Port, srv.WorkDir, node, extra))
	return h, srv
}

// TestStalledAgentIsRetried: a tool that writes nothing for its
// stall_timeout is stopped and retried as stalled; one that keeps writing
// for longer is left alone.
func TestStalledAgentIsRetried(t *testing.T) {
	h, srv := policyHome(t, "    sandbox: off # the stalled tool writes its pid outside its workspace\n", "")
	dir := filepath.Join(h.home, "specs", "p")
	writeFile(t, filepath.Join(dir, "project.yaml"), "integration: false\nstall_timeout: 2s\n")
	writeFile(t, filepath.Join(dir, "S01-quiet.md"), "# Quiet on its first attempt\necho \"attempt $DISPATCH_ATTEMPT\"\n"+
		"if [ \"$DISPATCH_ATTEMPT\" = 1 ]; then echo $$ > ../stalled.pid; sleep 300; fi\necho done > out.txt\n")
	writeFile(t, filepath.Join(dir, "S02-chatty.md"), "---\nstall_timeout: 2s\n---\n# Slow but talking\n"+
		"for i in 1 2 3 4 5 6 7 8 9 10 11 12; do echo tick $i; sleep 0.3; done\necho done > out.txt\n")
	r := h.run(t, "start", "p")
	if r.code != 0 {
		t.Fatalf("start: %s", r)
	}
	st := openStore(t, h.home)
	ctx := context.Background()
	runs, _ := st.Attempts(ctx, "p", "S01")
	if len(runs) != 2 || runs[0].ErrorClass != wire.ClassStalled || runs[1].Status != domain.Completed {
		t.Fatalf("S01 runs: %+v; want stalled, then completed", runs)
	}
	if !strings.Contains(runs[0].Error, "wrote nothing for 2s") {
		t.Errorf("S01 attempt 1 error: %q", runs[0].Error)
	}
	if runs, _ := st.Attempts(ctx, "p", "S02"); len(runs) != 1 {
		t.Errorf("S02, which kept writing, ran %d times", len(runs))
	}
	// The stalled tool is gone.
	pid := strings.TrimSpace(readFile(t, filepath.Join(srv.WorkDir, "p", "tasks", "S01", "stalled.pid")))
	if processAlive(t, pid) {
		t.Errorf("the stalled tool (pid %s) still runs", pid)
	}
	md := readFile(t, filepath.Join(h.home, "runs", "p", "report.md"))
	if !strings.Contains(md, "#1 failed on n1 (stalled)") {
		t.Errorf("report.md does not show the stall:\n%s", md)
	}
}

// TestBudgetStopsNewTasks: once the recorded cost reaches the budget
// (start --budget-usd here, replacing project.yaml's), nothing new starts,
// and status and the report say why.
func TestBudgetStopsNewTasks(t *testing.T) {
	// The cost is read only from an agent CLI: a stand-in named claude.
	h, _ := policyHome(t, "", "tools:\n  claude: { command: [/bin/sh, \"{spec}\"] }\n")
	dir := filepath.Join(h.home, "specs", "p")
	writeFile(t, filepath.Join(dir, "project.yaml"), "integration: false\ntool: claude\nbudget: {usd: 100, tokens: 1000000}\n")
	for i, id := range []string{"S01", "S02", "S03"} {
		dep := ""
		if i > 0 {
			dep = fmt.Sprintf("---\ndepends_on: [S%02d]\n---\n", i)
		}
		writeFile(t, filepath.Join(dir, id+"-step.md"), dep+"# Step\n"+
			`echo '{"type":"result","total_cost_usd":0.03,"usage":{"input_tokens":100,"output_tokens":10}}'`+"\n")
	}
	r := h.run(t, "start", "--budget-usd", "0.05", "p")
	if r.code == 0 {
		t.Fatalf("start passed past the budget: %s", r)
	}
	st := openStore(t, h.home)
	ctx := context.Background()
	for id, want := range map[string]domain.Status{"S01": domain.Completed, "S02": domain.Completed, "S03": domain.Canceled} {
		if tk, _ := st.Task(ctx, "p", id); tk.Status != want {
			t.Errorf("%s = %s, want %s", id, tk.Status, want)
		}
	}
	const why = "budget reached: $0.06 spent of $0.05"
	if tk, _ := st.Task(ctx, "p", "S03"); !strings.Contains(tk.Error, why) {
		t.Errorf("S03's error %q does not say %q", tk.Error, why)
	}
	if s := h.run(t, "status", "p"); !strings.Contains(s.stdout, why) {
		t.Errorf("status does not say why:\n%s", s.stdout)
	}
	md := readFile(t, filepath.Join(h.home, "runs", "p", "report.md"))
	if !strings.Contains(md, "Budget: $0.05 or 1000000 tokens — "+why) {
		t.Errorf("report.md does not say the budget:\n%s", md)
	}
	if bad := h.run(t, "start", "--budget-usd", "-1", "p"); bad.code != 2 || !strings.Contains(bad.stderr, "--budget-usd must be a positive amount") {
		t.Errorf("start --budget-usd -1: %s", bad)
	}
}

// TestFallbackModeTakesOver: while a rate limit pauses a node's api_mode,
// its tasks run under the mode's first fallback that the node may use, and
// the report says which mode each attempt used.
func TestFallbackModeTakesOver(t *testing.T) {
	// A stand-in for claude: only an agent CLI's result names a reset.
	h, _ := policyHome(t, "    api_mode: a\n    api_modes: [b]\n", `api_modes:
  a:
    env: {ACCOUNT: a}
    fallback: [b]
  b:
    env: {ACCOUNT: b}
tools:
  claude: { command: [/bin/sh, "{spec}"] }
`)
	dir := filepath.Join(h.home, "specs", "p")
	writeFile(t, filepath.Join(dir, "project.yaml"), "integration: false\ntool: claude\n")
	body := "if [ \"$ACCOUNT\" = a ]; then echo '{\"type\":\"result\",\"is_error\":true,\"result\":\"API Error: 429 Too Many Requests: rate limit reached, retry after 86400 seconds\"}'; exit 1; fi\n" +
		"echo \"$ACCOUNT\" > account.txt\n"
	writeFile(t, filepath.Join(dir, "S01-first.md"), "# First\n"+body)
	writeFile(t, filepath.Join(dir, "S02-second.md"), "---\ndepends_on: [S01]\n---\n# Second\n"+body)
	r := h.run(t, "start", "p")
	if r.code != 0 {
		t.Fatalf("start: %s", r)
	}
	st := openStore(t, h.home)
	ctx := context.Background()
	runs, _ := st.Attempts(ctx, "p", "S01")
	if len(runs) != 2 || runs[0].APIMode != "a" || runs[0].ErrorClass != wire.ClassRateLimit || runs[1].APIMode != "b" {
		t.Fatalf("S01 runs: %+v; want rate_limit under a, then b", runs)
	}
	if s2, _ := st.Attempts(ctx, "p", "S02"); len(s2) != 1 || s2[0].APIMode != "b" {
		t.Errorf("S02 runs: %+v; want one under b while a is paused", s2)
	}
	if got := readFile(t, filepath.Join(h.home, "runs", "p", "S01", "output", "account.txt")); got != "b\n" {
		t.Errorf("S01 ran under %q", got)
	}
	// claude's reset of a day is trusted, and status says on which day
	// the pause ends.
	tomorrow := time.Now().Add(24 * time.Hour).Local().Format("2006-01-02")
	s := h.run(t, "status", "p")
	if !strings.Contains(s.stdout, "paused: a until "+tomorrow+" ") || !strings.Contains(s.stdout, "run under b (fallback)") {
		t.Errorf("status does not show the pause (until %s) and the fallback:\n%s", tomorrow, s.stdout)
	}
	var rep struct {
		Tasks []struct {
			ID       string `json:"id"`
			Attempts []struct {
				APIMode string `json:"api_mode"`
			} `json:"attempts"`
		} `json:"tasks"`
	}
	if err := json.Unmarshal([]byte(h.run(t, "report", "p", "--format", "json").stdout), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Tasks) == 0 || len(rep.Tasks[0].Attempts) != 2 || rep.Tasks[0].Attempts[1].APIMode != "b" {
		t.Errorf("report json attempts: %+v", rep.Tasks)
	}
	md := readFile(t, filepath.Join(h.home, "runs", "p", "report.md"))
	if !strings.Contains(md, "- S01: #1 a, #2 b") {
		t.Errorf("report.md does not say the modes:\n%s", md)
	}
}

// processAlive reports whether the process pid lives (and is no zombie).
func processAlive(t *testing.T, pid string) bool {
	t.Helper()
	stat, err := os.ReadFile(filepath.Join("/proc", pid, "stat"))
	if err != nil {
		return false
	}
	// The state follows the command name in parentheses.
	s := string(stat)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z'
	}
	return true
}

// TestStreamKilledOnTheNode: with an hourly poll only the node's status
// stream moves a chain along; killing the stream's process on the node
// makes the controller open it again, and the chain finishes.
func TestStreamKilledOnTheNode(t *testing.T) {
	h, srv := policyHome(t, "", "")
	writeFile(t, filepath.Join(h.home, "nodes.yaml"), strings.Replace(readFile(t, filepath.Join(h.home, "nodes.yaml")),
		"poll_interval: 200ms", "poll_interval: 1h", 1))
	dir := filepath.Join(h.home, "specs", "p")
	writeFile(t, filepath.Join(dir, "project.yaml"), "integration: false\n")
	writeFile(t, filepath.Join(dir, "S01-a.md"), "sleep 1\n")
	writeFile(t, filepath.Join(dir, "S02-b.md"), "---\ndepends_on: [S01]\n---\nsleep 1\n")
	writeFile(t, filepath.Join(dir, "S03-c.md"), "---\ndepends_on: [S02]\n---\nsleep 1\n")
	finished := startBackground(t, h.env, "--home", h.home, "start", "p")
	// The wrapper processes only: the shell sshd starts for the command
	// matches the same command line until it execs the wrapper, and
	// killing a shell in the middle of its rc files can leave their locks
	// behind (root's pyenv rehash here).
	watchers := func() []string {
		out, _ := exec.Command("pgrep", "-f", "watch --root "+srv.WorkDir).Output()
		var pids []string
		for _, pid := range strings.Fields(string(out)) {
			if exe, err := os.Readlink("/proc/" + pid + "/exe"); err == nil && strings.HasPrefix(filepath.Base(exe), "dispatch-wrapper") {
				pids = append(pids, pid)
			}
		}
		return pids
	}
	pollUntil(t, 30*time.Second, "the status stream to run on the node", func() bool { return len(watchers()) == 1 })
	first := watchers()[0]
	if pid, err := strconv.Atoi(first); err != nil || syscall.Kill(pid, syscall.SIGKILL) != nil {
		t.Fatalf("kill the stream's wrapper %s: %v", first, err)
	}
	pollUntil(t, 30*time.Second, "a new status stream", func() bool {
		w := watchers()
		return len(w) == 1 && w[0] != first
	})
	if r := finished(); r.code != 0 {
		t.Fatalf("start: %s (with an hourly poll, only a reopened stream could finish the chain)", r)
	}
	// The stream ends with its session: nothing is left on the node.
	pollUntil(t, 10*time.Second, "the status stream to end with the controller", func() bool { return len(watchers()) == 0 })
}
