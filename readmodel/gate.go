package readmodel

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/store"
)

// GateReport is what the project's gate found in a run (report --format
// json's "gate"): the task gate's runs on author attempts, the project
// gate's after S99 and each fix round, in the order they ran, and for
// each tool and model how many attempts exited 0 and how many of those
// passed their task gate.
type GateReport struct {
	Tasks   []GateTaskRun    `json:"tasks"`
	Project []GateProjectRun `json:"project"`
	Claims  []GateClaims     `json:"claims"`
}

// GateTaskRun is one task gate run.
type GateTaskRun struct {
	ID      string  `json:"id"`
	Attempt int     `json:"attempt"`
	Passed  bool    `json:"passed"`
	Seconds float64 `json:"seconds"`
	Tree    string  `json:"tree"`
	// Reused is set when the tree had been gated before by the same
	// command: its result was taken, not run again.
	Reused     bool   `json:"reused,omitempty"`
	Error      string `json:"error,omitempty"`
	OutputTail string `json:"output_tail,omitempty"`
}

// GateProjectRun is one project gate run: after S99 or a fix round, or
// on the base before any task ("after": "base", gate.baseline).
type GateProjectRun struct {
	After      string  `json:"after"`
	Attempt    int     `json:"attempt"`
	Passed     bool    `json:"passed"`
	Seconds    float64 `json:"seconds"`
	Tree       string  `json:"tree"`
	Reused     bool    `json:"reused,omitempty"`
	Error      string  `json:"error,omitempty"`
	OutputTail string  `json:"output_tail"`
}

// GateClaims is "claims vs gate" for one tool and model: of the attempts
// that ran under a task gate, how many exited 0 (the tool's claim) and
// how many of those passed the gate.
type GateClaims struct {
	Tool       string `json:"tool"`
	Model      string `json:"model"`
	ExitedZero int    `json:"exited_zero"`
	PassedGate int    `json:"passed_gate"`
}

// addGate adds the gate runs of run, with the tools and models of tasks.
func (r *Report) addGate(ctx context.Context, st *store.Store, project string, run int, tasks []domain.Task) error {
	runs, err := st.GateRuns(ctx, project, run)
	if err != nil || len(runs) == 0 {
		return err
	}
	byID := map[string]domain.Task{}
	for _, t := range tasks {
		byID[t.ID] = t
	}
	g := &GateReport{Tasks: []GateTaskRun{}, Project: []GateProjectRun{}, Claims: []GateClaims{}}
	claims := map[[2]string]*GateClaims{}
	for _, gr := range runs {
		if domain.IsPhaseID(gr.Task) || gr.Task == domain.BaselineID {
			after := gr.Task
			if after == domain.BaselineID {
				after = "base" // the baseline: the project gate on the base, before any task
			}
			g.Project = append(g.Project, GateProjectRun{After: after, Attempt: gr.Attempt, Passed: gr.Passed, Seconds: gr.Seconds,
				Tree: gr.Tree, Reused: gr.Reused, Error: gr.Error, OutputTail: gr.OutputTail})
			continue
		}
		tr := GateTaskRun{ID: gr.Task, Attempt: gr.Attempt, Passed: gr.Passed, Seconds: gr.Seconds, Tree: gr.Tree, Reused: gr.Reused, Error: gr.Error}
		if !gr.Passed {
			tr.OutputTail = gr.OutputTail
		}
		g.Tasks = append(g.Tasks, tr)
		// A task gate runs only on an attempt whose tool exited 0. The
		// tool is the one the attempt ran (a row of an older dispatch
		// has none: the task's own, "" for its node's).
		tool, model := gr.Tool, gr.Model
		if tool == "" {
			tool, model = byID[gr.Task].Tool, byID[gr.Task].Model
		}
		k := [2]string{tool, model}
		c := claims[k]
		if c == nil {
			c = &GateClaims{Tool: tool, Model: model}
			claims[k] = c
		}
		c.ExitedZero++
		if gr.Passed {
			c.PassedGate++
		}
	}
	for _, c := range claims {
		g.Claims = append(g.Claims, *c)
	}
	sort.Slice(g.Claims, func(i, j int) bool {
		a, b := g.Claims[i], g.Claims[j]
		return a.Tool < b.Tool || a.Tool == b.Tool && a.Model < b.Model
	})
	r.Gate = g
	return nil
}

// mdGate is the report's Gate section.
func (r *Report) mdGate(b *strings.Builder) {
	g := r.Gate
	if g == nil {
		return
	}
	b.WriteString("## Gate\n\n")
	b.WriteString("dispatch ran the project's own checks (project.yaml `gate:`) on the results; an agent's claim counts only when they pass.\n\n")
	if len(g.Claims) > 0 {
		b.WriteString("Claims vs gate — attempts whose tool exited 0, and how many of those passed their task gate:\n\n")
		for _, c := range g.Claims {
			tool := c.Tool
			if tool == "" {
				tool = "the node's tool"
			}
			if c.Model != "" {
				tool += " (" + c.Model + ")"
			}
			fmt.Fprintf(b, "- %s: %d exited 0, %d passed the gate\n", tool, c.ExitedZero, c.PassedGate)
		}
		b.WriteString("\n")
	}
	b.WriteString("| gated | attempt | tree | result | time |\n|---|---|---|---|---|\n")
	row := func(what string, attempt int, tree string, passed, reused bool, errText string, seconds float64) {
		res := "passed"
		if !passed {
			res = "**failed**"
			if errText != "" {
				if len(errText) > 200 {
					errText = errText[:200] + "…"
				}
				res += ": " + mdCell(errText)
			}
		}
		if reused {
			res += " (this tree's earlier result)"
		}
		fmt.Fprintf(b, "| %s | %d | `%s` | %s | %s |\n", what, attempt, shortTree(tree), res, FormatSeconds(seconds))
	}
	for _, t := range g.Tasks {
		row(t.ID, t.Attempt, t.Tree, t.Passed, t.Reused, t.Error, t.Seconds)
	}
	for _, p := range g.Project {
		row(projectGated(p.After), p.Attempt, p.Tree, p.Passed, p.Reused, p.Error, p.Seconds)
	}
	b.WriteString("\n")
	tails := func(what string, attempt int, passed bool, tail string) {
		if passed || strings.TrimSpace(tail) == "" {
			return
		}
		fmt.Fprintf(b, "Output of the failed gate on %s (attempt %d), its end:\n\n```\n%s\n```\n\n", what, attempt, strings.TrimRight(tail, "\n"))
	}
	for _, t := range g.Tasks {
		tails(t.ID, t.Attempt, t.Passed, t.OutputTail)
	}
	for _, p := range g.Project {
		tails(projectGated(p.After), p.Attempt, p.Passed, p.OutputTail)
	}
	if len(g.Project) > 0 && g.Project[0].After == "base" && !g.Project[0].Passed {
		b.WriteString("The base itself failed the project gate (gate.baseline): the tasks started from a tree that fails it, so a failure later is not necessarily theirs.\n\n")
	}
}

// projectGated names what a project gate run checked.
func projectGated(after string) string {
	if after == "base" {
		return "project, on the base (baseline)"
	}
	return "project, after " + after
}

// shortTree is a tree's kind and the first 12 digits of its digest.
func shortTree(tree string) string {
	kind, sum, ok := strings.Cut(tree, ":")
	if !ok || len(sum) <= 12 {
		return tree
	}
	return kind + ":" + sum[:12]
}
