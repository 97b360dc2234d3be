// Package tasklog reads an attempt's task.log: from the home once the
// attempt is collected, from its node while it runs. `dispatch logs` and
// the HTTP API read logs through it.
package tasklog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/home"
	"github.com/dispatch-tool/dispatch/internal/termtext"
	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/nodes/sshnode"
	"github.com/dispatch-tool/dispatch/store"
)

// Poll is how often Follow asks the node for more.
const Poll = time.Second

// LocalPath is where an attempt's log is kept once collected.
func LocalPath(homeDir string, t domain.Task, attempt int) string {
	return filepath.Join(home.RunsDir(homeDir, t.Project), t.ID, "attempts", strconv.Itoa(attempt), "task.log")
}

// Collected opens the attempt's collected log; false when it is not on this
// machine (not collected yet, or removed).
func Collected(homeDir string, t domain.Task, a domain.Attempt) (*os.File, bool) {
	if a.CollectedAt.IsZero() {
		return nil, false
	}
	f, err := os.Open(LocalPath(homeDir, t, a.Attempt))
	if err != nil {
		return nil, false
	}
	return f, true
}

// Remote is an attempt's log on its node, read over one connection.
type Remote struct {
	tr   nodes.Transport
	node string
	argv []string // the wrapper's tail command, without --from
}

// OpenRemote connects to the node a of t ran on.
func OpenRemote(ctx context.Context, cfg *nodes.Config, t domain.Task, a domain.Attempt) (*Remote, error) {
	if a.Node == "" {
		return nil, fmt.Errorf("%s/%s attempt %d has not started yet: no log", t.Project, t.ID, a.Attempt)
	}
	n, ok := cfg.Node(a.Node)
	if !ok {
		return nil, fmt.Errorf("node %s of %s/%s is no longer in %s", a.Node, t.Project, t.ID, cfg.File)
	}
	env, err := sshnode.DefaultEnv()
	if err != nil {
		return nil, err
	}
	tr, err := sshnode.Open(cfg, n, env)
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	inst, err := nodes.EnsureWrapper(cctx, tr, n.WorkDir, nodes.NewWrappers())
	cancel()
	if err != nil {
		tr.Close()
		return nil, fmt.Errorf("reach %s: %w", n.Name, err)
	}
	dir := path.Join(inst.WorkDir, t.Project, "tasks", t.ID)
	if a.Attempt != t.Attempt || t.Node != a.Node {
		// An earlier attempt: moved aside when a later one started there.
		dir = path.Join(dir, "attempts", strconv.Itoa(a.Attempt))
	}
	return &Remote{tr: tr, node: n.Name, argv: []string{inst.Path, "tail", "--dir", dir}}, nil
}

// Close closes the connection.
func (r *Remote) Close() error { return r.tr.Close() }

// From reads the log from byte from on (bytes the tool wrote, as `wrapper
// tail` counts them).
func (r *Remote) From(ctx context.Context, from int64) ([]byte, error) {
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	res, err := r.tr.Exec(cctx, append(r.argv, "--from", strconv.FormatInt(from, 10)), nil)
	if err != nil {
		return nil, err
	}
	if res.ExitCode != 0 {
		return nil, fmt.Errorf("read the log on %s: %s", r.node, termtext.Clean(string(res.Stdout)+string(res.Stderr)))
	}
	return res.Stdout, nil
}

// Follow writes the log to w from byte pos on, asking for more every Poll
// until the attempt has ended (as st records it) or ctx ends. It returns
// the position it reached.
func (r *Remote) Follow(ctx context.Context, st *store.Store, t domain.Task, attempt int, pos int64, w io.Writer) (int64, error) {
	for {
		b, err := r.From(ctx, pos)
		if err != nil {
			return pos, err
		}
		if _, err := w.Write(b); err != nil {
			return pos, err
		}
		pos += int64(len(b))
		cur, err := st.Task(ctx, t.Project, t.ID)
		if err != nil {
			return pos, err
		}
		if cur.Attempt != attempt || (cur.Status != domain.Running && cur.Status != domain.Claimed) {
			// One last read: what the tool wrote before it ended.
			if b, err := r.From(ctx, pos); err == nil {
				if _, err := w.Write(b); err != nil {
					return pos, err
				}
				pos += int64(len(b))
			}
			return pos, nil
		}
		select {
		case <-ctx.Done():
			return pos, nil
		case <-time.After(Poll):
		}
	}
}

// ErrNoAttempt is returned for an attempt a task does not have.
var ErrNoAttempt = errors.New("no such attempt")

// Attempt finds attempt n of t (0: its latest).
func Attempt(ctx context.Context, st *store.Store, t domain.Task, n int) (domain.Attempt, error) {
	if n == 0 {
		n = t.Attempt
	}
	if n < 1 || n > t.Attempt {
		return domain.Attempt{}, fmt.Errorf("%s/%s has attempts 1 to %d: %w", t.Project, t.ID, t.Attempt, ErrNoAttempt)
	}
	as, err := st.Attempts(ctx, t.Project, t.ID)
	if err != nil {
		return domain.Attempt{}, err
	}
	found := domain.Attempt{Project: t.Project, Task: t.ID, Attempt: n}
	for _, a := range as {
		if a.Attempt == n {
			found = a // the latest run's, when runs share numbers
		}
	}
	return found, nil
}

// Gate writes to w what the gate found on attempt n of t, as the database
// records it: its verdict and the end of its output (the gate's output is
// not in task.log). A verdict reused from an earlier run on the same tree
// says which attempt ran it. Nothing is written for an attempt without a
// gate run.
func Gate(ctx context.Context, st *store.Store, t domain.Task, n int, w io.Writer) error {
	g, ok, err := st.GateRunOf(ctx, t.Project, t.ID, n)
	if err != nil || !ok {
		return err
	}
	verdict := "passed"
	if !g.Passed {
		verdict = "failed: " + g.Error
		if g.Error == "" {
			verdict = fmt.Sprintf("failed: exit status %d", g.ExitCode)
		}
	}
	fmt.Fprintf(w, "\n--- the gate `%s` on attempt %d's result: %s\n", g.Command, n, verdict)
	if g.Reused {
		o, ok, err := st.GateOrigin(ctx, t.Project, g.Command, g.Tree)
		if err != nil {
			return err
		}
		if ok {
			fmt.Fprintf(w, "--- not run again: the same tree was gated by %s attempt %d (dispatch logs %s %s --attempt %d)\n",
				o.Task, o.Attempt, t.Project, o.Task, o.Attempt)
			g.OutputTail = o.OutputTail
		}
	}
	if g.OutputTail == "" {
		_, err := fmt.Fprintf(w, "--- the gate printed nothing\n")
		return err
	}
	fmt.Fprintf(w, "--- the end of its output:\n")
	_, err = io.WriteString(w, strings.TrimRight(g.OutputTail, "\n")+"\n")
	return err
}
