package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/notify"
)

// inbox is a directory a notify command target writes each message it
// gets to, one file a message, in order.
type inbox string

// notifyCommand is the YAML list of a command target that files each
// message it gets in dir (argv fixed: the message comes on stdin).
func notifyCommand(dir string) string {
	return fmt.Sprintf(`[/bin/sh, -c, 'n=$(ls "$1" | wc -l); cat > "$1/.m" && mv "$1/.m" "$1/$(printf %%04d $n).json"', sh, %q]`, dir)
}

func newInbox(t *testing.T) inbox {
	t.Helper()
	return inbox(t.TempDir())
}

// messages are the messages received so far, in order.
func (in inbox) messages(t *testing.T) []notify.Message {
	t.Helper()
	entries, err := os.ReadDir(string(in))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".json") {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	var out []notify.Message
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(string(in), n))
		if err != nil {
			t.Fatal(err)
		}
		var m notify.Message
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("message %s is not JSON: %v: %q", n, err, b)
		}
		out = append(out, m)
	}
	return out
}

// events flattens the messages received into their events.
func (in inbox) events(t *testing.T) []notify.Message {
	var out []notify.Message
	for _, m := range in.messages(t) {
		if m.Event == notify.Batch {
			out = append(out, m.Events...)
		} else {
			out = append(out, m)
		}
	}
	return out
}

func (in inbox) find(t *testing.T, event, task string) *notify.Message {
	for _, m := range in.events(t) {
		if m.Event == event && (task == "" || m.Task == task) {
			return &m
		}
	}
	return nil
}

// TestTaskFailedArrivesWhileTheRunGoesOn: a task that fails for good is
// told at once — its class, the end of its log, the task it blocks — while
// another task of the run still runs; what its log says stays data. The
// run's end is told afterwards, run_finished and run_failed in one
// message.
func TestTaskFailedArrivesWhileTheRunGoesOn(t *testing.T) {
	in := newInbox(t)
	dir := t.TempDir()
	stop, pwned := filepath.Join(dir, "stop"), filepath.Join(dir, "pwned")
	h := newHarness(t, unsandboxed("", "S02 waits for a file the test writes outside its workspace"), map[string]string{
		"project.yaml": "tool: shell\nintegration: false\nnotify:\n  command: " + notifyCommand(string(in)) + "\n",
		"S01-fails.md": fmt.Sprintf("---\nmax_retries: 0\n---\necho first line\necho 'it said \"; touch %s; $(touch %s)'\nexit 3\n", pwned, pwned),
		"S02-waits.md": fmt.Sprintf("while [ ! -e '%s' ] && [ -d '%s' ]; do sleep 0.05; done\necho done\n", stop, filepath.Dir(stop)),
		"S03-after.md": "---\ndepends_on: [S01]\n---\necho never\n",
	})
	t.Cleanup(func() { os.WriteFile(stop, nil, 0o644) })
	h.tickUntil("task_failed to arrive", func() bool { return in.find(t, notify.TaskFailed, "S01") != nil })
	if s := h.task("S02").Status; s != domain.Running && s != domain.Claimed {
		t.Fatalf("S02 is %s when S01's failure arrives; want it still running", s)
	}
	if p, _ := h.st.Project(context.Background(), "p"); p.State == domain.ProjectDone {
		t.Fatal("the run ended before S01's failure was told")
	}
	m := in.find(t, notify.TaskFailed, "S01")
	if m.Project != "p" || m.Run != 1 || m.ErrorClass != "exit" || m.Node != "local" || !slices.Equal(m.Blocked, []string{"S03"}) ||
		!strings.Contains(m.LogTail, "first line") || !strings.Contains(m.LogTail, "$(touch") || !strings.Contains(m.Message, "blocks S03") {
		t.Errorf("task_failed: %+v", m)
	}
	if _, err := os.Stat(pwned); err == nil {
		t.Error("a task's log ran as a command")
	}
	if err := os.WriteFile(stop, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	h.tickUntil("run_failed to arrive", func() bool { return in.find(t, notify.RunFailed, "") != nil })
	last := in.messages(t)[len(in.messages(t))-1]
	if last.Event != notify.Batch || len(last.Events) != 2 || last.Events[0].Event != notify.RunFinished ||
		last.Events[1].Event != notify.RunFailed || last.Events[1].Result != domain.ResultFailed {
		t.Errorf("the run's end: %+v; want run_finished and run_failed in one message", last)
	}
}

// TestNodeOfflineAndBack: a node that stops answering is told as
// node_offline, and node_back when it answers again, through nodes.yaml's
// notify: (filtered by its on:), once each.
func TestNodeOfflineAndBack(t *testing.T) {
	in := newInbox(t)
	stop := filepath.Join(t.TempDir(), "stop")
	yaml := strings.Replace(dueYAML, `nodes:
  - name: local
    slots: 2
    work_dir: WORK
`, `notify:
  command: `+notifyCommand(string(in))+`
  on: [node_offline, node_back]
nodes:
  - name: n1
    slots: 1
    work_dir: WORK/n1
  - name: n2
    slots: 1
    work_dir: WORK/n2
`, 1)
	yaml = strings.Replace(yaml, "node_offline_timeout: 2s", "node_offline_timeout: 10m", 1)
	h := newHarness(t, unsandboxed(yaml, "the task waits for a file the test writes outside its workspace"),
		shellProject(map[string]string{"S01-a.md": fmt.Sprintf("while [ ! -e '%s' ] && [ -d '%s' ]; do sleep 0.05; done\n", stop, filepath.Dir(stop))}))
	t.Cleanup(func() { os.WriteFile(stop, nil, 0o644) })
	n1 := &switchable{Transport: nodes.NewLocal()}
	onTheRealClock(h, map[string]nodes.Transport{"n1": n1}, false)
	h.tickUntil("S01 to run", func() bool { return h.task("S01").Status == domain.Running })
	n1.down.Store(true)
	h.tickUntil("node_offline to arrive", func() bool { return in.find(t, notify.NodeOffline, "") != nil })
	n1.down.Store(false)
	h.tickUntil("node_back to arrive", func() bool { return in.find(t, notify.NodeBack, "") != nil })
	var got []string
	for _, m := range in.events(t) {
		got = append(got, m.Event+" "+m.Node)
	}
	if strings.Join(got, ", ") != "node_offline n1, node_back n1" {
		t.Errorf("events received: %q; want n1 offline then back, once each", got)
	}
	if m := in.find(t, notify.NodeOffline, ""); m.Project != "" || !strings.Contains(m.Error, "node down in the test") {
		t.Errorf("node_offline: %+v", m)
	}
}
