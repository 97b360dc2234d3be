package prune

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/dispatch-tool/dispatch/controller"
	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/nodes/sshnode"
	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/gitresult"
)

// Nodes removes the directories of pruned attempts from the nodes.
type Nodes interface {
	// Remove removes from node n the directories of attempts (all of
	// project, all run on n) and the spare checkouts of project's bases
	// spares, and returns how many directories it removed. A directory
	// already gone is not an error; one a wrapper still runs in is kept.
	Remove(ctx context.Context, n nodes.Node, project string, attempts []Attempt, spares []string) (int, error)
}

// Attempt is a pruned attempt as a node holds it.
type Attempt struct {
	Task    string
	Attempt int
	// TaskDir allows removing the task directory when it holds this
	// attempt: no attempt of the task that stays ran on the node.
	TaskDir bool
}

// Transports removes attempt directories over the node's transport
// (SSH, or the local machine), as `dispatch cleanup` does: the wrapper
// is asked which attempts still run, and those stay.
type Transports struct {
	Config *nodes.Config
}

var _ Nodes = Transports{}

// Remove implements Nodes. An attempt's directory on a node is
// <work_dir>/<project>/tasks/<ID>/attempts/<n>/ once a later attempt of
// the task ran there, else the task directory itself: that one goes (with
// the wrapper's private git directory of its result) only when the
// attempt it holds is one that goes and a.TaskDir allows it. The spares
// of a base are <work_dir>/<project>/spares/<base>/ (see wrapper's
// makeSpare).
func (t Transports) Remove(ctx context.Context, n nodes.Node, project string, attempts []Attempt, spares []string) (removed int, err error) {
	env, err := sshnode.DefaultEnv()
	if err != nil {
		return 0, err
	}
	tr, err := sshnode.Open(t.Config, n, env)
	if err != nil {
		return 0, err
	}
	defer tr.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	inst, err := nodes.EnsureWrapper(ctx, tr, n.WorkDir, nodes.NewWrappers())
	if err != nil {
		return 0, fmt.Errorf("ask the wrapper which attempts still run: %w", err)
	}
	ns, err := controller.NodeFacts(ctx, tr, inst)
	if err != nil {
		return 0, fmt.Errorf("ask the wrapper which attempts still run: %w", err)
	}
	type holds struct {
		attempt int
		alive   bool
	}
	current := map[string]holds{}
	for _, ts := range ns.Tasks {
		if ts.Project != project {
			continue
		}
		h := holds{alive: ts.Alive}
		if ts.Status != nil {
			h.attempt = ts.Status.Attempt
		}
		current[ts.Task] = h
	}
	remove := func(dir string) error {
		// A task may have replaced a directory on the way (its
		// attempts/) with a symbolic link: what it points at is not the
		// attempt's, and stays.
		rel := strings.TrimPrefix(dir, strings.TrimSuffix(inst.WorkDir, "/")+"/")
		for at := path.Dir(rel); at != "." && at != "/"; at = path.Dir(at) {
			st, err := tr.Lstat(ctx, path.Join(inst.WorkDir, at))
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			if err != nil {
				return err
			}
			if !st.Mode.IsDir() {
				return nil
			}
		}
		if _, err := tr.Lstat(ctx, dir); errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err := tr.Remove(ctx, dir); err != nil {
			return err
		}
		removed++
		return nil
	}
	for _, a := range attempts {
		dir := path.Join(inst.WorkDir, project, "tasks", a.Task)
		if err := remove(path.Join(dir, "attempts", strconv.Itoa(a.Attempt))); err != nil {
			return removed, err
		}
		if h, ok := current[a.Task]; ok && a.TaskDir && h.attempt == a.Attempt && !h.alive {
			if err := remove(dir); err != nil {
				return removed, err
			}
			if err := tr.Remove(ctx, gitresult.SnapshotDirOf(inst.Path, dir)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return removed, err
			}
		}
	}
	for _, base := range spares {
		if !wire.IsCommitID(base) {
			continue
		}
		if err := remove(path.Join(inst.WorkDir, project, "spares", base)); err != nil {
			return removed, err
		}
	}
	return removed, nil
}
