package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestLogsShowTheGatesOutput: the gate's output is not in task.log, yet
// `logs` of an attempt its gate failed shows it (the SyntaxError), and
// `logs` of a retry whose tree was gated before shows which attempt ran
// the gate, the command to read it, and the same output.
func TestLogsShowTheGatesOutput(t *testing.T) {
	home, _ := opsHome(t, map[string]map[string]string{"p": {"S01-a.md": "---\nmax_retries: 1\n---\necho broken > made.txt\n"}})
	gate := `grep -qx fixed made.txt || { echo "SyntaxError: made.txt holds $(cat made.txt)"; exit 1; }`
	writeFile(t, filepath.Join(home, "specs", "p", "project.yaml"), "tool: shell\nintegration: false\ngate:\n  task: '"+gate+"'\n")
	if r := runDispatch(t, nil, "--home", home, "start", "p"); r.code != 1 {
		t.Fatalf("start: %s", r)
	}
	if log := readFile(t, filepath.Join(home, "runs", "p", "S01", "task.log")); strings.Contains(log, "SyntaxError") {
		t.Fatalf("task.log holds the gate's output; the test needs it elsewhere:\n%s", log)
	}
	first := runDispatch(t, nil, "--home", home, "logs", "p", "S01", "--attempt", "1")
	if first.code != 0 || !strings.Contains(first.stdout, "SyntaxError: made.txt holds broken") || !strings.Contains(first.stdout, "failed: exit status 1") {
		t.Errorf("logs of attempt 1 does not show its gate's output:\n%s", first)
	}
	latest := runDispatch(t, nil, "--home", home, "logs", "p", "S01")
	if latest.code != 0 || !strings.Contains(latest.stdout, "was gated before") || !strings.Contains(latest.stdout, "SyntaxError: made.txt holds broken") ||
		!strings.Contains(latest.stdout, "gated by S01 attempt 1 (dispatch logs p S01 --attempt 1)") {
		t.Errorf("logs of the retry does not show the reused verdict's output and where it is:\n%s", latest)
	}
}
