package plan

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/dispatch-tool/dispatch/control"
	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/policy"
	"github.com/dispatch-tool/dispatch/spec"
)

// Row is how one task will be scheduled: its tool and the nodes that may
// take it.
type Row struct {
	Task *spec.Task
	// Type is the task's type; a phase task's is its phase's.
	Type string
	// Generated is set for a phase task the controller writes the spec of.
	Generated bool
	Tools     map[string]string // node → tool
	Nodes     []string
	// Git is set in a git-native project (repo:): its nodes need git.
	Git bool
	// Waits says what a phase task waits for (its dependencies are not
	// in its spec: the phase machine starts it); "" for an author task.
	Waits string
}

// Error lists tasks that cannot run anywhere, or with a tool nobody
// knows; it is a configuration error (exit 2).
type Error struct {
	Problems []string
}

// BadInput marks a plan that cannot run as the operator's to fix (exit 2).
func (e *Error) BadInput() bool { return true }

func (e *Error) Error() string { return strings.Join(e.Problems, "\n") }

// Plan checks that every task of p — the author's and the phase tasks the
// controller will generate (S99, V01, F01, per project.yaml and so) — can
// run on at least one of the nodes (pin, tags, routes) with a known tool,
// and says where each may go. A phase task's type is its phase's, whether
// the author wrote its spec or not.
func Plan(cfg *nodes.Config, p *spec.Project, only []string, so control.StartOptions) ([]Row, error) {
	if err := Expand(cfg, p, only); err != nil {
		return nil, err
	}
	var rows []Row
	var problems []string
	opts := projectOptionsFor(cfg, p, so)
	place := func(row *Row, st domain.Task) (reasons []string) {
		row.Tools = map[string]string{}
		for _, n := range cfg.Nodes {
			if len(only) > 0 && !slices.Contains(only, n.Name) {
				continue
			}
			if ok, why := policy.Eligible(cfg, &st, n); !ok {
				reasons = append(reasons, n.Name+": "+why)
				continue
			}
			if why := policy.ModeProblem(cfg, n, os.LookupEnv); why != "" {
				reasons = append(reasons, n.Name+": "+why)
				continue
			}
			tool := policy.ToolFor(st.Tool, n)
			if _, _, _, err := policy.ToolCommand(cfg, tool, st.Model, false, false, ""); err != nil {
				reasons = append(reasons, n.Name+": "+err.Error())
				continue
			}
			row.Nodes = append(row.Nodes, n.Name)
			row.Tools[n.Name] = tool
		}
		return reasons
	}
	var authors []string
	for _, t := range p.Tasks {
		if !domain.IsPhaseID(t.ID) {
			authors = append(authors, t.ID)
		}
	}
	for _, t := range p.Tasks {
		if t.Node != "" {
			if _, ok := cfg.Node(t.Node); !ok {
				problems = append(problems, fmt.Sprintf("%s: node %q is not in %s\n  fix: use one of %s", t.File, t.Node, cfg.File, strings.Join(nodeNames(cfg), ", ")))
				continue
			}
		}
		if why := envProblem(t); why != "" {
			problems = append(problems, fmt.Sprintf("%s: task %s: %s\n  fix: export it in the controller's environment, or change env: in its front matter", t.File, t.ID, why))
			continue
		}
		st := storeTask(p, t, cfg)
		row := Row{Task: t, Type: t.Type, Git: p.Config.Source != nil}
		if domain.IsPhaseID(t.ID) {
			typ := phaseType(t.ID)
			if !phaseRuns(opts, typ) {
				continue // the phase is off: this spec never runs
			}
			st.Type, row.Type = typ, typ
			row.Waits = phaseWaits(typ, authors, opts.GateFor(domain.IntegrationID) != "")
		}
		if reasons := place(&row, st); len(row.Nodes) == 0 {
			problems = append(problems, fmt.Sprintf("%s: no node can run task %s (%s)\n  fix: adjust its tags/node/tool, or routes and node tags in %s",
				t.File, t.ID, strings.Join(reasons, "; "), cfg.File))
			continue
		}
		rows = append(rows, row)
	}
	for _, typ := range []string{"integration", "verification", "fix"} {
		id := map[string]string{"integration": domain.IntegrationID, "verification": domain.VerifyID(1), "fix": domain.FixID(1)}[typ]
		if _, own := opts.Overrides[id]; own || !phaseRuns(opts, typ) {
			continue
		}
		row := Row{Task: &spec.Task{ID: id, Title: "(generated " + typ + " task)", Type: typ, Priority: 1,
			Sandbox: opts.Sandbox, Network: opts.Network, Limits: opts.Limits}, Type: typ, Generated: true, Git: p.Config.Source != nil,
			Waits: phaseWaits(typ, authors, opts.GateFor(domain.IntegrationID) != "")}
		if reasons := place(&row, domain.Task{ID: id, Type: typ, Tool: opts.PhaseTool, Sandbox: opts.Sandbox, Network: opts.Network}); len(row.Nodes) == 0 {
			problems = append(problems, fmt.Sprintf("%s: no node can run the generated %s task (%s: %s)\n  fix: route type %s to a tag some node has, or set integration: false in project.yaml",
				p.Dir, typ, id, strings.Join(reasons, "; "), typ))
			continue
		}
		if shell := shellNodes(cfg, row); len(shell) > 0 {
			problems = append(problems, fmt.Sprintf("%s: the generated %s task %s could run on %s with tool shell, which runs its spec as a shell script; "+
				"the spec dispatch writes for %s is a prompt for an agent\n"+
				"  fix: set `tool:` on %s to an agent (claude, codex, gemini) in %s, route type %s to nodes with one (routes:), write your own %s spec, or set %s in project.yaml",
				p.Dir, typ, id, strings.Join(shell, ", "), id, strings.Join(shell, ", "), cfg.File, typ, id, phaseOff(typ)))
			continue
		}
		rows = append(rows, row)
	}
	if len(problems) > 0 {
		return rows, &Error{Problems: problems}
	}
	return rows, nil
}

// Expand makes the tasks of p's broadcasts (front matter nodes:), one per
// eligible node of cfg (of only, when given): see spec.ExpandBroadcast.
// Plan calls it; a project expanded before is left as it is.
func Expand(cfg *nodes.Config, p *spec.Project, only []string) error {
	var ns []spec.Node
	for _, n := range cfg.Nodes {
		if len(only) == 0 || slices.Contains(only, n.Name) {
			ns = append(ns, spec.Node{Name: n.Name, Tags: n.Tags})
		}
	}
	return p.ExpandBroadcast(ns)
}

// envProblem says which ${VAR} of t's env: the controller's environment
// lacks, or "".
func envProblem(t *spec.Task) string {
	for _, k := range slices.Sorted(maps.Keys(t.Env)) {
		if _, err := nodes.ExpandEnv(t.Env[k], os.LookupEnv); err != nil {
			return fmt.Sprintf("env %s: %v", k, err)
		}
	}
	return ""
}

// shellNodes lists the nodes of a row that would run it with the built-in
// shell tool (/bin/sh on the spec).
func shellNodes(cfg *nodes.Config, row Row) []string {
	if _, own := cfg.Tools["shell"]; own {
		return nil // nodes.yaml's own "shell" tool, whatever it runs
	}
	var out []string
	for _, n := range row.Nodes {
		if row.Tools[n] == "shell" {
			out = append(out, n)
		}
	}
	return out
}

// phaseOff is the project.yaml setting that turns a phase's tasks off.
func phaseOff(typ string) string {
	switch typ {
	case "verification":
		return "verification: false"
	case "fix":
		return "max_fix_rounds: 0"
	}
	return "integration: false"
}

// phaseType is the task type of a phase task ID.
func phaseType(id string) string {
	switch domain.PhaseOf(id) {
	case domain.PhaseIntegration:
		return "integration"
	case domain.PhaseVerification:
		return "verification"
	}
	return "fix"
}

// phaseRuns reports whether the phase tasks of type typ can run at all.
// maxWaitsListed is how many author tasks the integration task's row
// names before it counts them instead.
const maxWaitsListed = 5

// phaseWaits is what the phase task of type typ waits for: the
// integration task for every author task, the first verification for
// the integration (and the project gate passing on its result), the
// first fix round for a failing verdict.
func phaseWaits(typ string, authors []string, projectGate bool) string {
	switch typ {
	case "integration":
		if len(authors) > maxWaitsListed {
			return fmt.Sprintf("all %d author tasks", len(authors))
		}
		return strings.Join(authors, ",")
	case "verification":
		if projectGate {
			return domain.IntegrationID + " (its gate passed)"
		}
		return domain.IntegrationID
	}
	if projectGate {
		return domain.VerifyID(1) + " (a fail verdict) or " + domain.IntegrationID + "'s gate failing"
	}
	return domain.VerifyID(1) + " (a fail verdict)"
}

func phaseRuns(o domain.ProjectOptions, typ string) bool {
	switch typ {
	case "integration":
		return o.Integration
	case "verification":
		return o.Integration && o.Verification
	}
	return o.Integration && o.Verification && o.MaxFixRounds > 0
}

func nodeNames(cfg *nodes.Config) []string {
	var out []string
	for _, n := range cfg.Nodes {
		out = append(out, n.Name)
	}
	return out
}
