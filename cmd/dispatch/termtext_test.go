package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/home"
	"github.com/dispatch-tool/dispatch/prune"
	"github.com/dispatch-tool/dispatch/readmodel"
	"github.com/dispatch-tool/dispatch/store"
)

// hostile is what issue 10 saw a node send: a window title and a screen
// clear.
const hostile = "\x1b]0;pwned\x07\x1b[2J"

// TestNodeTextIsEscaped: terminal controls in what came from a node — a
// task's error, a node's error, an event, a task's log tail in the report —
// reach the operator's terminal as visible escapes, never as controls.
func TestNodeTextIsEscaped(t *testing.T) {
	homeDir, _ := opsHome(t, map[string]map[string]string{
		"p": {"S01-evil.md": "---\nmax_retries: 0\n---\nprintf '" + `\033]0;pwned\007\033[2J` + "log tail\\n'; exit 3\n"},
	})
	if r := runDispatch(t, nil, "--home", homeDir, "start", "p"); r.code != 1 {
		t.Fatalf("start: want exit 1 (S01 fails): %s", r)
	}
	// What a hostile node could have reported, recorded as the controller
	// records it.
	ctx := context.Background()
	st, err := store.Open(ctx, filepath.Join(homeDir, "dispatch.db"))
	if err != nil {
		t.Fatal(err)
	}
	err = st.Update(ctx, func(tx *store.Tx) error {
		if err := tx.SetTask(ctx, "p", "S01", store.TaskPatch{Error: new("boom " + hostile)}); err != nil {
			return err
		}
		if err := tx.PutNode(ctx, store.Node{Name: "local", State: "offline", LastError: "ssh: " + hostile, LastSeen: time.Now()}); err != nil {
			return err
		}
		return tx.Event(ctx, store.Event{Project: "p", Task: "S01", Attempt: 1, Kind: "warning", Node: "local", Message: "heartbeat " + hostile})
	})
	st.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"status", "p"},
		{"status"},
		{"status", "p", "--watch"},
		{"events", "p"},
		{"report", "p"},
		{"nodes"},
	} {
		r := runDispatch(t, nil, append([]string{"--home", homeDir}, args...)...)
		if r.code != 0 {
			t.Errorf("%s: %s", strings.Join(args, " "), r)
		}
		if strings.ContainsAny(r.stdout+r.stderr, "\x1b\x07") {
			t.Errorf("%s printed terminal controls: %q", strings.Join(args, " "), r.stdout+r.stderr)
		}
		if !strings.Contains(r.stdout, `\x1b]0;pwned\x07`) {
			t.Errorf("%s does not show the escaped text: %s", strings.Join(args, " "), r)
		}
	}
	md := readFile(t, filepath.Join(home.RunsDir(homeDir, "p"), "report.md"))
	if strings.ContainsAny(md, "\x1b\x07") || !strings.Contains(md, `\x1b[2Jlog tail`) {
		t.Errorf("report.md: %q", md)
	}
}

// TestWatchRenderEscapes: the full-screen view escapes what came from nodes.
func TestWatchRenderEscapes(t *testing.T) {
	v := &readmodel.StatusView{Project: "p", Phase: domain.PhaseImplementation,
		Nodes:  []readmodel.NodeView{{Name: "n1", State: "offline", Slots: 1, LastError: "ssh: " + hostile}},
		Paused: []store.Pause{{APIMode: "m", Until: time.Now().Add(time.Minute), Reason: "limit " + hostile}},
		Tasks: []readmodel.TaskView{
			{ID: "S01", Title: "title " + hostile, Status: domain.Completed},
			{ID: "S02", Status: domain.Failed, ErrorClass: "exit", Error: "boom " + hostile},
			{ID: "S03", Status: domain.Running, Warning: "stale " + hostile},
		}}
	for _, tv := range v.Tasks {
		v.Counts.Add(tv.Status)
	}
	f := &watchFrame{at: time.Now(), views: []*readmodel.StatusView{v}, projects: map[string]domain.Project{"p": {Name: "p"}}}
	out := renderWatch(newStyles(false), f, []string{"error: " + hostile}, 200, 40, "footer")
	if strings.ContainsAny(out, "\x1b\x07") {
		t.Fatalf("the view holds terminal controls: %q", out)
	}
	for _, want := range []string{"title \\x1b]0;pwned", "boom \\x1b]0;pwned", "stale \\x1b]0;pwned", "ssh: \\x1b]0;pwned", "limit \\x1b]0;pwned", "error: \\x1b]0;pwned"} {
		if !strings.Contains(out, want) {
			t.Errorf("the view lacks %q:\n%s", want, out)
		}
	}
}

// TestPruneProblemFromANodeIsEscaped: a prune's PROBLEM line carries what
// a node answered (the wrapper's error reply, when it is asked which
// attempts still run): its terminal controls reach the operator's
// terminal as visible escapes.
func TestPruneProblemFromANodeIsEscaped(t *testing.T) {
	var b strings.Builder
	rep := prune.Report{Project: "app", Problems: []string{"run 1 of app: node n1: ask the wrapper which attempts still run: exit 1: " + hostile}}
	if n := printPrune(&b, []prune.Report{rep}, false); n != 1 {
		t.Fatalf("printPrune counted %d problems", n)
	}
	if strings.ContainsAny(b.String(), "\x1b\x07") {
		t.Errorf("the PROBLEM line holds terminal controls: %q", b.String())
	}
}
