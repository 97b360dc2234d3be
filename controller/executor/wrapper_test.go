package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/wire"
)

// TestLaunchResult: how the wrapper executor reads `wrapper run`'s result
// for one task directory.
func TestLaunchResult(t *testing.T) {
	byDir := map[string]wire.LaunchResult{
		"/w/p/tasks/S01": {Dir: "/w/p/tasks/S01", Run: &wire.RunReply{Task: "S01", Attempt: 1, PID: 7}},
		"/w/p/tasks/S02": {Dir: "/w/p/tasks/S02", Kind: wire.KindAlreadyRunning, Error: "a supervisor (pid 9) holds the directory"},
		"/w/p/tasks/S03": {Dir: "/w/p/tasks/S03", Error: "spec.md: read-only file system"},
		"/w/p/tasks/S04": {Dir: "/w/p/tasks/S04", Run: &wire.RunReply{Task: "S04", PID: 0}},
	}
	for _, tc := range []struct{ dir, want string }{
		{"/w/p/tasks/S01", "started pid 7"},
		{"/w/p/tasks/S02", "uncertain: a supervisor (pid 9) holds the directory"},
		{"/w/p/tasks/S03", "failed: wrapper run: spec.md: read-only file system"},
		{"/w/p/tasks/S04", "uncertain: wrapper run: an empty result"},
		{"/w/p/tasks/S05", "uncertain: wrapper run: no result for this task"},
	} {
		var got string
		switch l := launchResult(byDir, tc.dir); {
		case l.Run != nil && l.Err == nil && l.Uncertain == nil:
			got = fmt.Sprintf("started pid %d", l.Run.PID)
		case l.Err != nil && l.Run == nil && l.Uncertain == nil:
			got = "failed: " + l.Err.Error()
		case l.Uncertain != nil && l.Run == nil && l.Err == nil:
			got = "uncertain: " + l.Uncertain.Error()
		default:
			got = fmt.Sprintf("not one outcome: %+v", l)
		}
		if got != tc.want {
			t.Errorf("%s: %s, want %s", tc.dir, got, tc.want)
		}
	}
}

// scripted is a transport whose Exec answers are data, by the task
// directory named in argv (the launch document's first for `run`), and
// which records each argv.
type scripted struct {
	nodes.Transport
	answers map[string]answer
	argvs   []string
}

type answer struct {
	exit   int
	stdout string
	err    error
}

func (s *scripted) Exec(_ context.Context, argv []string, stdin []byte) (nodes.Result, error) {
	s.argvs = append(s.argvs, strings.Join(argv, " "))
	dir := ""
	for i, a := range argv {
		if a == "--dir" && i+1 < len(argv) {
			dir = argv[i+1]
		}
	}
	if argv[len(argv)-1] == "run" {
		var b wire.LaunchBatch
		if err := json.Unmarshal(stdin, &b); err == nil && len(b.Launches) > 0 {
			dir = b.Launches[0].Dir
		}
	}
	a := s.answers[dir]
	return nodes.Result{ExitCode: a.exit, Stdout: []byte(a.stdout)}, a.err
}

// TestWrapperKill: how the wrapper executor calls `wrapper kill` and reads
// each reply: done with the final status, another node's directory, or an
// error (the node's reply or the transport's) that has the kill asked again.
func TestWrapperKill(t *testing.T) {
	tr := &scripted{answers: map[string]answer{
		"/w/S01": {stdout: `{"status":"killed"}`},
		"/w/S02": {exit: 1, stdout: `{"error":"attempt of n2","kind":"other_node"}`},
		"/w/S03": {exit: 1, stdout: `{"error":"no process record","kind":"io"}`},
		"/w/S04": {err: errors.New("connection reset")},
	}}
	w := NewWrapper(tr, "n1", func() time.Duration { return time.Second })
	inst := &nodes.Installed{Path: "/w/.bin/wrapper", WorkDir: "/w"}
	kills := []Kill{{Dir: "/w/S01", Grace: 2 * time.Second}, {Dir: "/w/S02", Grace: 30 * time.Second}, {Dir: "/w/S03"}, {Dir: "/w/S04"}}
	got := w.Kill(context.Background(), inst, kills)
	want := []string{`reply {"status":"killed"}`, "elsewhere", "err: no process record", "err: connection reset"}
	for i, k := range got {
		s := "done"
		switch {
		case k.Err != nil:
			s = "err: " + k.Err.Error()
		case k.Elsewhere:
			s = "elsewhere"
		case k.Reply != nil:
			s = "reply " + string(k.Reply)
		}
		if i >= len(want) || s != want[i] {
			t.Errorf("kill %s: %q, want %q", kills[i].Dir, s, want[min(i, len(want)-1)])
		}
	}
	if len(got) != len(kills) {
		t.Errorf("%d outcomes for %d kills", len(got), len(kills))
	}
	if tr.argvs[1] != "/w/.bin/wrapper kill --dir /w/S02 --grace 30s --node n1" {
		t.Errorf("argv %q", tr.argvs[1])
	}
}

// TestWrapperLaunchFailures: a `wrapper run` call that did not answer
// leaves its launches in doubt when the wrapper may have started them
// (unreachable, a deadline, a reply not understood), and fails them when
// it surely did not.
func TestWrapperLaunchFailures(t *testing.T) {
	for _, tc := range []struct {
		name string
		a    answer
		want string
	}{
		{"unreachable", answer{err: fmt.Errorf("dial: %w", nodes.ErrUnreachable)}, "uncertain"},
		{"deadline", answer{err: context.DeadlineExceeded}, "uncertain"},
		{"refused to start", answer{err: errors.New("exec: no such file")}, "failed"},
		{"killed mid-reply", answer{exit: 137, stdout: `{"results":[`}, "uncertain"},
		{"started", answer{stdout: `{"results":[{"dir":"/w/S01","run":{"task":"S01","attempt":1,"pid":9}}]}`}, "started"},
	} {
		tr := &scripted{answers: map[string]answer{"/w/S01": tc.a}}
		w := NewWrapper(tr, "n1", func() time.Duration { return time.Second })
		inst := &nodes.Installed{Path: "/w/.bin/wrapper", WorkDir: "/w"}
		l := w.Launch(context.Background(), inst, []wire.LaunchItem{{Dir: "/w/S01", Spec: "x"}})
		got := "none"
		switch {
		case len(l) != 1:
			got = fmt.Sprintf("%d outcomes", len(l))
		case l[0].Run != nil:
			got = "started"
		case l[0].Err != nil:
			got = "failed"
		case l[0].Uncertain != nil:
			got = "uncertain"
		}
		if got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}

// conversing is a scripted transport that also holds conversations: each
// Call answers with the next of replies (an error when it is one).
type conversing struct {
	scripted
	replies []any // string lines or errors
	opened  int
	closed  int
	docs    int
}

func (c *conversing) Converse(_ context.Context, argv []string) (nodes.Conversation, error) {
	if strings.Join(argv[1:], " ") != "run --serve" {
		return nil, errors.New("only run --serve here")
	}
	c.opened++
	return &fakeConv{c: c}, nil
}

// UID and Lstat answer the work_dir check a launch with secrets makes: a
// work_dir not made yet.
func (c *conversing) UID(context.Context) (int, error) { return 1000, nil }

func (c *conversing) Lstat(context.Context, string) (nodes.Stat, error) {
	return nodes.Stat{}, fs.ErrNotExist
}

type fakeConv struct {
	c      *conversing
	closed bool
}

func (f *fakeConv) Call(_ context.Context, req []byte, _ int) ([]byte, error) {
	if f.closed {
		return nil, nodes.ErrConversationClosed
	}
	f.c.docs++
	r := f.c.replies[0]
	f.c.replies = f.c.replies[1:]
	if err, ok := r.(error); ok {
		f.Close()
		return nil, err
	}
	return []byte(r.(string)), nil
}

// Exchange is not asked of a launch conversation: it refuses.
func (f *fakeConv) Exchange(context.Context, []byte, func(io.Reader) error) error {
	return errors.New("only run --serve's Call here")
}

func (f *fakeConv) Close() error {
	if !f.closed {
		f.closed = true
		f.c.closed++
	}
	return nil
}

// TestWrapperLaunchConversation: launches go over one held `run --serve`
// conversation, not a `wrapper run` each; a conversation that broke after
// the document went out leaves the launch uncertain and is not retried
// with Exec (the attempt may have started, and ended); one whose request
// was never written falls back to Exec; a refusal ends the conversation
// and the next launch opens another.
func TestWrapperLaunchConversation(t *testing.T) {
	started := `{"results":[{"dir":"/w/S01","run":{"task":"S01","attempt":1,"pid":9}}]}`
	for _, tc := range []struct {
		name    string
		replies []any
		want    []string
		execs   int // `wrapper run` calls with Exec
		opened  int
	}{
		{"held", []any{started, started}, []string{"started", "started"}, 0, 1},
		{"broken after the write", []any{started, errors.New("EOF"), started}, []string{"started", "uncertain", "started"}, 0, 2},
		{"not sent", []any{started, fmt.Errorf("write a request: %w: broken pipe", nodes.ErrNotSent), started}, []string{"started", "started", "started"}, 1, 2},
		{"refused", []any{started, `{"error":"launch: stdin: bad","kind":"usage"}`, started}, []string{"started", "uncertain", "started"}, 0, 2},
		// A wrapper whose first conversation never answered is launched
		// with Exec a while (convRetry).
		{"never answered", []any{errors.New("EOF")}, []string{"uncertain", "started"}, 1, 1},
		// Secrets go with Exec, to the binary just checked.
		{"with secrets", nil, []string{"started", "started"}, 2, 0},
	} {
		tr := &conversing{scripted: scripted{answers: map[string]answer{"/w/S01": {stdout: started}}}, replies: tc.replies}
		w := NewWrapper(tr, "n1", func() time.Duration { return time.Second })
		inst := &nodes.Installed{Path: "/w/.bin/wrapper", WorkDir: "/w"}
		var got []string
		item := wire.LaunchItem{Dir: "/w/S01", Spec: "x"}
		if tc.name == "with secrets" {
			item.Env = map[string]string{"API_KEY": "k"}
		}
		for range tc.want {
			l := w.Launch(context.Background(), inst, []wire.LaunchItem{item})
			switch {
			case len(l) != 1:
				got = append(got, fmt.Sprintf("%d outcomes", len(l)))
			case l[0].Run != nil:
				got = append(got, "started")
			case l[0].Err != nil:
				got = append(got, "failed")
			default:
				got = append(got, "uncertain")
			}
		}
		w.Close()
		execs := 0
		for _, a := range tr.argvs {
			if strings.HasSuffix(a, " run") {
				execs++
			}
		}
		if !slices.Equal(got, tc.want) || execs != tc.execs || tr.opened != tc.opened || tr.closed != tr.opened {
			t.Errorf("%s: launches %v, %d Exec of run, %d conversations opened, %d closed; want %v, %d, %d, all closed",
				tc.name, got, execs, tr.opened, tr.closed, tc.want, tc.execs, tc.opened)
		}
	}
}
