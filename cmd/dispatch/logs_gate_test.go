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

// TestGateMissingSaysOneThing: a gate command missing on the node fails
// the attempt without a retry; the line saying so tells the truth (not
// "out of retries (2 of 2 used)" after one attempt) and the stop line,
// that line and the report advise the same command.
func TestGateMissingSaysOneThing(t *testing.T) {
	home, _ := opsHome(t, map[string]map[string]string{"p": {"S01-a.md": "echo a > a.txt\n"}})
	writeFile(t, filepath.Join(home, "specs", "p", "project.yaml"), "tool: shell\nintegration: false\nmax_retries: 2\ngate: {task: no-such-gate-xyz}\n")
	r := runDispatch(t, nil, "--home", home, "start", "p")
	if r.code != 1 {
		t.Fatalf("start: %s", r)
	}
	var stop, gaveUp string
	for _, line := range strings.Split(r.stdout, "\n") {
		switch {
		case strings.Contains(line, "p stopped:"):
			stop = line
		case strings.Contains(line, "S01#1") && strings.Contains(line, "retr"):
			gaveUp = line
		}
	}
	const advice = "dispatch start p"
	if !strings.Contains(stop, advice) || !strings.Contains(gaveUp, "not retried") || !strings.Contains(gaveUp, advice) {
		t.Errorf("stop line %q and give-up line %q; want both to advise %q, the latter to say it is not retried:\n%s", stop, gaveUp, advice, r)
	}
	if strings.Contains(r.stdout, "out of retries") {
		t.Errorf("one attempt, yet out of retries:\n%s", r)
	}
	report := readFile(t, filepath.Join(home, "runs", "p", "report.md"))
	next := report[strings.Index(report, "Next:"):]
	next = next[:strings.Index(next, "\n")]
	if !strings.Contains(next, "`"+advice+"`") || strings.Contains(next, "dispatch retry") {
		t.Errorf("report's %q; want it to advise %q", next, advice)
	}
	if s, _ := getStatus(t, home, "p"); s.task(t, "S01").Attempt != 1 {
		t.Errorf("S01 ran %d attempts, want 1", s.task(t, "S01").Attempt)
	}
}
