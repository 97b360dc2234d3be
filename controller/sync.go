package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/spec"
	"github.com/dispatch-tool/dispatch/store"
)

// PlanRow is how one task will be scheduled: its tool and the nodes that may
// take it.
type PlanRow struct {
	Task  *spec.Task
	Tools map[string]string // node → tool
	Nodes []string
}

// PlanError lists tasks that cannot run anywhere, or with a tool nobody
// knows; it is a configuration error (exit 2).
type PlanError struct {
	Problems []string
}

func (e *PlanError) Error() string { return strings.Join(e.Problems, "\n") }

// Plan checks that every task of p can run on at least one of the nodes
// (pin, tags, routes) with a known tool, and says where each may go.
func Plan(cfg *nodes.Config, p *spec.Project, only []string) ([]PlanRow, error) {
	var rows []PlanRow
	var problems []string
	opts := projectOptionsFor(cfg, p, StartOptions{})
	if opts.Integration {
		// The generated phase tasks must be able to run somewhere too.
		for _, typ := range []string{"integration", "verification", "fix"} {
			if typ != "integration" && !opts.Verification {
				continue
			}
			id := map[string]string{"integration": IntegrationID, "verification": "V01", "fix": "F01"}[typ]
			if _, own := opts.Overrides[id]; own {
				continue
			}
			st := store.Task{Type: typ, Tool: opts.PhaseTool}
			ok := false
			for _, n := range cfg.Nodes {
				if len(only) > 0 && !slices.Contains(only, n.Name) {
					continue
				}
				if e, _ := eligible(cfg, &st, n); e {
					if _, _, err := toolCommand(cfg, toolFor(st.Tool, n), "", false); err == nil {
						ok = true
					}
				}
			}
			if !ok {
				problems = append(problems, fmt.Sprintf("%s: no node can run the generated %s task (%s)\n  fix: route type %s to a tag some node has, or set integration: false in project.yaml",
					p.Dir, typ, id, typ))
			}
		}
	}
	for _, t := range p.Tasks {
		row := PlanRow{Task: t, Tools: map[string]string{}}
		st := storeTask(p, t, cfg)
		var reasons []string
		if t.Node != "" {
			if _, ok := cfg.Node(t.Node); !ok {
				problems = append(problems, fmt.Sprintf("%s: node %q is not in %s\n  fix: use one of %s", t.File, t.Node, cfg.File, strings.Join(nodeNames(cfg), ", ")))
				continue
			}
		}
		for _, n := range cfg.Nodes {
			if len(only) > 0 && !slices.Contains(only, n.Name) {
				continue
			}
			if ok, why := eligible(cfg, &st, n); !ok {
				reasons = append(reasons, n.Name+": "+why)
				continue
			}
			if why := modeProblem(cfg, n, os.LookupEnv); why != "" {
				reasons = append(reasons, n.Name+": "+why)
				continue
			}
			tool := toolFor(t.Tool, n)
			if _, _, err := toolCommand(cfg, tool, t.Model, false); err != nil {
				reasons = append(reasons, n.Name+": "+err.Error())
				continue
			}
			row.Nodes = append(row.Nodes, n.Name)
			row.Tools[n.Name] = tool
		}
		if len(row.Nodes) == 0 {
			problems = append(problems, fmt.Sprintf("%s: no node can run task %s (%s)\n  fix: adjust its tags/node/tool, or routes and node tags in %s",
				t.File, t.ID, strings.Join(reasons, "; "), cfg.File))
			continue
		}
		rows = append(rows, row)
	}
	if len(problems) > 0 {
		return rows, &PlanError{Problems: problems}
	}
	return rows, nil
}

// modeProblem says why a node's api_mode cannot be used with this
// controller's environment (a ${VAR} that is not set), or "".
func modeProblem(cfg *nodes.Config, n nodes.Node, lookup func(string) (string, bool)) string {
	mode, ok := cfg.APIModes[n.APIMode]
	if !ok {
		return ""
	}
	for _, k := range sortedKeys(mode.Env) {
		if _, err := nodes.ExpandEnv(mode.Env[k], lookup); err != nil {
			return fmt.Sprintf("api_mode %s: %s: %v (export it in the controller's environment)", n.APIMode, k, err)
		}
	}
	return ""
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func nodeNames(cfg *nodes.Config) []string {
	var out []string
	for _, n := range cfg.Nodes {
		out = append(out, n.Name)
	}
	return out
}

func storeTask(p *spec.Project, t *spec.Task, cfg *nodes.Config) store.Task {
	maxRetries := cfg.Controller.MaxRetries
	if t.MaxRetries != nil {
		maxRetries = *t.MaxRetries
	}
	deps := t.DependsOn
	if deps == nil {
		deps = []string{}
	}
	return store.Task{Project: p.Name, ID: t.ID, Title: t.Title, Type: t.Type, Tool: t.Tool, Model: t.Model,
		Priority: t.Priority, DependsOn: deps, Tags: t.Tags, NodePin: t.Node, Timeout: t.Timeout,
		MaxRetries: maxRetries, SpecFile: t.File, SpecHash: t.Hash, Snapshot: t.Snapshot}
}

// SyncResult says what AddProject found.
type SyncResult struct {
	Added int
	// Changed lists tasks whose spec file changed after they ran; they keep
	// their snapshot until `dispatch retry`.
	Changed []string
	// Updated lists tasks that had not run yet and took the new spec.
	Updated []string
	// Finished is set when the project had finished and this start brought
	// no new work: it stays finished with its result.
	Finished bool
}

// StartOptions are the switches of `dispatch start` that shape a project.
type StartOptions struct {
	IntegratePartial bool // run the integration phase even if some author task failed
	NoIntegrate      bool // skip the integration phase
}

// projectOptionsFor resolves a project's settings from project.yaml,
// nodes.yaml and the start switches.
func projectOptionsFor(cfg *nodes.Config, p *spec.Project, so StartOptions) ProjectOptions {
	o := ProjectOptions{HaltFail: p.Config.Halt.Fail, Setup: p.Config.Setup, Integration: true, Verification: true,
		MaxFixRounds: cfg.Controller.MaxFixRounds, IntegratePartial: so.IntegratePartial, Overrides: map[string]PhaseSpec{}}
	if p.Config.Integration != nil {
		o.Integration = *p.Config.Integration
	}
	if p.Config.Verification != nil {
		o.Verification = *p.Config.Verification
	}
	if so.NoIntegrate {
		o.Integration = false
	}
	if p.Config.MaxFixRounds != nil {
		o.MaxFixRounds = *p.Config.MaxFixRounds
	}
	for _, t := range p.Tasks {
		if IsPhaseID(t.ID) {
			o.Overrides[t.ID] = PhaseSpec{Title: t.Title, File: t.File, Tool: t.Tool, Model: t.Model, Timeout: t.Timeout,
				Tags: t.Tags, Node: t.Node, Snapshot: t.Snapshot, Hash: t.Hash}
		}
	}
	if p.Config.IntegrationSpec != "" {
		file := filepath.Join(p.Dir, p.Config.IntegrationSpec)
		if b, err := os.ReadFile(file); err == nil {
			o.Overrides[IntegrationID] = PhaseSpec{Title: "Integrate the outputs", File: file, Tool: p.Config.Tool, Snapshot: b}
		}
	}
	return o
}

// AddProject records a project and its author tasks (new tasks are
// pending; tasks that have not started take a changed spec; started tasks
// keep their snapshot) and marks the project active. Phase tasks (S99, V*,
// F*) are created by the controller when their phase comes; author files
// for them replace the generated specs.
func AddProject(ctx context.Context, st *store.Store, cfg *nodes.Config, p *spec.Project, so StartOptions) (SyncResult, error) {
	var res SyncResult
	opts := projectOptionsFor(cfg, p, so)
	ob, _ := json.Marshal(opts)
	var baseDir string
	if p.Config.Base != "" {
		baseDir = filepath.Join(p.Dir, p.Config.Base)
	}
	var authorTasks []*spec.Task
	for _, t := range p.Tasks {
		if !IsPhaseID(t.ID) {
			authorTasks = append(authorTasks, t)
		}
	}
	existing, err := st.Tasks(ctx, p.Name)
	if err != nil {
		return res, err
	}
	have := map[string]store.Task{}
	for _, t := range existing {
		have[t.ID] = t
	}
	// A finished project stays finished, with its result and times, unless
	// this start brings new work: new tasks, or changed specs of tasks that
	// never ran.
	keepFinished, wasDone := false, false
	if old, err := st.Project(ctx, p.Name); err == nil && old.State == store.ProjectDone {
		keepFinished, wasDone = true, true
		for _, t := range authorTasks {
			o, ok := have[t.ID]
			if !ok || ((o.Status == store.Pending || o.Status == store.Blocked) && o.SpecHash != t.Hash) {
				keepFinished = false
			}
		}
	}
	err = st.Update(ctx, func(tx *store.Tx) error {
		res = SyncResult{Finished: keepFinished}
		if keepFinished {
			for _, t := range authorTasks {
				if have[t.ID].SpecHash != t.Hash {
					res.Changed = append(res.Changed, t.ID)
				}
			}
			return nil
		}
		if err := tx.EnsureProject(ctx, p.Name, string(ob)); err != nil {
			return err
		}
		if wasDone {
			// New work for a finished project: once it has run, the
			// integration phase runs again over every output, as after
			// `dispatch retry` of an author task. The old phase tasks go;
			// the phase makes them afresh.
			if err := reopenPhase(ctx, tx, p.Name, existing); err != nil {
				return err
			}
		}
		for _, t := range authorTasks {
			nt := storeTask(p, t, cfg)
			nt.BaseDir = baseDir
			old, ok := have[t.ID]
			if !ok {
				res.Added++
				if err := tx.InsertTask(ctx, nt); err != nil {
					return err
				}
				continue
			}
			if old.SpecHash == nt.SpecHash && sameSettings(old, nt) {
				continue
			}
			if old.Status != store.Pending && old.Status != store.Blocked {
				if old.SpecHash != nt.SpecHash {
					res.Changed = append(res.Changed, t.ID)
				}
				continue
			}
			res.Updated = append(res.Updated, t.ID)
			if err := tx.SetTask(ctx, p.Name, t.ID, store.Set{"title": nt.Title, "type": nt.Type, "tool": nt.Tool,
				"model": nt.Model, "priority": nt.Priority, "depends_on": nt.DependsOn, "tags": nt.Tags,
				"node_pin": nt.NodePin, "timeout_seconds": nt.Timeout, "max_retries": nt.MaxRetries,
				"spec_file": nt.SpecFile, "spec_hash": nt.SpecHash, "snapshot": nt.Snapshot, "base_dir": nt.BaseDir}); err != nil {
				return err
			}
			if err := tx.Event(ctx, store.Event{Project: p.Name, Task: t.ID, Kind: "spec", Message: "spec changed before the task ran; using the new one"}); err != nil {
				return err
			}
		}
		return nil
	})
	return res, err
}

func sameSettings(a, b store.Task) bool {
	return a.Title == b.Title && a.Type == b.Type && a.Tool == b.Tool && a.Model == b.Model &&
		a.Priority == b.Priority && slices.Equal(a.DependsOn, b.DependsOn) && slices.Equal(a.Tags, b.Tags) &&
		a.NodePin == b.NodePin && a.Timeout == b.Timeout && a.MaxRetries == b.MaxRetries && a.BaseDir == b.BaseDir
}

// reopenPhase puts a finished project back into its implementation phase:
// its phase tasks (S99, V*, F*) are removed so that the phase runs again.
func reopenPhase(ctx context.Context, tx *store.Tx, project string, tasks []store.Task) error {
	var phaseIDs []string
	for _, t := range tasks {
		if IsPhaseID(t.ID) {
			phaseIDs = append(phaseIDs, t.ID)
		}
	}
	if len(phaseIDs) > 0 {
		if err := tx.DeleteTasks(ctx, project, phaseIDs); err != nil {
			return err
		}
	}
	return tx.SetProject(ctx, project, store.Set{"phase": PhaseImplementation}, "new tasks: the integration phase runs again once they are done")
}
