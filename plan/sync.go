package plan

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"slices"

	"github.com/dispatch-tool/dispatch/control"
	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/spec"
	"github.com/dispatch-tool/dispatch/store"
)

// storeTask is t as the store records it, without its snapshot: that is
// read from the spec file (spec.Project.Snapshot) only where a task is
// written, one at a time, so that a project's specs are never all in
// memory at once.
func storeTask(p *spec.Project, t *spec.Task, cfg *nodes.Config) domain.Task {
	maxRetries := cfg.Controller.MaxRetries
	if t.MaxRetries != nil {
		maxRetries = *t.MaxRetries
	}
	deps := t.DependsOn
	if deps == nil {
		deps = []string{}
	}
	return domain.Task{Project: p.Name, ID: t.ID, Title: t.Title, Type: t.Type, Tool: t.Tool, Model: t.Model,
		Priority: t.Priority, DependsOn: deps, Tags: t.Tags, NodePin: t.Node, Timeout: t.Timeout, Stall: t.Stall,
		MaxRetries: maxRetries, SpecFile: t.File, SpecHash: t.Hash, Sandbox: t.Sandbox, Network: t.Network, Limits: t.Limits,
		Env: t.Env, RetryBackoff: t.RetryBackoff, Files: t.Files, StartFrom: t.StartFrom, OnConflict: t.OnConflict, NotPreemptible: t.NotPreemptible}
}

// SyncResult says what AddProject found.
type SyncResult struct {
	Added int
	// Changed lists tasks whose spec file changed after they ran; they keep
	// their snapshot until `dispatch retry`.
	Changed []string
	// Updated lists tasks that had not run yet and took the new spec.
	Updated []string
	// BaseMoved lists tasks that ran from an older commit of the
	// project's repository than repo:/ref: now name; they keep their
	// results until `dispatch retry`.
	BaseMoved []string
	// Finished is set when the project had finished and this start brought
	// no new work: it stays finished with its result.
	Finished bool
	// Run is the number of the run this start began (0: it resumed the
	// current one); PrevRun and PrevResult are the run that ended before.
	Run, PrevRun int
	PrevResult   string
	// Reused are the tasks whose result the new run reuses; Reasons say
	// why each other task runs again, in the specs' order.
	Reused  []string
	Reasons []taskReason
	// AllReused: nothing changed since a passed run, and the new run ended
	// at once with the same result.
	AllReused bool
}

// projectOptionsFor resolves a project's settings from project.yaml,
// nodes.yaml and the start switches.
func projectOptionsFor(cfg *nodes.Config, p *spec.Project, so control.StartOptions) domain.ProjectOptions {
	o := domain.ProjectOptions{HaltFail: p.Config.Halt.Fail, Setup: p.Config.Setup, Integration: true, Verification: true,
		Stall: p.Config.Stall, BudgetUSD: p.Config.Budget.USD, BudgetTokens: p.Config.Budget.Tokens,
		MaxAttemptUSD: p.Config.Budget.MaxAttemptUSD,
		MaxFixRounds:  cfg.Controller.MaxFixRounds, IntegratePartial: so.IntegratePartial, Overrides: map[string]domain.PhaseSpec{}}
	if so.BudgetUSD > 0 {
		o.BudgetUSD = so.BudgetUSD
	}
	if src := p.Config.Source; src != nil {
		o.Repo = &domain.RepoOptions{Dir: src.Dir, Ref: src.Ref, Commit: src.Commit}
	}
	o.Notify = p.Config.Notify
	if g := p.Config.Gate; g != nil {
		o.Gate = &domain.GateOptions{Task: g.Task, Project: g.Project, Timeout: g.Timeout, Baseline: g.Baseline}
	}
	o.Sandbox, o.Network, o.Limits = p.Config.Sandbox, p.Config.Network, p.Config.Limits
	o.Trigger = so.Trigger
	if o.Trigger == "" {
		o.Trigger = control.TriggerStart
	}
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
		if domain.IsPhaseID(t.ID) {
			o.Overrides[t.ID] = domain.PhaseSpec{Title: t.Title, File: t.File, Tool: t.Tool, Model: t.Model, Timeout: t.Timeout,
				Tags: t.Tags, Node: t.Node, Hash: t.Hash, Sandbox: t.Sandbox, Network: t.Network, Limits: t.Limits}
		}
	}
	if p.Config.IntegrationSpec != "" {
		file := filepath.Join(p.Dir, p.Config.IntegrationSpec)
		o.Overrides[domain.IntegrationID] = domain.PhaseSpec{Title: "Integrate the outputs", File: file, Tool: p.Config.Tool}
	}
	return o
}

// phaseSnapshots reads the snapshot of each phase task the author wrote,
// and integration_spec's, into o's overrides (projectOptionsFor leaves
// them out: the plan needs only which there are). A file that changed
// since Load, or became a link out or a FIFO, fails the start.
func phaseSnapshots(p *spec.Project, o *domain.ProjectOptions) error {
	for _, t := range p.Tasks {
		ov, ok := o.Overrides[t.ID]
		if !ok || ov.Snapshot != nil || ov.Hash != t.Hash {
			continue // not this spec's: integration_spec's, read whole
		}
		snap, err := p.Snapshot(t)
		if err != nil {
			return err
		}
		ov.Snapshot = snap
		o.Overrides[t.ID] = ov
	}
	if p.Config.IntegrationSpec != "" {
		snap, err := p.ReadIntegrationSpec()
		if err != nil {
			return err
		}
		ov := o.Overrides[domain.IntegrationID]
		ov.Snapshot = snap
		o.Overrides[domain.IntegrationID] = ov
	}
	return nil
}

// AddProject records a project and its author tasks (new tasks are
// pending; tasks that have not started take a changed spec; started tasks
// keep their snapshot) and marks the project active. Phase tasks (S99, V*,
// F*) are created by the controller when their phase comes; author files
// for them replace the generated specs.
func AddProject(ctx context.Context, st *store.Store, cfg *nodes.Config, home string, p *spec.Project, so control.StartOptions) (SyncResult, error) {
	var res SyncResult
	opts, baseDir, err := addOptions(cfg, p, so)
	if err != nil {
		return res, err
	}
	existing, err := st.Tasks(ctx, p.Name)
	if err != nil {
		return res, err
	}
	have := map[string]domain.Task{}
	for _, t := range existing {
		have[t.ID] = t
	}
	// A finished project begins its next run; one that is going on (or
	// stopped) is resumed, its run still what began it (a schedule, say).
	if old, err := st.Project(ctx, p.Name); err == nil && old.State == domain.ProjectDone {
		ob, _ := json.Marshal(opts)
		res, err := newRun(ctx, st, cfg, home, p, so, opts, string(ob), old, have)
		res.Finished = res.AllReused
		return res, err
	} else if err == nil {
		if oo, err := old.ParseOptions(); err == nil && oo.Trigger != "" {
			opts.Trigger = oo.Trigger
		}
	}
	ob, _ := json.Marshal(opts)
	err = st.Update(ctx, func(tx *store.Tx) error {
		res = SyncResult{}
		if err := tx.EnsureProject(ctx, p.Name, string(ob)); err != nil {
			return err
		}
		for _, t := range p.Tasks {
			if domain.IsPhaseID(t.ID) {
				continue
			}
			nt := storeTask(p, t, cfg)
			nt.BaseDir = baseDir
			if opts.Repo != nil {
				nt.BaseCommit = opts.Repo.Commit
			}
			old, known := have[t.ID]
			if err := syncTask(ctx, tx, p, t, nt, old, decideTaskSync(old, known, nt), &res); err != nil {
				return err
			}
		}
		return nil
	})
	return res, err
}

// addOptions are the options a start records for p: nodes.yaml's and
// project.yaml's with the start's, the phase specs' snapshots, and the
// base tree's hash (a task's result is reused only from the same base
// tree); baseDir is that tree's directory ("" without base:).
func addOptions(cfg *nodes.Config, p *spec.Project, so control.StartOptions) (opts domain.ProjectOptions, baseDir string, err error) {
	opts = projectOptionsFor(cfg, p, so)
	if err := phaseSnapshots(p, &opts); err != nil {
		return opts, "", err
	}
	if p.Config.Base == "" {
		return opts, "", nil
	}
	baseDir = filepath.Join(p.Dir, p.Config.Base)
	if opts.BaseTree, err = treeHash(baseDir); err != nil {
		return opts, "", fmt.Errorf("read the base tree of %s: %w", p.Name, err)
	}
	return opts, baseDir, nil
}

// taskSync is what a start of a project under way does with one of its
// author tasks.
type taskSync int

const (
	syncAdd     taskSync = iota // new: inserted, pending
	syncKeep                    // spec and settings unchanged
	syncStarted                 // changed after it started: keeps its snapshot, and the start says so
	syncUpdate                  // changed before it started: takes the new spec and settings
)

// decideTaskSync decides what a start does with the task nt, stored as old
// when known.
func decideTaskSync(old domain.Task, known bool, nt domain.Task) taskSync {
	switch {
	case !known:
		return syncAdd
	case old.SpecHash == nt.SpecHash && sameSettings(old, nt):
		return syncKeep
	case old.Status != domain.Pending && old.Status != domain.Blocked:
		return syncStarted
	}
	return syncUpdate
}

// syncTask carries out what decideTaskSync decided for task t (nt as it
// would be stored, old as it is) and counts it in res.
func syncTask(ctx context.Context, tx *store.Tx, p *spec.Project, t *spec.Task, nt, old domain.Task, what taskSync, res *SyncResult) error {
	switch what {
	case syncKeep:
		return nil
	case syncStarted:
		if old.SpecHash != nt.SpecHash {
			res.Changed = append(res.Changed, t.ID)
		}
		if old.BaseCommit != nt.BaseCommit && old.BaseCommit != "" {
			res.BaseMoved = append(res.BaseMoved, t.ID)
		}
		return nil
	}
	snap, err := p.Snapshot(t)
	if err != nil {
		return err
	}
	nt.Snapshot = snap
	if what == syncAdd {
		res.Added++
		return tx.InsertTask(ctx, nt)
	}
	res.Updated = append(res.Updated, t.ID)
	if err := tx.SetTask(ctx, p.Name, t.ID, store.TaskPatch{Title: new(nt.Title), Type: new(nt.Type), Tool: new(nt.Tool),
		Model: new(nt.Model), Priority: new(nt.Priority), DependsOn: new(nt.DependsOn), Tags: new(nt.Tags),
		NodePin: new(nt.NodePin), Timeout: new(nt.Timeout), Stall: new(nt.Stall), MaxRetries: new(nt.MaxRetries),
		SpecFile: new(nt.SpecFile), SpecHash: new(nt.SpecHash), Snapshot: new(nt.Snapshot), BaseDir: new(nt.BaseDir),
		BaseCommit: new(nt.BaseCommit), Limits: new(nt.Limits), Sandbox: new(nt.Sandbox), Network: new(nt.Network),
		Env: new(nt.Env), RetryBackoff: new(nt.RetryBackoff), Files: new(nt.Files), StartFrom: new(nt.StartFrom), OnConflict: new(nt.OnConflict),
		NotPreemptible: new(nt.NotPreemptible)}); err != nil {
		return err
	}
	msg := "spec changed before the task ran; using the new one"
	if old.SpecHash == nt.SpecHash && old.BaseCommit != nt.BaseCommit {
		msg = "the repository's ref moved before the task ran; it starts from " + nt.BaseCommit
	}
	return tx.Event(ctx, store.Event{Project: p.Name, Task: t.ID, Kind: "spec", Message: msg})
}

func sameSettings(a, b domain.Task) bool {
	return a.Title == b.Title && a.Type == b.Type && a.Tool == b.Tool && a.Model == b.Model &&
		a.Priority == b.Priority && slices.Equal(a.DependsOn, b.DependsOn) && slices.Equal(a.Tags, b.Tags) &&
		a.NodePin == b.NodePin && a.Timeout == b.Timeout && a.Stall == b.Stall && a.MaxRetries == b.MaxRetries && a.BaseDir == b.BaseDir &&
		a.BaseCommit == b.BaseCommit && a.Limits == b.Limits && a.Sandbox == b.Sandbox && a.Network == b.Network &&
		maps.Equal(a.Env, b.Env) && a.RetryBackoff == b.RetryBackoff && slices.Equal(a.Files, b.Files) && a.StartFrom == b.StartFrom &&
		a.OnConflict == b.OnConflict && a.NotPreemptible == b.NotPreemptible
}
