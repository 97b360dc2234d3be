package executor

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/policy"
	"github.com/dispatch-tool/dispatch/wire"
)

// A node's status calls go over one conversation with its wrapper (`status
// --serve`, one request and one reply a line) held open from one pull to
// the next, where the transport can hold one (nodes.Converser): a steady
// pull is then one write and one read on an open session, not a new SSH
// session and a new wrapper process. A call that fails over it closes it
// and is made again with Exec, so that what a pull returns, and every
// error, is what `status` says; the next pull opens a new conversation.

// convRetry is how long a node whose wrapper did not answer a new
// conversation's first request is pulled with Exec alone.
const convRetry = 5 * time.Minute

// heldConv is a node's held conversation with one wrapper command
// (argv: `status --serve`, `run --serve`); its lock guards the fields.
// One lane of the node calls over each (the pulling lane, the launching
// lane); Close may come from the controller's goroutine.
type heldConv struct {
	// argv is the command for inst's wrapper about node's attempts.
	argv func(inst *nodes.Installed, node string) []string
	mu   sync.Mutex
	// conv runs inst's wrapper; nil when none is open.
	conv nodes.Conversation
	inst *nodes.Installed
	// answered is set once conv answered a request.
	answered bool
	// refused is the installation whose wrapper failed a new
	// conversation's first request, and when: it is pulled with Exec
	// until convRetry has passed.
	refused   *nodes.Installed
	refusedAt time.Time
}

// open returns the conversation with inst's wrapper about node's attempts,
// opening one when none is (closing one with an older installation's); nil
// when tr cannot hold one or inst's wrapper refused lately.
func (s *heldConv) open(ctx context.Context, tr nodes.Transport, inst *nodes.Installed, node string) (nodes.Conversation, bool) {
	cv, ok := tr.(nodes.Converser)
	if !ok {
		return nil, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conv != nil && s.inst == inst {
		return s.conv, s.answered
	}
	if s.conv != nil {
		_ = s.conv.Close()
		s.conv, s.inst = nil, nil
	}
	if s.refused == inst && time.Since(s.refusedAt) < convRetry {
		return nil, false
	}
	conv, err := cv.Converse(ctx, s.argv(inst, node))
	if err != nil {
		return nil, false
	}
	s.conv, s.inst, s.answered = conv, inst, false
	return conv, false
}

// done records how conv's call went: a failed one closes it, and refuses
// its installation a while when it was the conversation's first.
func (s *heldConv) done(conv nodes.Conversation, answered bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil {
		if s.conv == conv {
			s.answered = true
		}
		return
	}
	if s.conv == conv {
		if !answered {
			s.refused, s.refusedAt = s.inst, time.Now()
		}
		s.conv, s.inst = nil, nil
	}
	_ = conv.Close()
}

// close closes the conversation, if one is open.
func (s *heldConv) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conv != nil {
		_ = s.conv.Close()
		s.conv, s.inst = nil, nil
	}
}

// statusArgv is the status conversation's command.
func statusArgv(inst *nodes.Installed, node string) []string {
	return []string{inst.Path, "status", "--serve", "--root", inst.WorkDir, "--node", node}
}

// runArgv is the launch conversation's command: `run --serve` answers
// launch documents as `run` does, one a line.
func runArgv(inst *nodes.Installed, _ string) []string { return []string{inst.Path, "run", "--serve"} }

// Status makes the node's status call (see nodeStatus) over its
// conversation when one can be held, else, or when that fails, with Exec.
func (w *Wrapper) Status(ctx context.Context, inst *nodes.Installed, q Query) (*wire.NodeStatus, error) {
	if conv, answered := w.conv.open(ctx, w.tr, inst, w.node); conv != nil {
		st, err := converseStatus(ctx, conv, inst.Version, q, &w.req)
		w.conv.done(conv, answered, err)
		if err == nil {
			return st, nil
		}
	}
	return nodeStatus(ctx, w.tr, inst.Path, inst.WorkDir, w.node, q)
}

// converseStatus is nodeStatus over a conversation: a reply that is not
// a status of the wrapper version expected (an error the wrapper ended
// with, a wrapper other than the one installed) is an error.
func converseStatus(ctx context.Context, conv nodes.Conversation, version string, q Query, last *lastRequest) (*wire.NodeStatus, error) {
	data, err := last.encode(q)
	if err != nil {
		return nil, fmt.Errorf("status: %w", err)
	}
	line, err := conv.Call(ctx, data, nodes.MaxExecOutput)
	if err != nil {
		return nil, fmt.Errorf("status: %w", err)
	}
	var st wire.NodeStatus
	if q.Live {
		st.Tasks = make([]wire.TaskStatus, 0, len(q.Named)+8)
	}
	if err := json.Unmarshal(line, &st); err != nil {
		return nil, fmt.Errorf("status: %w", err)
	}
	if st.WrapperVersion != version || q.Live != (st.Listing == wire.ListingLive) {
		return nil, fmt.Errorf("status: a reply of wrapper %q (listing %q), not of %q", truncate(st.WrapperVersion, 80), truncate(st.Listing, 20), version)
	}
	clampStatus(&st)
	return &st, nil
}

// lastRequest is a node's last status request and the query it was
// made of: a steady pull asks what the one before asked (the same tasks
// and tags), and sends the same bytes without encoding them again. Its
// lock guards the fields.
type lastRequest struct {
	mu   sync.Mutex
	q    Query // Projects, Live, Named, Tags: copies
	data []byte
}

// encode returns q's request line.
func (l *lastRequest) encode(q Query) ([]byte, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.data != nil && q.Live == l.q.Live && sameList(q.Projects, l.q.Projects) &&
		sameList(q.Named, l.q.Named) && sameList(q.Tags, l.q.Tags) {
		return l.data, nil
	}
	req := wire.StatusRequest{Projects: q.Projects, Live: q.Live}
	if q.Live {
		req.LiveRequest = wire.LiveRequest{Tasks: q.Named, Tags: q.Tags}
	}
	data, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	l.q = Query{Projects: slices.Clone(q.Projects), Live: q.Live, Named: slices.Clone(q.Named), Tags: slices.Clone(q.Tags)}
	l.data = data
	return data, nil
}

// sameList reports whether a and b encode alike: equal, and both nil or
// neither (null is not []).
func sameList(a, b []string) bool {
	return (a == nil) == (b == nil) && slices.Equal(a, b)
}

// nodeStatus runs the wrapper's status command: one call for the tasks of
// the listed projects (all projects when none) and the node's facts. With
// live, only the node's live attempts and the named tasks ("project/ID")
// are listed: every attempt the controller acts on, since it names those
// it has claimed or running there and a stale one is live. With node, the
// attempts of other nodes in the same work_dir are left out.
func nodeStatus(ctx context.Context, tr nodes.Transport, bin, workDir, node string, q Query) (*wire.NodeStatus, error) {
	argv := []string{bin, "status", "--root", workDir}
	if node != "" {
		argv = append(argv, "--node", node)
	}
	for _, p := range q.Projects {
		argv = append(argv, "--project", p)
	}
	var stdin []byte
	if q.Live {
		argv = append(argv, "--live")
		var err error
		if stdin, err = json.Marshal(wire.LiveRequest{Tasks: q.Named, Tags: q.Tags}); err != nil {
			return nil, fmt.Errorf("status: %w", err)
		}
	}
	res, err := tr.Exec(ctx, argv, stdin)
	if err != nil {
		return nil, fmt.Errorf("status: %w", err)
	}
	var st wire.NodeStatus
	if q.Live {
		// A live reply lists about the tasks named: decoded into room made
		// once, not grown by doubling.
		st.Tasks = make([]wire.TaskStatus, 0, len(q.Named)+8)
	}
	if err := json.Unmarshal(res.Stdout, &st); err != nil || res.ExitCode != 0 {
		return nil, fmt.Errorf("status: %w", &ReplyError{policy.ReplyError(res, err)})
	}
	clampStatus(&st)
	return &st, nil
}

// Facts asks the wrapper installed as inst for the node's status and
// facts: every attempt of every project in its work_dir, whichever node
// started it (`dispatch nodes check`, refresh, cleanup).
func Facts(ctx context.Context, tr nodes.Transport, inst nodes.Installed) (*wire.NodeStatus, error) {
	return nodeStatus(ctx, tr, inst.Path, inst.WorkDir, "", Query{})
}

// clampStatus brings the numbers of a node's reply into range, and the
// words of its unlisted projects to a line each. What a node says is a
// stranger's word: this is done once, before anything uses or sums them.
func clampStatus(st *wire.NodeStatus) {
	st.Facts.Clamp()
	st.ClampUnlisted()
	for _, ts := range st.Tasks {
		if ts.Status != nil {
			ts.Status.Clamp()
		}
	}
}

// truncate cuts s to n bytes, marked, for an error message.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
