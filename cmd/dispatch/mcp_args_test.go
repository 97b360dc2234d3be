package main

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/control"
	"github.com/dispatch-tool/dispatch/domain"
)

// leaveNoController stops, at the test's end, a background controller the
// test left running, and waits until it has gone.
func leaveNoController(t *testing.T, home string, projects ...string) {
	t.Helper()
	t.Cleanup(func() {
		for _, p := range projects {
			if control.Running(home) {
				runDispatch(t, nil, "--home", home, "stop", p, "--kill")
			}
		}
		pollUntil(t, 30*time.Second, "the background controller to exit", func() bool {
			_, err := os.Stat(filepath.Join(home, "dispatch.pid"))
			return os.IsNotExist(err) && !control.Running(home)
		})
	})
}

// TestMCPOptionalArguments passes every optional argument of every tool
// through the SDK's client, as a client filling the tools' forms from
// their schemas does, and sees null refused by the schema for optional
// and required arguments alike (issue 39: they were typed ["null",
// "integer"] and ["null", "array"], which the MCP Inspector cannot fill
// in, and a null ids reached the command).
func TestMCPOptionalArguments(t *testing.T) {
	home, _ := opsHome(t, map[string]map[string]string{"p": {"S01-a.md": "# A\necho one\necho two\necho three\n"}})
	leaveNoController(t, home, "p")
	cs := mcpSession(t, home)

	callOK(t, cs, "start", map[string]any{"project": "p", "fresh": true, "budget_usd": 5}, nil)
	var st statusJSON
	pollUntil(t, 60*time.Second, "p to finish (status with run)", func() bool {
		callOK(t, cs, "status", map[string]any{"project": "p", "run": 1}, &st)
		return st.Phase == "done"
	})
	waitDetachedDone(t, home, "p")
	if text := callOK(t, cs, "status", map[string]any{}, nil); !strings.HasPrefix(text, "p: phase done") {
		t.Errorf("status without project:\n%s", text)
	}
	var rep struct{ Result string }
	if callOK(t, cs, "report", map[string]any{"project": "p", "run": 1}, &rep); rep.Result != domain.ResultPassed {
		t.Errorf("report run 1: %q", rep.Result)
	}
	var logs struct {
		Lines int    `json:"lines"`
		Log   string `json:"log"`
	}
	callOK(t, cs, "logs", map[string]any{"project": "p", "id": "S01", "attempt": 1, "run": 1, "lines": 2}, &logs)
	if logs.Lines != 2 || !strings.HasSuffix(logs.Log, "two\nthree\n") {
		t.Errorf("logs with attempt, run and lines: %+v", logs)
	}
	var ev eventsAnswer
	callOK(t, cs, "events", map[string]any{"project": "p", "cursor": 1, "run": 1}, &ev)
	if ev.Cursor != 1 || len(ev.Events) == 0 || ev.Events[0].ID <= 1 {
		t.Errorf("events after cursor 1: %+v", ev)
	}
	callOK(t, cs, "runs", map[string]any{"project": "p"}, nil)
	callOK(t, cs, "retry", map[string]any{"project": "p", "ids": []string{"S01"}}, nil)
	callOK(t, cs, "cancel", map[string]any{"project": "p", "ids": []string{"S01"}}, nil)
	callOK(t, cs, "stop", map[string]any{"project": "p", "kill": true}, nil)
	if tk := taskState(t, home, "p", "S01"); tk.Status != domain.Canceled {
		t.Errorf("S01 after retry then cancel: %s", tk.Status)
	}

	// An argument is given or left out, never null: the schema refuses it
	// before any command runs.
	for _, c := range []struct {
		tool string
		args map[string]any
	}{
		{"cancel", map[string]any{"project": "p", "ids": nil}},
		{"retry", map[string]any{"project": "p", "ids": nil}},
		{"events", map[string]any{"project": "p", "cursor": nil}},
		{"logs", map[string]any{"project": "p", "id": "S01", "lines": nil}},
		{"status", map[string]any{"project": "p", "run": nil}},
		{"start", map[string]any{"project": "p", "budget_usd": nil}},
		{"report", map[string]any{"project": nil}},
	} {
		callErr(t, cs, c.tool, c.args, `validating "arguments"`)
	}
}

// TestMCPReadOnly: `dispatch mcp --read-only` lists only the read tools,
// says so in its instructions, and refuses a write tool called anyway
// with a tool error that names the fix; nothing changes.
func TestMCPReadOnly(t *testing.T) {
	home, _ := opsHome(t, map[string]map[string]string{"p": {"S01-a.md": "# A\necho a\n"}})
	if r := runDispatch(t, nil, "--home", home, "start", "p"); r.code != 0 {
		t.Fatalf("start p: %s", r)
	}
	cs := mcpSession(t, home, "--read-only")
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	list, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range list.Tools {
		names = append(names, tool.Name)
		if tool.Annotations == nil || !tool.Annotations.ReadOnlyHint {
			t.Errorf("%s is offered read-only without readOnlyHint", tool.Name)
		}
	}
	slices.Sort(names)
	if want := []string{"events", "logs", "report", "runs", "status", "validate"}; !slices.Equal(names, want) {
		t.Errorf("read-only tools %v, want %v", names, want)
	}
	if ins := cs.InitializeResult().Instructions; !strings.Contains(ins, "read-only") {
		t.Errorf("the instructions do not say read-only:\n%s", ins)
	}
	for tool, args := range map[string]map[string]any{
		"start":  {"project": "p", "fresh": true},
		"retry":  {"project": "p", "ids": []string{"S01"}},
		"cancel": {"project": "p", "ids": []string{"S01"}},
		"stop":   {"project": "p", "kill": true},
	} {
		callErr(t, cs, tool, args, tool+" is refused", "read-only", "dispatch mcp without --read-only")
	}
	if text := callOK(t, cs, "status", map[string]any{"project": "p"}, nil); !strings.HasPrefix(text, "p: phase done") {
		t.Errorf("status read-only:\n%s", text)
	}
	if tk := taskState(t, home, "p", "S01"); tk.Status != domain.Completed || tk.Attempt != 1 {
		t.Errorf("S01 after refused writes: %s, attempt %d", tk.Status, tk.Attempt)
	}
	if control.Running(home) {
		t.Error("a refused start started a controller")
	}
}

// cliCommand is a dispatch command line in an answer of the MCP server,
// which names tool calls instead.
var cliCommand = regexp.MustCompile(`dispatch (validate|start|status|report|logs|events|retry|cancel|stop|runs)\b`)

// TestMCPStopAnswersWithToolCalls: the answers of stop and of status after
// it say that the operator stopped the project and how to resume it, as
// tool calls, never CLI commands; a task blocked by a canceled dependency
// says why (issue 39: status showed "blocked" with an empty reason).
func TestMCPStopAnswersWithToolCalls(t *testing.T) {
	gate := filepath.Join(t.TempDir(), "go")
	home, _ := opsHome(t, map[string]map[string]string{"k": {
		"S01-long.md":  "while [ ! -e '" + gate + "' ]; do sleep 0.05; done\n",
		"S02-later.md": "---\ndepends_on: [S01]\n---\necho later\n",
	}})
	unsandboxed(t, home, "S01 waits for a file the test writes outside its workspace")
	leaveNoController(t, home, "k")
	cs := mcpSession(t, home)
	noCLI := func(what, text string) {
		t.Helper()
		if m := cliCommand.FindString(text); m != "" {
			t.Errorf("%s names the CLI command %q, not a tool call:\n%s", what, m, text)
		}
	}
	text := callOK(t, cs, "start", map[string]any{"project": "k"}, nil)
	noCLI("start", text)
	pollUntil(t, 30*time.Second, "k/S01 to run", func() bool { return taskState(t, home, "k", "S01").Status == domain.Running })

	text = callOK(t, cs, "stop", map[string]any{"project": "k"}, nil)
	if !strings.Contains(text, `start {project: "k"}`) || !strings.Contains(text, "S01") {
		t.Errorf("stop k: no resume call:\n%s", text)
	}
	noCLI("stop", text)
	text = callOK(t, cs, "status", map[string]any{"project": "k"}, nil)
	if !strings.Contains(text, "stopped by the operator") || !strings.Contains(text, `start {project: "k"}`) {
		t.Errorf("status of the stopped k:\n%s", text)
	}
	noCLI("status", text)

	text = callOK(t, cs, "stop", map[string]any{"project": "k", "kill": true}, nil)
	if !strings.Contains(text, `retry {project: "k", ids: ["S01"]}`) || !strings.Contains(text, `start {project: "k"}`) {
		t.Errorf("stop k with kill:\n%s", text)
	}
	noCLI("stop with kill", text)
	pollUntil(t, 30*time.Second, "k/S02 to be blocked", func() bool { return taskState(t, home, "k", "S02").Status == domain.Blocked })
	for _, args := range []map[string]any{{"project": "k"}, {}} {
		text = callOK(t, cs, "status", args, nil)
		if !strings.Contains(text, "stopped by the operator") || !strings.Contains(text, `retry {project: "k", ids: ["S01"]}`) ||
			!strings.Contains(text, `start {project: "k"}`) || !regexp.MustCompile(`S02 blocked: \S`).MatchString(text) {
			t.Errorf("status %v of k, stopped with S01 canceled:\n%s", args, text)
		}
		noCLI("status", text)
	}
	// Resumed as it says.
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	callOK(t, cs, "retry", map[string]any{"project": "k", "ids": []string{"S01"}}, nil)
	noCLI("start", callOK(t, cs, "start", map[string]any{"project": "k"}, nil))
	waitDetachedDone(t, home, "k")
	if tk := taskState(t, home, "k", "S02"); tk.Status != domain.Completed {
		t.Errorf("S02 after retry and start: %s", tk.Status)
	}
}
