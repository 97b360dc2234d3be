package main

import (
	"strings"
	"testing"
)

// TestStallTarget: the stall goal is met when none of at least 12
// consecutive runs takes more than 3× their median, and says which did.
func TestStallTarget(t *testing.T) {
	runs := func(slow ...float64) []float64 {
		out := []float64{2, 2.1, 1.9, 2, 2.2, 2, 1.8, 2, 2.1, 2}
		return append(out, slow...)
	}
	for _, tc := range []struct {
		name  string
		walls []float64
		met   bool
		says  string
	}{
		{"12 even runs", runs(2, 2.1), true, "slowest 2.20 s vs median 2.00 s = 1.10× over 12 runs"},
		{"one slow but under 3×", runs(2, 5.9), true, "= 2.95×"},
		{"a stall", runs(30.4, 2), false, "(over 3×: run 11: 30.4 s)"},
		{"too few runs", runs(2), false, "over 11 runs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := stallTarget(tc.walls)
			if got.met != tc.met || got.goal != goalStalls || !strings.Contains(got.got, tc.says) {
				t.Errorf("stallTarget = %+v; want met %v, saying %q", got, tc.met, tc.says)
			}
		})
	}
}

// TestIssue35Table: every goal of issue 35 has a row, with the verdict of
// the target that measured it, or the scenario to run.
func TestIssue35Table(t *testing.T) {
	sections := []*section{
		{targets: []target{{name: "SSH floor", got: "2.11 s vs 1.00 s = 2.11×", met: false, goal: goalFloor}, {name: "other", got: "x", met: true}}},
		{targets: []target{{name: "memory", got: "start: peak 70.0 MiB", met: true, goal: goalSpecMemory}}},
	}
	out := issue35Table(sections)
	for _, want := range []string{
		"| 200 no-op tasks ≤ 1.0× the SSH floor | 2.11 s vs 1.00 s = 2.11× | **not met** |",
		"| 10,000 specs of 4 KiB ≤ 100 MiB peak RSS | start: peak 70.0 MiB | **met** |",
		"| CPU linear: 4,000 tasks ≤ 2.2× the CPU of 2,000 | not measured in this run (`-only scale`) | |",
		"| no batch of ≥ 12 consecutive runs more than 3× the median | not measured in this run (`-only throughput`) | |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if got := strings.Count(out, "\n| ") - 1; got != len(issue35Goals) { // less the header
		t.Errorf("%d goal rows, want %d:\n%s", got, len(issue35Goals), out)
	}
}
