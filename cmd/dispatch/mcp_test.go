package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/dispatch-tool/dispatch/control"
	"github.com/dispatch-tool/dispatch/internal/agentcli"
)

// mcpSession starts `dispatch --home home mcp [flags]` under the SDK's own
// client over stdio. At the test's end it closes the session and checks
// that the server exited 0 and that nothing but the protocol went to its
// stdout (the client would have failed on it).
func mcpSession(t *testing.T, home string, flags ...string) *mcp.ClientSession {
	t.Helper()
	cmd := exec.Command(dispatchBin, append([]string{"--home", home, "mcp"}, flags...)...)
	cmd.Env = slices.Clone(baseEnv)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "dispatch-test", Version: "1"}, nil)
	cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connect to dispatch mcp: %v\n%s", err, stderr.String())
	}
	t.Cleanup(func() {
		if err := cs.Close(); err != nil {
			t.Errorf("close the session: %v", err)
		}
		if cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != 0 {
			t.Errorf("dispatch mcp did not exit 0 when its client closed stdin: %v\n%s", cmd.ProcessState, stderr.String())
		}
	})
	return cs
}

// callTool calls a tool; a protocol error fails the test (a bad argument
// must be a tool error, IsError).
func callTool(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("tools/call %s %v: protocol error %v", name, args, err)
	}
	return res
}

// toolText is the text of a result's first content block.
func toolText(t *testing.T, res *mcp.CallToolResult) string {
	t.Helper()
	if len(res.Content) == 0 {
		t.Fatal("a tool answered with no content")
	}
	tc, ok := res.Content[0].(*mcp.TextContent)
	if !ok {
		t.Fatalf("content is %T, not text", res.Content[0])
	}
	return tc.Text
}

// callOK calls a tool that must succeed and decodes its structured content
// into out (when not nil); it returns the first text block.
func callOK(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any, out any) string {
	t.Helper()
	res := callTool(t, cs, name, args)
	text := toolText(t, res)
	if res.IsError {
		t.Fatalf("%s %v: tool error:\n%s", name, args, text)
	}
	if out != nil {
		b, err := json.Marshal(res.StructuredContent)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s: structured content %s: %v", name, b, err)
		}
	}
	return text
}

// callErr calls a tool that must answer with a tool error containing each
// of want.
func callErr(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any, want ...string) {
	t.Helper()
	res := callTool(t, cs, name, args)
	text := toolText(t, res)
	if !res.IsError {
		t.Fatalf("%s %v: no tool error:\n%s", name, args, text)
	}
	for _, w := range want {
		if !strings.Contains(text, w) {
			t.Errorf("%s %v: the tool error does not say %q:\n%s", name, args, w, text)
		}
	}
}

func TestMCPToolsList(t *testing.T) {
	home, _ := opsHome(t, nil)
	cs := mcpSession(t, home)
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	list, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{ // each tool's properties; the required ones first, with a *
		"validate": {"*project"},
		"start":    {"*project", "fresh", "budget_usd"},
		"status":   {"project", "refresh", "run"},
		"report":   {"*project", "run"},
		"logs":     {"*project", "*id", "attempt", "run", "lines"},
		"events":   {"*project", "cursor", "run"},
		"retry":    {"*project", "*ids", "downstream"},
		"cancel":   {"*project", "*ids"},
		"stop":     {"*project", "kill"},
		"runs":     {"*project"},
	}
	if len(list.Tools) != len(want) {
		t.Errorf("%d tools, want %d", len(list.Tools), len(want))
	}
	for _, tool := range list.Tools {
		props, ok := want[tool.Name]
		if !ok {
			t.Errorf("unexpected tool %q", tool.Name)
			continue
		}
		if tool.Description == "" {
			t.Errorf("%s has no description", tool.Name)
		}
		b, _ := json.Marshal(tool.InputSchema)
		var schema struct {
			Type       string                     `json:"type"`
			Properties map[string]json.RawMessage `json:"properties"`
			Required   []string                   `json:"required"`
		}
		if err := json.Unmarshal(b, &schema); err != nil || schema.Type != "object" {
			t.Errorf("%s: input schema %s", tool.Name, b)
			continue
		}
		var required []string
		for _, p := range props {
			name, req := strings.CutPrefix(p, "*")
			if req {
				required = append(required, name)
			}
			if _, ok := schema.Properties[name]; !ok {
				t.Errorf("%s: no property %q in %s", tool.Name, name, b)
			}
		}
		slices.Sort(required)
		slices.Sort(schema.Required)
		if len(schema.Properties) != len(props) || !slices.Equal(required, schema.Required) {
			t.Errorf("%s: input schema %s, want properties %v", tool.Name, b, props)
		}
		// Each argument has one plain type: a client such as the MCP
		// Inspector builds its form from it and cannot fill in
		// ["null", "integer"]; an optional argument is left out, never null.
		for name, p := range schema.Properties {
			var prop struct {
				Type any `json:"type"`
			}
			if err := json.Unmarshal(p, &prop); err != nil {
				t.Fatal(err)
			}
			if _, ok := prop.Type.(string); !ok || bytes.Contains(p, []byte(`"null"`)) {
				t.Errorf("%s: argument %s is typed %s, want one type and no null", tool.Name, name, p)
			}
		}
		checkAnnotations(t, tool)
	}
}

// checkAnnotations checks a tool's hints: the read tools say so (a client
// may call them without asking), cancel and stop are destructive, and
// only start and retry reach past the home and its nodes (they run tasks).
func checkAnnotations(t *testing.T, tool *mcp.Tool) {
	t.Helper()
	type hints struct{ readOnly, destructive, idempotent, openWorld bool }
	want := map[string]hints{
		"validate": {readOnly: true, idempotent: true},
		"status":   {readOnly: true, idempotent: true},
		"report":   {readOnly: true, idempotent: true},
		"logs":     {readOnly: true, idempotent: true},
		"events":   {readOnly: true, idempotent: true},
		"runs":     {readOnly: true, idempotent: true},
		"start":    {openWorld: true},
		"retry":    {openWorld: true},
		"cancel":   {destructive: true, idempotent: true},
		"stop":     {destructive: true, idempotent: true},
	}[tool.Name]
	a := tool.Annotations
	if a == nil || a.DestructiveHint == nil || a.OpenWorldHint == nil || a.Title == "" {
		t.Errorf("%s: annotations %+v: want a title and every hint set", tool.Name, a)
		return
	}
	if got := (hints{a.ReadOnlyHint, *a.DestructiveHint, a.IdempotentHint, *a.OpenWorldHint}); got != want {
		t.Errorf("%s: hints %+v, want %+v", tool.Name, got, want)
	}
}

// TestMCPRun drives a real project through the MCP tools: start (detached),
// status until done, logs, report, events with a cursor, runs, retry,
// stop; bad arguments are tool errors with the CLI's message, and the
// server keeps answering after them.
func TestMCPRun(t *testing.T) {
	home, _ := opsHome(t, map[string]map[string]string{"p": {
		"S01-a.md": "# A\necho hello from S01\n",
		"S02-b.md": "---\ndepends_on: [S01]\n---\n# B\nfor i in $(seq 1 300); do echo line$i; done\n",
		"S03-c.md": "---\nmax_retries: 0\n---\n# C\necho about to fail >&2\nexit 3\n",
	}})
	t.Cleanup(func() {
		// A test that ended early leaves no controller behind.
		if control.Running(home) {
			runDispatch(t, nil, "--home", home, "stop", "p", "--kill")
		}
		pollUntil(t, 30*time.Second, "the background controller to exit", func() bool {
			_, err := os.Stat(filepath.Join(home, "dispatch.pid"))
			return os.IsNotExist(err) && !control.Running(home)
		})
	})
	cs := mcpSession(t, home)

	// Before anything ran.
	callErr(t, cs, "status", map[string]any{"project": "../x"}, `invalid name "../x"`)
	callErr(t, cs, "validate", map[string]any{"project": "nope"}, "exit 2", "nope")
	callErr(t, cs, "status", map[string]any{"project": "p"}, "exit 2", "no project has been started", "Try: dispatch start <project>")
	callErr(t, cs, "logs", map[string]any{"project": "p", "id": "S01", "lines": 0}, "lines takes 1 to")
	callErr(t, cs, "stop", map[string]any{"project": "p", "bogus": true}, "bogus")
	if text := callOK(t, cs, "validate", map[string]any{"project": "p"}, nil); !strings.Contains(text, "S03") || !strings.Contains(text, "Next: start") {
		t.Errorf("validate p:\n%s", text)
	}

	var started struct {
		Project string `json:"project"`
		Run     struct {
			Run int `json:"run"`
		} `json:"run"`
	}
	text := callOK(t, cs, "start", map[string]any{"project": "p"}, &started)
	if !strings.Contains(text, "background") || started.Project != "p" || started.Run.Run != 1 {
		t.Fatalf("start p: %+v\n%s", started, text)
	}

	var st statusJSON
	pollUntil(t, 60*time.Second, "p to finish (status)", func() bool {
		text = callOK(t, cs, "status", map[string]any{"project": "p"}, &st)
		return st.Phase == "done"
	})
	if st.Counts["completed"] != 2 || st.Counts["failed"] != 1 || !strings.Contains(text, "S03 failed") || !strings.Contains(text, "Next: report") {
		t.Errorf("status of the finished p: %+v\n%s", st.Counts, text)
	}
	waitDetachedDone(t, home, "p")
	if text = callOK(t, cs, "status", nil, nil); !strings.HasPrefix(text, "p: phase done; 3 task(s): 2 completed, 1 failed.") {
		t.Errorf("status of every project:\n%s", text)
	}
	// The second text block is the CLI's JSON, as the structured content,
	// fenced: it holds the tasks' errors.
	res := callTool(t, cs, "status", map[string]any{"project": "p"})
	var fromText statusJSON
	if len(res.Content) != 2 {
		t.Fatalf("status: %d content blocks, want the summary and the JSON", len(res.Content))
	}
	_, js := fenced(t, "status", res.Content[1].(*mcp.TextContent).Text)
	if json.Unmarshal([]byte(js), &fromText) != nil || fromText.Phase != "done" {
		t.Errorf("status: the second block is not the status JSON: %v", res.Content)
	}
	assertStatusShape(t, js)

	mcpLogs(t, cs)
	mcpEvents(t, cs)

	var rep struct {
		Result string `json:"result"`
		Totals struct {
			Tasks int `json:"tasks"`
		} `json:"totals"`
	}
	text = callOK(t, cs, "report", map[string]any{"project": "p"}, &rep)
	if rep.Result != "failed" || rep.Totals.Tasks != 3 || !strings.Contains(text, "p run 1: failed") || !strings.Contains(text, "S03 failed") {
		t.Errorf("report: %+v\n%s", rep, text)
	}
	var runs struct {
		Runs []struct {
			Run    int    `json:"run"`
			Result string `json:"result"`
		} `json:"runs"`
	}
	if text = callOK(t, cs, "runs", map[string]any{"project": "p"}, &runs); len(runs.Runs) != 1 || runs.Runs[0].Result != "failed" {
		t.Errorf("runs: %+v\n%s", runs, text)
	}

	// Bad arguments of a started project: the CLI's message, then the
	// server answers on.
	callErr(t, cs, "status", map[string]any{"project": "nope"}, "exit 2", `project "nope" has not been started`, "Try: dispatch start nope")
	callErr(t, cs, "retry", map[string]any{"project": "p", "ids": []string{"S42"}}, "exit 2", `project p has no task "S42"`)
	callErr(t, cs, "retry", map[string]any{"project": "p", "ids": []string{"--kill"}}, "exit 2", `"--kill" is not a task ID`)
	callErr(t, cs, "cancel", map[string]any{"project": "p", "ids": []string{}}, "exit 2", "name the tasks")
	callErr(t, cs, "report", map[string]any{"project": "p", "run": 7}, "exit 2", "run")
	callErr(t, cs, "start", map[string]any{"project": "p", "budget_usd": -1}, "exit 2", "--budget-usd must be a positive amount")
	if text = callOK(t, cs, "retry", map[string]any{"project": "p", "ids": []string{"S03"}}, nil); !strings.Contains(text, "S03") || !strings.Contains(text, "Next: status") {
		t.Errorf("retry S03:\n%s", text)
	}
	callErr(t, cs, "retry", map[string]any{"project": "p", "ids": []string{"S42"}, "downstream": true}, "exit 2", `project p has no task "S42"`)
	if text = callOK(t, cs, "retry", map[string]any{"project": "p", "ids": []string{"S01"}, "downstream": true}, nil); !strings.Contains(text, "S01, S02 will run again") ||
		!strings.Contains(text, "--downstream: S02 after them") {
		t.Errorf("retry S01 downstream:\n%s", text)
	}
	if text = callOK(t, cs, "stop", map[string]any{"project": "p"}, nil); !strings.Contains(text, "Next: status") || !strings.Contains(text, `start {project: "p"} resumes`) {
		t.Errorf("stop p:\n%s", text)
	}
	if control.Running(home) {
		t.Error("retry and stop with no controller running left one running")
	}
}

// mcpLogs: logs returns the log's last lines (200 by default).
func mcpLogs(t *testing.T, cs *mcp.ClientSession) {
	t.Helper()
	var logs struct {
		Lines      int    `json:"lines"`
		TotalLines int    `json:"total_lines"`
		Log        string `json:"log"`
	}
	text := callOK(t, cs, "logs", map[string]any{"project": "p", "id": "S02", "lines": 3}, &logs)
	_, log := fenced(t, "logs", text)
	if logs.Lines != 3 || logs.TotalLines < 300 || !strings.HasSuffix(logs.Log, "line298\nline299\nline300\n") ||
		!strings.Contains(text, "the last 3 of") || log != logs.Log {
		t.Errorf("logs S02, 3 lines: %+v\n%s", logs, text)
	}
	callOK(t, cs, "logs", map[string]any{"project": "p", "id": "S02"}, &logs)
	if logs.Lines != 200 || strings.Count(logs.Log, "\n") != 200 {
		t.Errorf("logs S02: %d lines, want the default 200", logs.Lines)
	}
	callOK(t, cs, "logs", map[string]any{"project": "p", "id": "S03", "attempt": 1}, &logs)
	if !strings.Contains(logs.Log, "about to fail") {
		t.Errorf("logs S03: %+v", logs)
	}
	callErr(t, cs, "logs", map[string]any{"project": "p", "id": "S01", "attempt": 5}, "exit 2", "has attempts 1 to 1")
}

// mcpEvents: events after a cursor returns the events after it and the
// next cursor.
func mcpEvents(t *testing.T, cs *mcp.ClientSession) {
	t.Helper()
	var all, after eventsAnswer
	text := callOK(t, cs, "events", map[string]any{"project": "p"}, &all)
	n := len(all.Events)
	if n < 4 || all.NextCursor != all.Events[n-1].ID || all.More || !strings.Contains(text, "next_cursor") {
		t.Fatalf("events: %+v\n%s", all, text)
	}
	callOK(t, cs, "events", map[string]any{"project": "p", "cursor": all.Events[1].ID}, &after)
	if len(after.Events) != n-2 || after.Events[0].ID != all.Events[2].ID || after.NextCursor != all.NextCursor {
		t.Errorf("events after %d: %d events from %v, want %d from %d", all.Events[1].ID, len(after.Events), after.Events, n-2, all.Events[2].ID)
	}
	callOK(t, cs, "events", map[string]any{"project": "p", "cursor": all.NextCursor}, &after)
	if len(after.Events) != 0 || after.NextCursor != all.NextCursor {
		t.Errorf("events after the last: %+v", after)
	}
}

// TestMCPReadme checks the docs of dispatch mcp against the server and the
// agent CLIs: docs/MCP.md lists every tool the server has, the README
// stays within 250 lines, and each of the README's `mcp add` lines, run
// by the real CLI it names (at its pinned version, with a home of its
// own), registers `dispatch --home DIR mcp`.
func TestMCPReadme(t *testing.T) {
	readme := docText(t, "README.md")
	if n := strings.Count(readme, "\n"); n > 250+1 {
		t.Errorf("README.md has %d lines; it stays within 250 (the reference lives in docs/)", n)
	}
	doc := docText(t, "docs/MCP.md")
	srv := mcp.NewServer(&mcp.Implementation{Name: "dispatch", Version: "test"}, nil)
	addMCPTools(srv, &cliRunner{}, false)
	ct, st := mcp.NewInMemoryTransports()
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	ss, err := srv.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	list, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range list.Tools {
		if !strings.Contains(doc, "| `"+tool.Name+"` |") {
			t.Errorf("docs/MCP.md's table lacks the tool %s", tool.Name)
		}
	}

	var adds [][]string
	for _, line := range strings.Split(readme, "\n") {
		cmd, _, _ := strings.Cut(strings.TrimSpace(line), "#")
		if f := strings.Fields(cmd); len(f) > 3 && f[1] == "mcp" && f[2] == "add" {
			if !strings.Contains(doc, strings.TrimSpace(cmd)) {
				t.Errorf("docs/MCP.md does not show the README's %q", strings.TrimSpace(cmd))
			}
			adds = append(adds, f)
		}
	}
	if len(adds) != 3 {
		t.Fatalf("the README shows %d `mcp add` lines, want claude's, codex's and gemini's", len(adds))
	}
	bin := agentcli.Dir(t)
	for _, f := range adds {
		t.Run(f[0], func(t *testing.T) {
			home := t.TempDir()
			work := filepath.Join(home, "work")
			proj := filepath.Join(home, "proj")
			if err := os.Mkdir(proj, 0o700); err != nil {
				t.Fatal(err)
			}
			args := slices.Clone(f[1:])
			for i, a := range args {
				args[i] = strings.Replace(a, "~/work", work, 1)
			}
			ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
			defer cancel()
			cmd := exec.CommandContext(ctx, filepath.Join(bin, f[0]), args...)
			cmd.Dir = proj
			cmd.Env = []string{"HOME=" + home, "PATH=" + agentcli.PATH(t, bin), "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1"}
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%s: %v\n%s", strings.Join(f, " "), err, out)
			}
			// Whatever file it wrote (JSON or TOML) names the command and
			// its arguments in order.
			want := `["--home","` + work + `","mcp"]`
			found := false
			filepath.WalkDir(home, func(path string, d os.DirEntry, err error) error {
				if err != nil || d.IsDir() || found {
					return nil
				}
				b, err := os.ReadFile(path)
				if err == nil && bytes.Contains(b, []byte(`"dispatch"`)) &&
					strings.Contains(strings.Join(strings.Fields(string(b)), ""), want) {
					found = true
				}
				return nil
			})
			if !found {
				t.Errorf("%s registered no server `dispatch --home %s mcp` under %s", strings.Join(f, " "), work, home)
			}
		})
	}
}
