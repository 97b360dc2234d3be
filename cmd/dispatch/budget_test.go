package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestBudgetStopIsOnTheFirstScreen: a project its budget stopped says so
// in the first lines of report.md, `dispatch report` and `dispatch status`
// (spent, allowed, tasks canceled) and says how to raise it and go on; a
// canceled task's reason has no stray colon.
func TestBudgetStopIsOnTheFirstScreen(t *testing.T) {
	const cost = `echo '{"type":"result","total_cost_usd":0.03,"usage":{"input_tokens":100,"output_tokens":10}}'` + "\n"
	home, _ := opsHome(t, map[string]map[string]string{"p": {
		"S01-a.md": cost,
		"S02-b.md": cost,
		"S03-c.md": "---\ndepends_on: [S01, S02]\n---\n" + cost,
		"S04-d.md": "---\ndepends_on: [S01, S02]\n---\n" + cost,
	}})
	// The cost is read only from an agent CLI: a stand-in named claude.
	nodesYAML := filepath.Join(home, "nodes.yaml")
	writeFile(t, nodesYAML, readFile(t, nodesYAML)+"tools:\n  claude: { command: [/bin/sh, \"{spec}\"] }\n")
	writeFile(t, filepath.Join(home, "specs", "p", "project.yaml"), "tool: claude\nintegration: false\nbudget: {usd: 0.05}\n")
	if r := runDispatch(t, nil, "--home", home, "start", "p"); r.code != 1 {
		t.Fatalf("start: want exit 1 (the budget stops it): %s", r)
	}
	const stopped = "stopped by its budget: $0.06 spent of $0.05 allowed, 2 tasks canceled"
	const raise = "`dispatch start --budget-usd <USD> p`"
	firstLines := func(s string, n int) string {
		return strings.Join(strings.SplitN(s, "\n", n+1)[:min(n, strings.Count(s, "\n"))], "\n")
	}
	md := readFile(t, filepath.Join(home, "runs", "p", "report.md"))
	rep := runDispatch(t, nil, "--home", home, "report", "p")
	if rep.code != 0 {
		t.Fatalf("report: %s", rep)
	}
	for name, text := range map[string]string{"report.md": md, "dispatch report": rep.stdout} {
		first := firstLines(text, 7)
		for _, want := range []string{"**FAILED** — " + stopped, "Next: run " + raise, "budget: in specs/p/project.yaml"} {
			if !strings.Contains(first, want) {
				t.Errorf("%s: the first lines lack %q:\n%s", name, want, first)
			}
		}
		if strings.Contains(text, ": budget reached") {
			t.Errorf("%s: a canceled task's reason starts with a colon:\n%s", name, text)
		}
	}
	st := runDispatch(t, nil, "--home", home, "status", "p")
	if st.code != 0 {
		t.Fatalf("status: %s", st)
	}
	first := firstLines(st.stdout, 3)
	for _, want := range []string{"p — phase done, failed", stopped, "next: run " + raise} {
		if !strings.Contains(first, want) {
			t.Errorf("status: the first lines lack %q:\n%s", want, st.stdout)
		}
	}
	if strings.Contains(st.stdout, ": budget reached") {
		t.Errorf("status: a canceled task's reason starts with a colon:\n%s", st.stdout)
	}
	// What Next says works: the new run reuses S01 and S02 and runs the rest.
	if r := runDispatch(t, nil, "--home", home, "start", "--budget-usd", "1", "p"); r.code != 0 {
		t.Fatalf("start --budget-usd 1 after the stop: %s", r)
	}
	md = readFile(t, filepath.Join(home, "runs", "p", "report.md"))
	if !strings.Contains(md, "**PASSED**") || !strings.Contains(md, "S01 (run 1), S02 (run 1)") {
		t.Errorf("the run after raising the budget:\n%s", md)
	}
}
