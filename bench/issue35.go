package main

import (
	"context"
	"fmt"
	"strings"
)

// Issue 35's goals ("At the SSH floor"), each met or not by the target a
// scenario computes: target.goal names the goal it measures.
const (
	goalFloor        = "floor"
	goalFloorStretch = "floor stretch"
	goalCPU          = "cpu"
	goalLinear       = "linear"
	goalSpecMemory   = "spec memory"
	goalStalls       = "stalls"
)

var issue35Goals = []struct{ key, want, scenario string }{
	{goalFloor, "200 no-op tasks ≤ 1.0× the SSH floor", "throughput"},
	{goalFloorStretch, "stretch: 200 no-op tasks ≤ 0.5× the SSH floor", "throughput"},
	{goalCPU, "≤ 3 ms of controller CPU per no-op task over sshd (user+sys of `dispatch start`)", "throughput"},
	{goalLinear, "CPU linear: 4,000 tasks ≤ 2.2× the CPU of 2,000", "scale"},
	{goalSpecMemory, "10,000 specs of 4 KiB ≤ 100 MiB peak RSS", "memory"},
	{goalStalls, "no batch of ≥ 12 consecutive runs more than 3× the median", "throughput"},
}

// issue35Table is RESULTS.md's table of issue 35's goals: each with the
// figure and verdict of the target that measures it in this bench run,
// or the scenario to run when none did.
func issue35Table(sections []*section) string {
	var b strings.Builder
	b.WriteString("## Issue 35: at the SSH floor\n\n")
	b.WriteString("Each goal of issue 35 with the target of this run that measures it (the same rows as above).\n\n")
	b.WriteString("| goal | measured | |\n|---|---|---|\n")
	for _, g := range issue35Goals {
		t, ok := findGoal(sections, g.key)
		if !ok {
			fmt.Fprintf(&b, "| %s | not measured in this run (`-only %s`) | |\n", g.want, g.scenario)
			continue
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", g.want, t.got, verdict(t.met))
	}
	b.WriteString("\n")
	return b.String()
}

func findGoal(sections []*section, key string) (target, bool) {
	for _, s := range sections {
		for _, t := range s.targets {
			if t.goal == key {
				return t, true
			}
		}
	}
	return target{}, false
}

// stallRuns is how many `dispatch start` batches run one after the other
// for the stall goal: the issue's "≥ 12 consecutive runs".
const stallRuns = 12

// stallLimit is how many times the median a batch may take.
const stallLimit = 3.0

// consecutive runs stallRuns batches of the throughput scenario one after
// the other (a fresh home and project each, the same nodes) and returns
// their wall times.
func (tp *throughput) consecutive(ctx context.Context) ([]float64, error) {
	var walls []float64
	for i := range stallRuns {
		d, err := tp.dispatch(ctx, "")
		if err != nil {
			return nil, fmt.Errorf("consecutive run %d: %w", i+1, err)
		}
		walls = append(walls, d)
	}
	return walls, nil
}

// stallTarget is the stall goal's target over consecutive wall times.
func stallTarget(walls []float64) target {
	med, slowest := median(walls), maxOf(walls)
	var over []string
	for i, w := range walls {
		if w > stallLimit*med {
			over = append(over, fmt.Sprintf("run %d: %s", i+1, fmtS(w)))
		}
	}
	got := fmt.Sprintf("slowest %s vs median %s = %s over %d runs", fmtS(slowest), fmtS(med), fmtRatio(slowest/med), len(walls))
	if len(over) > 0 {
		got += " (over 3×: " + strings.Join(over, ", ") + ")"
	}
	return target{name: "stalls", goal: goalStalls, got: got, met: len(walls) >= stallRuns && slowest <= stallLimit*med,
		want: fmt.Sprintf("no `dispatch start` of %d consecutive ones (200 no-op tasks each) takes more than %.0f× their median", stallRuns, stallLimit)}
}

// fmtList prints wall times in the order they were taken.
func fmtList(xs []float64) string {
	var out []string
	for _, x := range xs {
		out = append(out, fmtS(x))
	}
	return strings.Join(out, ", ")
}
