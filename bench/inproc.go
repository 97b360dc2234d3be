package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/dispatch-tool/dispatch/control"
	"github.com/dispatch-tool/dispatch/controller"
	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/home"
	"github.com/dispatch-tool/dispatch/internal/sshdtest"
	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/nodes/sshnode"
	"github.com/dispatch-tool/dispatch/plan"
	"github.com/dispatch-tool/dispatch/spec"
	"github.com/dispatch-tool/dispatch/store"
)

// call is one request the controller made to a node and waited for.
type call struct {
	node, op   string
	start, end time.Time
	err        bool
}

// recorder collects the calls of every countingTransport sharing it.
type recorder struct {
	mu    sync.Mutex
	calls []call
}

func (r *recorder) add(c call) {
	r.mu.Lock()
	r.calls = append(r.calls, c)
	r.mu.Unlock()
}

// take returns the calls recorded since the last take and forgets them.
func (r *recorder) take() []call {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.calls
	r.calls = nil
	return out
}

// countingTransport decorates a node transport: every method that reaches
// the node is timed and recorded. One Exec is one SSH session (channel open,
// exec, output, exit status); Put, Get and Walk are SFTP operations made of
// several SFTP requests on the one connection.
type countingTransport struct {
	nodes.Transport
	node string
	rec  *recorder
	mu   sync.Mutex // guards convs
	// convs are the conversations held open (see inproc.controller).
	convs []nodes.Conversation
}

// endConversations closes the conversations opened so far.
func (c *countingTransport) endConversations() {
	c.mu.Lock()
	convs := c.convs
	c.convs = nil
	c.mu.Unlock()
	for _, conv := range convs {
		_ = conv.Close()
	}
}

func (c *countingTransport) record(op string, start time.Time, err error) {
	c.rec.add(call{node: c.node, op: op, start: start, end: time.Now(), err: err != nil})
}

func (c *countingTransport) Exec(ctx context.Context, argv []string, stdin []byte) (nodes.Result, error) {
	start := time.Now()
	res, err := c.Transport.Exec(ctx, argv, stdin)
	c.record("exec "+execName(argv), start, err)
	return res, err
}

// Converse holds a conversation of the node's transport open, each call
// over it recorded as the command's call (`status --serve`: "exec wrapper
// status", as one Exec of `status` was; `collect --serve`: "exec wrapper
// collect").
func (c *countingTransport) Converse(ctx context.Context, argv []string) (nodes.Conversation, error) {
	cv, ok := c.Transport.(nodes.Converser)
	if !ok {
		return nil, errors.New("the transport holds no conversation")
	}
	conv, err := cv.Converse(ctx, argv)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.convs = append(c.convs, conv)
	c.mu.Unlock()
	return &countingConv{Conversation: conv, t: c, op: "exec " + execName(argv)}, nil
}

// countingConv records the calls of a conversation (see Converse).
type countingConv struct {
	nodes.Conversation
	t  *countingTransport
	op string
}

func (cc *countingConv) Call(ctx context.Context, req []byte, limit int) ([]byte, error) {
	start := time.Now()
	line, err := cc.Conversation.Call(ctx, req, limit)
	cc.t.record(cc.op, start, err)
	return line, err
}

// Exchange records a request whose answer is a stream (`collect --serve`:
// "exec wrapper collect", as one ExecTo of `collect` was).
func (cc *countingConv) Exchange(ctx context.Context, req []byte, read func(io.Reader) error) error {
	start := time.Now()
	err := cc.Conversation.Exchange(ctx, req, read)
	cc.t.record(cc.op, start, err)
	return err
}

func (c *countingTransport) Put(ctx context.Context, p string, r io.Reader, mode fs.FileMode) error {
	start := time.Now()
	err := c.Transport.Put(ctx, p, r, mode)
	c.record("sftp put "+path.Base(p), start, err)
	return err
}

func (c *countingTransport) Get(ctx context.Context, p string, w io.Writer) error {
	start := time.Now()
	err := c.Transport.Get(ctx, p, w)
	c.record("sftp get "+path.Base(p), start, err)
	return err
}

func (c *countingTransport) Walk(ctx context.Context, dir string) ([]nodes.FileInfo, error) {
	start := time.Now()
	fi, err := c.Transport.Walk(ctx, dir)
	c.record("sftp walk", start, err)
	return fi, err
}

// ExecTo is the node transport's ExecTo (a `wrapper collect` stream),
// recorded as one exec of the command.
func (c *countingTransport) ExecTo(ctx context.Context, argv []string, stdin []byte, w io.Writer) (nodes.Result, error) {
	et, ok := c.Transport.(nodes.ExecToer)
	if !ok {
		return nodes.Result{}, errors.New("the transport streams no output")
	}
	start := time.Now()
	res, err := et.ExecTo(ctx, argv, stdin, w)
	c.record("exec "+execName(argv), start, err)
	return res, err
}

func (c *countingTransport) Remove(ctx context.Context, p string) error {
	start := time.Now()
	err := c.Transport.Remove(ctx, p)
	c.record("sftp remove", start, err)
	return err
}

// execName names a remote command: the wrapper's subcommand, or the program.
func execName(argv []string) string {
	if len(argv) == 0 {
		return "?"
	}
	base := path.Base(argv[0])
	if strings.HasPrefix(base, "dispatch-wrapper") && len(argv) > 1 {
		return "wrapper " + argv[1]
	}
	return base
}

// inproc is a controller run inside the bench process, on the same code
// `dispatch start` runs, with counting transports.
type inproc struct {
	home, project string
	cfg           *nodes.Config
	st            *store.Store
	trs           map[string]nodes.Transport
	rec           *recorder
	env           sshnode.Env
}

// newInproc loads home/nodes.yaml, opens home/dispatch.db and adds the
// project from home/specs (as `dispatch start` does before its loop).
func newInproc(ctx context.Context, c *sshdtest.Client, homeDir, project string) (*inproc, error) {
	cfg, err := nodes.Load(home.ConfigPath(homeDir))
	if err != nil {
		return nil, err
	}
	st, err := store.Open(ctx, home.DBPath(homeDir))
	if err != nil {
		return nil, err
	}
	ip := &inproc{home: homeDir, project: project, cfg: cfg, st: st, trs: map[string]nodes.Transport{}, rec: &recorder{},
		env: sshnode.Env{Home: c.Home, User: c.User}}
	p, err := spec.Load(home.SpecsDir(homeDir), project)
	if err != nil {
		st.Close()
		return nil, err
	}
	if _, err := plan.AddProject(ctx, st, cfg, homeDir, p, control.StartOptions{}); err != nil {
		st.Close()
		return nil, err
	}
	for _, n := range cfg.Nodes {
		tr, err := sshnode.Open(cfg, n, ip.env)
		if err != nil {
			st.Close()
			return nil, err
		}
		ip.trs[n.Name] = &countingTransport{Transport: tr, node: n.Name, rec: ip.rec}
	}
	return ip, nil
}

// controller returns a new controller over the shared transports; cfg
// replaces the loaded configuration when not nil.
//
// A controller made here is never closed (Close would close the shared
// transports): the conversations the one before it held with the nodes'
// wrappers (`status --serve`, `run --serve`) are ended first, as its
// Close would, or each new one would hold more of the nodes' sessions.
func (ip *inproc) controller(cfg *nodes.Config) *controller.Controller {
	if cfg == nil {
		cfg = ip.cfg
	}
	for _, tr := range ip.trs {
		if ct, ok := tr.(*countingTransport); ok {
			ct.endConversations()
		}
	}
	return controller.New(controller.Options{Home: ip.home, Config: cfg, Store: ip.st, Transports: ip.trs,
		Wrappers: nodes.NewWrappers()})
}

func (ip *inproc) close() {
	for _, tr := range ip.trs {
		_ = tr.Close()
	}
	_ = ip.st.Close()
}

// statusCounts counts the project's tasks by status.
func (ip *inproc) statusCounts(ctx context.Context) map[domain.Status]int {
	tasks, err := ip.st.Tasks(ctx, ip.project)
	out := map[domain.Status]int{}
	if err != nil {
		out["error"] = 1
		return out
	}
	for _, t := range tasks {
		out[t.Status]++
	}
	return out
}

// tickStats describes one tick from the calls it made.
type tickStats struct {
	wall       time.Duration
	calls      int
	byOp       map[string]int
	pullSpan   time.Duration // first status call started → last one ended
	statusMax  time.Duration // slowest status call
	statusMean time.Duration
	outside    time.Duration // wall − every phase's SSH span: database, JSON, scheduling
	phases     map[string]time.Duration
}

// phaseOf groups the calls of a tick by the step of the tick they belong to.
func phaseOf(op string) string {
	switch {
	case op == "exec wrapper status":
		return "pull"
	case op == "exec wrapper launch" || op == "exec wrapper run" || strings.HasPrefix(op, "sftp put "):
		return "launch"
	case strings.HasPrefix(op, "sftp get") || op == "sftp walk" || op == "exec wrapper collect":
		return "collect"
	case op == "exec wrapper kill":
		return "kill"
	default:
		return "install"
	}
}

func analyseTick(start, end time.Time, calls []call) tickStats {
	ts := tickStats{wall: end.Sub(start), calls: len(calls), byOp: map[string]int{}, phases: map[string]time.Duration{}}
	type span struct{ a, b time.Time }
	spans := map[string]*span{}
	var n int
	var sum time.Duration
	for _, c := range calls {
		ts.byOp[c.op]++
		ph := phaseOf(c.op)
		s := spans[ph]
		if s == nil {
			s = &span{c.start, c.end}
			spans[ph] = s
		}
		if c.start.Before(s.a) {
			s.a = c.start
		}
		if c.end.After(s.b) {
			s.b = c.end
		}
		if ph == "pull" {
			d := c.end.Sub(c.start)
			n++
			sum += d
			ts.statusMax = max(ts.statusMax, d)
		}
	}
	var inSSH time.Duration
	for ph, s := range spans {
		ts.phases[ph] = s.b.Sub(s.a)
		inSSH += s.b.Sub(s.a)
	}
	if s := spans["pull"]; s != nil {
		ts.pullSpan = s.b.Sub(s.a)
	}
	if n > 0 {
		ts.statusMean = sum / time.Duration(n)
	}
	ts.outside = max(ts.wall-inSSH, 0)
	return ts
}

func opsSummary(byOp map[string]int) string {
	keys := make([]string, 0, len(byOp))
	for k := range byOp {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%d %s", byOp[k], k))
	}
	return strings.Join(parts, ", ")
}

// writeSpecsAndYAML prepares a home for newInproc.
func writeHome(homeDir, yaml, project string, n int, body func(int) string) error {
	if err := os.MkdirAll(homeDir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(home.ConfigPath(homeDir), []byte(yaml), 0o644); err != nil {
		return err
	}
	return writeProject(homeDir, project, n, body)
}
