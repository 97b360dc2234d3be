package notify

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/dispatch-tool/dispatch/internal/yamlval"
)

// TestGroup: the messages of one tick go to each target once, as one
// message, filtered by each block's on:; two blocks naming one target
// (a project's and nodes.yaml's) share its message.
func TestGroup(t *testing.T) {
	t.Parallel()
	hook := Config{Webhook: "https://h.example/x"}
	failures := Config{Webhook: "https://h.example/x", On: []string{TaskFailed, RunFailed}}
	cmd := Config{Command: []string{"notifier"}}
	m := func(event, project string) Message { return Message{Event: event, Project: project} }
	tests := []struct {
		name  string
		items []Addressed
		want  []string // per target: its key's program or URL, then its events
	}{
		{"nothing", nil, nil},
		{"one event, one target", []Addressed{{0, hook, m(RunFinished, "a")}}, []string{"https://h.example/x: run_finished"}},
		{"a tick's events: one message per target", []Addressed{
			{0, hook, m(TaskFailed, "a")}, {1, cmd, m(TaskFailed, "b")}, {2, hook, m(TaskFailed, "a")}, {3, hook, m(RunFinished, "a")}},
			[]string{"https://h.example/x: task_failed task_failed run_finished", "notifier: task_failed"}},
		{"on: filters", []Addressed{{0, failures, m(RunFinished, "a")}, {1, failures, m(NodeOffline, "")}, {2, failures, m(TaskFailed, "a")}},
			[]string{"https://h.example/x: task_failed"}},
		{"on: filters everything: no message", []Addressed{{0, failures, m(ScheduleSkipped, "a")}}, nil},
		{"a node event through two blocks naming one target goes once", []Addressed{{0, hook, m(NodeOffline, "")}, {0, hook, m(NodeOffline, "")}, {0, cmd, m(NodeOffline, "")}},
			[]string{"https://h.example/x: node_offline", "notifier: node_offline"}},
		{"one target, two filters: each block's own", []Addressed{{0, hook, m(RunFinished, "a")}, {1, failures, m(RunFinished, "b")}, {2, failures, m(RunFailed, "b")}},
			[]string{"https://h.example/x: run_finished run_failed"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, o := range Group(tc.items) {
				name := o.Config.Webhook
				if name == "" {
					name = o.Config.Command[0]
				}
				var events []string
				for _, m := range o.Messages {
					events = append(events, m.Event)
				}
				got = append(got, name+": "+strings.Join(events, " "))
			}
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// TestBundle: one message goes as it always did; several go as one batch
// that lists them, says what they are and keeps the project and run they
// share.
func TestBundle(t *testing.T) {
	t.Parallel()
	one := Message{Event: RunFinished, Project: "a", Run: 2, Result: "passed", At: "t1"}
	tests := []struct {
		name                   string
		in                     []Message
		event, project, prefix string
		run, events            int
	}{
		{"one: itself", []Message{one}, RunFinished, "a", "", 2, 0},
		{"two of one project", []Message{{Event: TaskFailed, Project: "a", Run: 2}, one}, Batch, "a", "2 events: 1 task_failed, 1 run_finished", 2, 2},
		{"three of two projects", []Message{{Event: TaskFailed, Project: "a", Run: 2}, {Event: TaskFailed, Project: "b", Run: 1}, {Event: NodeOffline}},
			Batch, "", "3 events: 2 task_failed, 1 node_offline", 0, 3},
		{"two runs of one project", []Message{{Event: RunFinished, Project: "a", Run: 1}, {Event: RunFinished, Project: "a", Run: 2}}, Batch, "a", "2 events: 2 run_finished", 0, 2},
		{"ten thousand failures: the first listed, all counted", slices.Repeat([]Message{{Event: TaskFailed, Project: "a", Run: 1}}, 10000),
			Batch, "a", "10000 events: 10000 task_failed (the first 100 listed", 1, MaxBatchEvents},
	}
	for _, tc := range tests {
		b := Bundle(tc.in)
		if b.Event != tc.event || b.Project != tc.project || b.Run != tc.run || len(b.Events) != tc.events || !strings.HasPrefix(b.Message, tc.prefix) {
			t.Errorf("%s: %+v", tc.name, b)
		}
	}
}

// TestHostileTextStaysData: what a task controls (its log, its error)
// reaches a command only as JSON on its stdin — quotes, `$(…)`, newlines
// and bytes that are not UTF-8 neither run anything nor break the JSON —
// and the command's argv is the block's, unchanged.
func TestHostileTextStaysData(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pwned := filepath.Join(dir, "pwned")
	hostile := "\"; touch " + pwned + "; echo \"\n$(touch " + pwned + ")`touch " + pwned + "`\x00\xff\xfe}]}"
	msgs := []Message{
		{Event: TaskFailed, Project: "p", Task: "S01", ErrorClass: "exit", Error: hostile, LogTail: hostile, Blocked: []string{"S02"}},
		{Event: GateFailed, Project: "p", Task: "S01", LogTail: hostile},
	}
	out := filepath.Join(dir, "got.json")
	args := filepath.Join(dir, "args")
	argv := []string{"/bin/sh", "-c", `cat > "$1"; printf '%s\n' "$#" > "$2"`, "sh", out, args}
	body, err := json.Marshal(Bundle(msgs))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := quickSender().Command(context.Background(), argv, body); err != nil {
		t.Fatal(err)
	}
	var got Message
	raw, _ := os.ReadFile(out)
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatalf("the command's stdin is not JSON: %v: %q", err, raw)
	}
	if got.Event != Batch || len(got.Events) != 2 || got.Events[0].Task != "S01" || got.Events[0].Blocked[0] != "S02" ||
		!strings.Contains(got.Events[0].LogTail, "$(touch") || got.Events[1].Event != GateFailed {
		t.Errorf("the command got %+v", got)
	}
	if _, err := os.Stat(pwned); err == nil {
		t.Error("text from a task ran as a command")
	}
	if b, _ := os.ReadFile(args); strings.TrimSpace(string(b)) != "2" {
		t.Errorf("the command got %q arguments, want its own 2", b)
	}
}

// TestOnFromYAML: on: lists known events; anything else is refused at its
// line with the list of the known ones.
func TestOnFromYAML(t *testing.T) {
	t.Parallel()
	tests := []struct {
		src  string
		on   []string
		want string // the first problem, "" for none
	}{
		{"notify: {command: [n], on: [task_failed, run_failed]}\n", []string{TaskFailed, RunFailed}, ""},
		{"notify: {command: [n]}\n", nil, ""},
		{"notify:\n  command: [n]\n  on: [task_failed, task_faild]\n", nil, `project.yaml:3: notify: on: unknown event "task_faild"`},
		{"notify:\n  command: [n]\n  on: task_failed\n", nil, "project.yaml:3: notify: on must be a list of events"},
		{"notify:\n  command: [n]\n  on: []\n", nil, "project.yaml:3: notify: on is an empty list"},
	}
	for _, tc := range tests {
		var doc yaml.Node
		if err := yaml.Unmarshal([]byte(tc.src), &doc); err != nil {
			t.Fatal(err)
		}
		var ps yamlval.Problems
		c := FromYAML(yamlval.Doc{Problems: &ps, File: "project.yaml"}, doc.Content[0].Content[1])
		switch {
		case tc.want == "" && (len(ps) > 0 || c == nil || strings.Join(c.On, ",") != strings.Join(tc.on, ",")):
			t.Errorf("%q: %+v, %v", tc.src, c, ps)
		case tc.want != "" && (len(ps) == 0 || !strings.HasPrefix(ps[0].Error(), tc.want) || !strings.Contains(ps[0].Error(), "known events: run_finished, run_failed, task_failed")):
			t.Errorf("%q: %v; want %q… with the known events", tc.src, ps, tc.want)
		}
	}
	if ps := (Config{Command: []string{"n"}, On: []string{"nope"}}).Check(); len(ps) != 1 || ps[0].Field != "on" {
		t.Errorf("Check of an unknown event: %+v", ps)
	}
}
