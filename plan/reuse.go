package plan

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/store"
)

// inputs is what an attempt runs from, recorded when it is claimed: a later
// run reuses the task's result while they are the same (issue 14).
type inputs struct {
	// Spec is the hash of the spec snapshot.
	Spec string `json:"spec"`
	// Base is the commit the workspace starts from (repo:), or the hash
	// of the base: tree ("tree:<sha256>"); "" for neither.
	Base  string `json:"base,omitempty"`
	Tool  string `json:"tool,omitempty"`
	Model string `json:"model,omitempty"`
	// Mode is the api_mode the attempt ran under and Env the names (never
	// the values) of its variables.
	Mode string   `json:"api_mode,omitempty"`
	Env  []string `json:"env,omitempty"`
	// Deps are the results of the task's dependencies when it was claimed
	// (resultOfTask).
	Deps map[string]string `json:"deps,omitempty"`
}

func (in inputs) encode() string {
	b, _ := json.Marshal(in)
	return string(b)
}

func decodeInputs(s string) (*inputs, bool) {
	if s == "" {
		return nil, false
	}
	var in inputs
	if json.Unmarshal([]byte(s), &in) != nil {
		return nil, false
	}
	return &in, true
}

// modeEnvNames are the names of an api_mode's variables, sorted; false
// when nodes.yaml has no such mode.
func modeEnvNames(cfg *nodes.Config, mode string) ([]string, bool) {
	if mode == "" {
		return nil, true
	}
	m, ok := cfg.APIModes[mode]
	if !ok {
		return nil, false
	}
	return slices.Sorted(maps.Keys(m.Env)), true
}

// baseOfTask is what t's workspace starts from, as inputs.Base says it.
func baseOfTask(t domain.Task, opts domain.ProjectOptions) string {
	switch {
	case t.BaseCommit != "":
		return t.BaseCommit
	case t.BaseDir != "" && opts.BaseTree != "" && !domain.IsPhaseID(t.ID):
		return "tree:" + opts.BaseTree
	}
	return ""
}

// reuseCandidate is an author task of a new run: what its completed
// attempt ran from, and what it would run from now.
type reuseCandidate struct {
	ID        string
	DependsOn []string
	// New is a task the run that ended did not have.
	New bool
	// Status is its status when the run ended; FromRun the run whose
	// attempt made its result.
	Status  domain.Status
	FromRun int
	// Ran is what that attempt ran from (nil: not recorded, as for
	// attempts made before runs were numbered).
	Ran *inputs
	// Now is what it would run from in the new run; its Mode and Env are
	// Ran's mode as nodes.yaml has it now (ModeGone: no longer there) and
	// its Deps are empty: dependencies are decided with it.
	Now      inputs
	ModeGone bool
	// Result is its result (resultOfTask).
	Result string
}

// reuseDecision says whether a task's result is reused and, when not, why
// it runs again.
type reuseDecision struct {
	Reuse  bool
	Reason string
}

// decideReuse decides, for every task of a new run, whether its result
// from an earlier run stands: it completed, nothing it ran from changed,
// and each of its dependencies is reused with the result it ran from. A
// task that runs again makes its dependents run again. fresh, when set, is
// why every task runs again (--fresh, a scheduled run).
func decideReuse(cands []reuseCandidate, fresh string) map[string]reuseDecision {
	byID := map[string]*reuseCandidate{}
	for i := range cands {
		byID[cands[i].ID] = &cands[i]
	}
	out := map[string]reuseDecision{}
	var decide func(id string, depth int) reuseDecision
	decide = func(id string, depth int) reuseDecision {
		if d, ok := out[id]; ok {
			return d
		}
		c, ok := byID[id]
		if !ok || depth > len(cands) {
			// Not a task of this run (the loader refuses that) or a cycle.
			return reuseDecision{Reason: "its dependencies cannot be checked"}
		}
		d := reuseDecision{Reason: c.reason(fresh)}
		if d.Reason == "" {
			for _, dep := range c.DependsOn {
				if dd := decide(dep, depth+1); !dd.Reuse {
					d.Reason = "depends on " + dep
					break
				}
				if got, want := byID[dep].Result, c.Ran.Deps[dep]; got != want {
					d.Reason = dep + "'s result changed after it ran"
					break
				}
			}
		}
		d.Reuse = d.Reason == ""
		out[id] = d
		return d
	}
	for _, c := range cands {
		decide(c.ID, 0)
	}
	return out
}

// reason is why c runs again for a cause of its own, "" when none.
func (c *reuseCandidate) reason(fresh string) string {
	switch {
	case fresh != "":
		return fresh
	case c.New:
		return "new task"
	case c.Status != domain.Completed:
		return fmt.Sprintf("%s in run %d", c.Status, c.FromRun)
	case c.Ran == nil:
		return "its last run recorded no inputs"
	case c.Ran.Spec != c.Now.Spec:
		return "spec changed"
	case !sameDeps(c.Ran.Deps, c.DependsOn):
		return "its dependencies changed"
	case c.Ran.Base != c.Now.Base:
		if strings.HasPrefix(c.Now.Base, "tree:") || c.Now.Base == "" {
			return "base tree changed"
		}
		return "the repository's commit changed"
	case c.Ran.Tool != c.Now.Tool:
		return fmt.Sprintf("tool changed (%s → %s)", orNodes(c.Ran.Tool), orNodes(c.Now.Tool))
	case c.Ran.Model != c.Now.Model:
		return fmt.Sprintf("model changed (%s → %s)", orDefault(c.Ran.Model), orDefault(c.Now.Model))
	case c.ModeGone:
		return fmt.Sprintf("api_mode %s is no longer in nodes.yaml", c.Ran.Mode)
	case !slices.Equal(c.Ran.Env, c.Now.Env):
		return fmt.Sprintf("api_mode %s's variables changed", c.Ran.Mode)
	}
	return ""
}

func orNodes(tool string) string {
	if tool == "" {
		return "the node's"
	}
	return tool
}

func orDefault(model string) string {
	if model == "" {
		return "default"
	}
	return model
}

// resultOfTask is a task's result as its dependents' inputs name it: the
// attempt that made it, and its commit in a git-native project. A
// dependency's files may not be collected yet when its dependent starts;
// the attempt that made them is known, and a dependency that runs again
// makes a new one.
func resultOfTask(attempt int, commit string) string {
	if commit != "" {
		return fmt.Sprintf("attempt %d: %s", attempt, commit)
	}
	return fmt.Sprintf("attempt %d", attempt)
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// ClaimInputs is what a claimed attempt of t under mode runs from, with
// the results of its dependencies as they are now.
func ClaimInputs(ctx context.Context, tx *store.Tx, cfg *nodes.Config, t domain.Task, mode string, opts domain.ProjectOptions) (string, error) {
	in := inputs{Spec: t.SpecHash, Base: baseOfTask(t, opts), Tool: t.Tool, Model: t.Model, Mode: mode}
	in.Env, _ = modeEnvNames(cfg, mode)
	for _, d := range t.DependsOn {
		attempt, commit, err := tx.Result(ctx, t.Project, d)
		if err != nil {
			return "", err
		}
		if in.Deps == nil {
			in.Deps = map[string]string{}
		}
		in.Deps[d] = resultOfTask(attempt, commit)
	}
	return in.encode(), nil
}

// sameDeps reports whether an attempt's recorded dependencies are the
// task's dependencies now.
func sameDeps(ran map[string]string, now []string) bool {
	if len(ran) != len(now) {
		return false
	}
	for _, d := range now {
		if _, ok := ran[d]; !ok {
			return false
		}
	}
	return true
}
