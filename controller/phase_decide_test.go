package controller

import (
	"fmt"
	"strings"
	"testing"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/store"
)

// TestDecidePhase: the phase machine as a decision table, over a
// project's settled tasks alone (no store, no process).
func TestDecidePhase(t *testing.T) {
	task := func(id string, status domain.Status) domain.Task {
		return domain.Task{ID: id, Status: status, Attempt: 1, BaseDir: "/base/" + id}
	}
	phase := func(ts ...domain.Task) map[string]domain.Task {
		m := map[string]domain.Task{}
		for _, t := range ts {
			m[t.ID] = t
		}
		return m
	}
	gated := func(runs ...*store.GateRun) map[string]*store.GateRun {
		m := map[string]*store.GateRun{}
		for _, g := range runs {
			m[g.Task] = g
		}
		return m
	}
	gate := func(id string, passed bool) *store.GateRun {
		g := &store.GateRun{Task: id, Attempt: 1, Command: "make test", Passed: passed}
		if !passed {
			g.ExitCode, g.OutputTail = 2, "FAIL x\n"
		}
		return g
	}
	gateIssue := func(id string) string {
		return "[The project's gate `make test` failed on the result of " + id + " (exit status 2). The end of its output:\n\n```\nFAIL x\n```]"
	}
	withGate := domain.ProjectOptions{Verification: true, MaxFixRounds: 2, Gate: &domain.GateOptions{Project: "make test"}}
	pass := &store.Verdict{Pass: true}
	fail := &store.Verdict{Issues: []string{"tests fail"}}
	const running = domain.Running
	for _, tc := range []struct {
		name    string
		in      phaseInput
		want    string
		verdict bool // the verdict is recorded
	}{
		{"no integration", phaseInput{phase: domain.PhaseImplementation, allCompleted: true}, "finish passed", false},
		{"no integration, a task failed", phaseInput{phase: domain.PhaseImplementation}, "finish failed", false},
		{"a task failed, the budget canceled others", phaseInput{phase: domain.PhaseImplementation, opts: domain.ProjectOptions{Integration: true}, budget: "budget spent"},
			"budget: budget spent", false},
		{"a task failed", phaseInput{phase: domain.PhaseImplementation, opts: domain.ProjectOptions{Integration: true}},
			"finish failed: integration skipped: not every task completed (dispatch start --integrate-partial runs it anyway)", false},
		{"a task failed, --integrate-partial", phaseInput{phase: domain.PhaseImplementation, opts: domain.ProjectOptions{Integration: true, IntegratePartial: true}},
			"integrate", false},
		{"all completed, over budget", phaseInput{phase: domain.PhaseImplementation, allCompleted: true, opts: domain.ProjectOptions{Integration: true}, budget: "b"},
			"budget: b", false},
		{"all completed", phaseInput{phase: domain.PhaseImplementation, allCompleted: true, opts: domain.ProjectOptions{Integration: true}}, "integrate", false},

		{"S99 runs", phaseInput{phase: domain.PhaseIntegration, phaseTasks: phase(task("S99", running))}, "wait", false},
		{"S99 failed", phaseInput{phase: domain.PhaseIntegration, phaseTasks: phase(task("S99", domain.Failed))}, "finish failed: integration task S99 failed", false},
		{"S99 done, no verification", phaseInput{phase: domain.PhaseIntegration, allCompleted: true, runsDir: "/runs", phaseTasks: phase(task("S99", domain.Completed))},
			"finish passed final=/runs/S99/output", false},
		{"S99 done, over budget", phaseInput{phase: domain.PhaseIntegration, allCompleted: true, budget: "b", opts: domain.ProjectOptions{Verification: true},
			phaseTasks: phase(task("S99", domain.Completed))}, "budget: b", false},
		{"S99 done", phaseInput{phase: domain.PhaseIntegration, allCompleted: true, runsDir: "/runs", opts: domain.ProjectOptions{Verification: true},
			phaseTasks: phase(task("S99", domain.Completed))}, "verify 1 on /runs/S99/output", false},

		{"no verification task", phaseInput{phase: domain.PhaseVerification}, "error: in phase verification without a verification task", false},
		{"V01 runs", phaseInput{phase: domain.PhaseVerification, phaseTasks: phase(task("V01", running))}, "wait", false},
		{"V01 passed", phaseInput{phase: domain.PhaseVerification, allCompleted: true, verdict: pass, phaseTasks: phase(task("V01", domain.Completed))},
			"finish passed final=/base/V01", true},
		{"V01 failed, a fix round left", phaseInput{phase: domain.PhaseVerification, opts: domain.ProjectOptions{MaxFixRounds: 1}, verdict: fail,
			phaseTasks: phase(task("V01", domain.Completed))}, "fix 1 on /base/V01 [tests fail]", true},
		{"V01 failed, over budget", phaseInput{phase: domain.PhaseVerification, opts: domain.ProjectOptions{MaxFixRounds: 1}, verdict: fail, budget: "b",
			phaseTasks: phase(task("V01", domain.Completed))}, "budget: b", true},
		{"V02 failed, no fix round left", phaseInput{phase: domain.PhaseVerification, opts: domain.ProjectOptions{MaxFixRounds: 1}, verdict: fail,
			phaseTasks: phase(task("V01", domain.Completed), task("F01", domain.Completed), task("V02", domain.Completed))},
			"finish failed: verification failed after 1 fix round(s) (max_fix_rounds) final=/base/V02", true},

		{"S99 done, gate failed", phaseInput{phase: domain.PhaseIntegration, allCompleted: true, runsDir: "/runs", opts: withGate,
			phaseTasks: phase(task("S99", domain.Completed)), gates: gated(gate("S99", false))}, "fix 1 on /runs/S99/output " + gateIssue("S99"), false},
		{"S99 done, not gated", phaseInput{phase: domain.PhaseIntegration, allCompleted: true, runsDir: "/runs", opts: withGate,
			phaseTasks: phase(task("S99", domain.Completed)), gates: gated()}, "fix 1 on /runs/S99/output [The project's gate `make test` failed on the result of S99 (the result of S99 was not gated). The end of its output:\n\n```\n\n```]", false},
		{"S99 done, gate failed, no fix round", phaseInput{phase: domain.PhaseIntegration, allCompleted: true, runsDir: "/runs",
			opts:       domain.ProjectOptions{Verification: true, Gate: &domain.GateOptions{Project: "make test"}},
			phaseTasks: phase(task("S99", domain.Completed)), gates: gated(gate("S99", false))},
			"finish failed: the project gate failed on the result of S99 after 0 fix round(s) (max_fix_rounds): exit status 2 final=/runs/S99/output", false},
		{"S99 done, gate failed, over budget", phaseInput{phase: domain.PhaseIntegration, allCompleted: true, runsDir: "/runs", opts: withGate, budget: "b",
			phaseTasks: phase(task("S99", domain.Completed)), gates: gated(gate("S99", false))}, "budget: b", false},
		{"S99 done, gate passed", phaseInput{phase: domain.PhaseIntegration, allCompleted: true, runsDir: "/runs", opts: withGate,
			phaseTasks: phase(task("S99", domain.Completed)), gates: gated(gate("S99", true))}, "verify 1 on /runs/S99/output", false},
		{"F01 after a gate, gate passed", phaseInput{phase: domain.PhaseFix, allCompleted: true, runsDir: "/runs", opts: withGate,
			phaseTasks: phase(task("S99", domain.Completed), task("F01", domain.Completed)), gates: gated(gate("S99", false), gate("F01", true))},
			"verify 2 on /runs/F01/output", false},
		{"F01 after a gate, gate passed, no verification", phaseInput{phase: domain.PhaseFix, allCompleted: true, runsDir: "/runs",
			opts:       domain.ProjectOptions{MaxFixRounds: 2, Gate: &domain.GateOptions{Project: "make test"}},
			phaseTasks: phase(task("S99", domain.Completed), task("F01", domain.Completed)), gates: gated(gate("S99", false), gate("F01", true))},
			"finish passed final=/runs/F01/output", false},
		{"F01 after a gate, gate failed again", phaseInput{phase: domain.PhaseFix, allCompleted: true, runsDir: "/runs", opts: withGate,
			phaseTasks: phase(task("S99", domain.Completed), task("F01", domain.Completed)), gates: gated(gate("S99", false), gate("F01", false))},
			"fix 2 on /runs/F01/output " + gateIssue("F01"), false},
		{"F02 gate failed, fix rounds spent", phaseInput{phase: domain.PhaseFix, allCompleted: true, runsDir: "/runs", opts: withGate,
			phaseTasks: phase(task("S99", domain.Completed), task("F01", domain.Completed), task("F02", domain.Completed)),
			gates:      gated(gate("S99", false), gate("F01", false), gate("F02", false))},
			"finish failed: the project gate failed on the result of F02 after 2 fix round(s) (max_fix_rounds): exit status 2 final=/runs/F02/output", false},
		{"F01 after a gate failed", phaseInput{phase: domain.PhaseFix, opts: withGate,
			phaseTasks: phase(task("S99", domain.Completed), task("F01", domain.Failed)), gates: gated(gate("S99", false))},
			"finish failed: fix task F01 failed final=/base/F01", false},
		{"V02 after a gate-driven F01 passed", phaseInput{phase: domain.PhaseVerification, allCompleted: true, verdict: pass, opts: withGate,
			phaseTasks: phase(task("S99", domain.Completed), task("F01", domain.Completed), task("V02", domain.Completed)),
			gates:      gated(gate("S99", false), gate("F01", true))}, "finish passed final=/base/V02", true},

		{"F01 runs", phaseInput{phase: domain.PhaseFix, phaseTasks: phase(task("V01", domain.Completed), task("F01", running))}, "wait", false},
		{"F01 failed", phaseInput{phase: domain.PhaseFix, phaseTasks: phase(task("V01", domain.Completed), task("F01", domain.Failed))},
			"finish failed: fix task F01 failed final=/base/V01", false},
		{"F01 done, over budget", phaseInput{phase: domain.PhaseFix, budget: "b", phaseTasks: phase(task("V01", domain.Completed), task("F01", domain.Completed))},
			"budget: b", false},
		{"F01 done", phaseInput{phase: domain.PhaseFix, runsDir: "/runs", lastIssues: []string{"tests fail"},
			phaseTasks: phase(task("V01", domain.Completed), task("F01", domain.Completed))}, "verify 2 on /runs/F01/output [tests fail]", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.in.done == nil {
				tc.in.done = func(t domain.Task) bool { return domain.Terminal(t.Status) }
			}
			step := decidePhase(tc.in)
			if got := describeStep(step); got != tc.want || (step.verdict != nil) != tc.verdict {
				t.Errorf("got %q (verdict recorded: %v), want %q (%v)", got, step.verdict != nil, tc.want, tc.verdict)
			}
		})
	}
}

// describeStep writes a phase step for the table.
func describeStep(s phaseStep) string {
	tree := func(b taskBase) string { return b.Dir + b.Commit }
	issues := ""
	if len(s.issues) > 0 {
		issues = " [" + strings.Join(s.issues, "; ") + "]"
	}
	switch {
	case s.err != nil:
		return "error: " + s.err.Error()
	case s.action == phaseWait:
		return "wait"
	case s.action == phaseBudget:
		return "budget: " + s.note
	case s.action == phaseIntegrate:
		return "integrate"
	case s.action == phaseVerify:
		return fmt.Sprintf("verify %d on %s%s", s.round, tree(s.tree), issues)
	case s.action == phaseFix:
		return fmt.Sprintf("fix %d on %s%s", s.round, tree(s.tree), issues)
	}
	out := "finish " + s.result
	if s.note != "" {
		out += ": " + s.note
	}
	if s.final != nil {
		out += " final=" + tree(*s.final)
	}
	return out
}
