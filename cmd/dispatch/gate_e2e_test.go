package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dispatch-tool/dispatch/internal/agentcli"
)

// TestRealAgentGate: the real claude CLI, sandboxed, against its fake API,
// under a task gate. Its first attempt writes a result the gate fails
// ("broken"); dispatch runs the gate itself, fails the attempt (class
// gate) and tells the retry — in its prompt, which the API sees, and in
// DISPATCH_GATE_OUTPUT, which the agent's shell command reads — so the
// second attempt writes what passes, and the run passes only then.
func TestRealAgentGate(t *testing.T) {
	bin := agentcli.Dir(t)
	nodeHome, err := os.MkdirTemp("/var/tmp", "dispatch-gate-home-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(nodeHome) })
	command := `if printf '%s' "$DISPATCH_GATE_OUTPUT" | grep -q 'holds broken'; then echo fixed > made.txt; else echo broken > made.txt; fi; cat made.txt`
	gate := `grep -qx fixed made.txt || { echo "made.txt holds $(cat made.txt)"; exit 1; }`
	extra := "max_retries: 1\ngate:\n  task: '" + gate + "'\n"
	home, api, outputs, r := autonomyRunWith(t, realCLIs[0], bin, "on", nodeHome, command, extra)
	if r.code != 0 {
		t.Fatalf("start: %s\ntool results: %q\n%s", r, outputs, tailOf(filepath.Join(home, "runs", "p", "S01", "task.log")))
	}
	if got := readFile(t, filepath.Join(home, "runs", "p", "S01", "output", "made.txt")); got != "fixed\n" {
		t.Errorf("made.txt = %q, want fixed", got)
	}
	told := false
	for _, req := range api.Requests() {
		told = told || strings.Contains(req.Prompt, "The gate failed on your last attempt") && strings.Contains(req.Prompt, "made.txt holds broken")
	}
	if !told {
		t.Error("no prompt the API saw carried the gate's output")
	}
	rep := runDispatch(t, []string{"HOME=" + nodeHome}, "--home", home, "report", "p", "--format", "json")
	var rv struct {
		Gate struct {
			Tasks []struct {
				ID      string `json:"id"`
				Attempt int    `json:"attempt"`
				Passed  bool   `json:"passed"`
			} `json:"tasks"`
			Claims []struct {
				ExitedZero int `json:"exited_zero"`
				PassedGate int `json:"passed_gate"`
			} `json:"claims"`
		} `json:"gate"`
	}
	if err := json.Unmarshal([]byte(rep.stdout), &rv); err != nil {
		t.Fatalf("report --format json: %v: %s", err, rep)
	}
	g := rv.Gate
	if len(g.Tasks) != 2 || g.Tasks[0].Passed || !g.Tasks[1].Passed || g.Tasks[1].Attempt != 2 ||
		len(g.Claims) != 1 || g.Claims[0].ExitedZero != 2 || g.Claims[0].PassedGate != 1 {
		t.Errorf("report's gate %+v; want attempt 1 failed, attempt 2 passed, 2 claims and 1 pass", g)
	}
}
