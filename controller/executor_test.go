package controller

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/controller/executor"
	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/wire"
)

// execStep is one tick against a recordingExec: what the executor answers
// (data), and what the tick must ask of it and leave in the database.
type execStep struct {
	// status is the Status reply: []wire.TaskStatus, or an error.
	status any
	// launch and kill are the outcomes by task ID; a launch not listed
	// starts (pid 4242), a kill not listed succeeds.
	launch map[string]executor.Launched
	kill   map[string]executor.Killed
	// advance moves the controller's clock before the tick.
	advance time.Duration
	// calls are the executor calls the tick makes, in order: "status",
	// "launch S01 S02" (one call, its items), "kill S01/2s".
	calls string
	// tasks is each task's "ID status retries" after the tick.
	tasks string
	// held is set when the node is held back after the tick by a kill not
	// confirmed (see Controller.unkilled).
	held bool
	// running, when set, is the status call's Query.Running: the tasks
	// the database runs on the node, "none" or "unread" (nil).
	running string
}

// recordingExec is an executor whose answers are the current step's data
// and which records every call made of it.
type recordingExec struct {
	mu      sync.Mutex
	step    execStep
	calls   []string
	running string // the last Status call's Query.Running, as execStep's
}

func (r *recordingExec) record(call string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, call)
}

func (r *recordingExec) current() execStep {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.step
}

func (r *recordingExec) Launch(_ context.Context, _ *nodes.Installed, items []wire.LaunchItem) []executor.Launched {
	step := r.current()
	ids := make([]string, len(items))
	outs := make([]executor.Launched, len(items))
	for i, item := range items {
		ids[i] = path.Base(item.Dir)
		o, ok := step.launch[ids[i]]
		if !ok {
			o = executor.Launched{Run: &wire.RunReply{Task: ids[i], Attempt: item.Launch.Attempt, PID: 4242}}
		}
		outs[i] = o
	}
	r.record("launch " + strings.Join(ids, " "))
	return outs
}

func (r *recordingExec) Status(_ context.Context, _ *nodes.Installed, q executor.Query) (*wire.NodeStatus, error) {
	r.record("status")
	running := strings.Join(q.Running, " ")
	switch {
	case q.Running == nil:
		running = "unread"
	case running == "":
		running = "none"
	}
	r.mu.Lock()
	r.running = running
	r.mu.Unlock()
	switch v := r.current().status.(type) {
	case error:
		return nil, v
	case []wire.TaskStatus:
		return &wire.NodeStatus{Tasks: append([]wire.TaskStatus(nil), v...)}, nil
	}
	return &wire.NodeStatus{}, nil
}

func (r *recordingExec) Kill(_ context.Context, _ *nodes.Installed, kills []executor.Kill) []executor.Killed {
	step := r.current()
	outs := make([]executor.Killed, len(kills))
	for i, k := range kills {
		id := path.Base(k.Dir)
		r.record(fmt.Sprintf("kill %s/%s", id, k.Grace))
		outs[i] = step.kill[id]
	}
	return outs
}

func (r *recordingExec) Close() {}

// TestTickDrivesExecutor: the tick starts, reads and kills a node's
// attempts through its executor alone, one batch-shaped call of each kind
// per node and tick, and takes each outcome for what the seam says: a
// started attempt runs, a refused one fails its start (and is retried), one
// in doubt waits for the next status, an unknown status is not a failure,
// and a stale attempt holds its node until its kill is confirmed.
func TestTickDrivesExecutor(t *testing.T) {
	alive := func(id string) wire.TaskStatus { return runningStatus(id, 1, "1", true) }
	statuses := func(ts ...wire.TaskStatus) []wire.TaskStatus { return append([]wire.TaskStatus{}, ts...) }
	for _, tc := range []struct {
		name  string
		specs map[string]string
		steps []execStep
	}{
		{name: "a node's launches are one call, then the status says they run",
			specs: map[string]string{"S01-a.md": "true\n", "S02-b.md": "true\n"},
			steps: []execStep{
				{calls: "status; launch S01 S02", tasks: "S01 running 0; S02 running 0"},
				{status: statuses(alive("S01"), alive("S02")), calls: "status", tasks: "S01 running 0; S02 running 0"},
			}},
		{name: "a refused launch fails its start and is retried",
			specs: map[string]string{"S01-a.md": "true\n"},
			steps: []execStep{
				{launch: map[string]executor.Launched{"S01": {Err: errors.New("no room")}},
					calls: "status; launch S01", tasks: "S01 pending 1"},
			}},
		{name: "a launch in doubt waits for the status, which settles it",
			specs: map[string]string{"S01-a.md": "true\n"},
			steps: []execStep{
				{launch: map[string]executor.Launched{"S01": {Uncertain: errors.New("session dropped")}},
					calls: "status; launch S01", tasks: "S01 claimed 0"},
				{status: statuses(alive("S01")), calls: "status", tasks: "S01 running 0"},
			}},
		{name: "a launch in doubt that never shows is requeued, not failed",
			specs: map[string]string{"S01-a.md": "true\n"},
			steps: []execStep{
				{launch: map[string]executor.Launched{"S01": {Uncertain: errors.New("session dropped")}},
					calls: "status; launch S01", tasks: "S01 claimed 0"},
				{advance: claimGrace + time.Second, calls: "status; launch S01", tasks: "S01 running 0"},
			}},
		{name: "an unknown status is not a failure",
			specs: map[string]string{"S01-a.md": "true\n"},
			steps: []execStep{
				{calls: "status; launch S01", tasks: "S01 running 0"},
				{status: errors.New("squeue: timed out"), advance: time.Minute, calls: "status", tasks: "S01 running 0"},
				{status: statuses(alive("S01")), calls: "status", tasks: "S01 running 0"},
			}},
		{name: "a stale attempt is killed before its node takes a launch",
			specs: map[string]string{"S01-a.md": "true\n"},
			steps: []execStep{
				{status: statuses(alive("S01")), calls: "status; kill S01/2s", tasks: "S01 pending 0"},
				{calls: "status; launch S01", tasks: "S01 running 0"},
			}},
		{name: "a kill not confirmed is asked again and holds its node",
			specs: map[string]string{"S01-a.md": "true\n"},
			steps: []execStep{
				{status: statuses(alive("S01")), kill: map[string]executor.Killed{"S01": {Err: errors.New("scancel: refused")}},
					calls: "status; kill S01/2s", tasks: "S01 pending 0", held: true},
				{status: statuses(alive("S01")), kill: map[string]executor.Killed{"S01": {Err: errors.New("scancel: refused")}},
					calls: "status; kill S01/2s", tasks: "S01 pending 0", held: true},
				{status: statuses(alive("S01")), calls: "status; kill S01/2s", tasks: "S01 pending 0"},
				{calls: "status; launch S01", tasks: "S01 running 0"},
			}},
		{name: "the status call names the tasks the database runs there (the executor's own kills survive a restart by it)",
			specs: map[string]string{"S01-a.md": "true\n", "S02-b.md": "true\n"},
			steps: []execStep{
				{calls: "status; launch S01 S02", tasks: "S01 running 0; S02 running 0", running: "none"},
				{status: statuses(alive("S01"), alive("S02")), calls: "status", tasks: "S01 running 0; S02 running 0", running: "p/S01 p/S02"},
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, "", shellProject(tc.specs))
			rec := &recordingExec{}
			h.ctl.nodes["local"].exec = rec
			for i, step := range tc.steps {
				rec.mu.Lock()
				rec.step, rec.calls = step, nil
				rec.mu.Unlock()
				h.clock.Advance(step.advance)
				h.tick()
				rec.mu.Lock()
				calls, running := strings.Join(rec.calls, "; "), rec.running
				rec.mu.Unlock()
				if step.running != "" && running != step.running {
					t.Errorf("tick %d: the status call's running tasks %q, want %q", i+1, running, step.running)
				}
				if calls != step.calls {
					t.Errorf("tick %d: executor calls %q, want %q", i+1, calls, step.calls)
				}
				if got := taskStates(t, h); got != step.tasks {
					t.Errorf("tick %d: tasks %q, want %q%s", i+1, got, step.tasks, h.dump())
				}
				if held, _ := h.ctl.unkilled(); held["local"] != step.held {
					t.Errorf("tick %d: node held back %v, want %v", i+1, held["local"], step.held)
				}
			}
		})
	}
}

// taskStates is "ID status retries" of each task of project p.
func taskStates(t *testing.T, h *harness) string {
	t.Helper()
	tasks, err := h.st.Tasks(context.Background(), "p")
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(tasks))
	for i, tk := range tasks {
		out[i] = fmt.Sprintf("%s %s %d", tk.ID, tk.Status, tk.RetriesUsed)
	}
	return strings.Join(out, "; ")
}

// TestLaunchedEach: an executor's Launch outcomes are taken one per item;
// a missing or mixed one is in doubt, never started nor failed, and extra
// ones are dropped.
func TestLaunchedEach(t *testing.T) {
	run := &wire.RunReply{PID: 7}
	no := errors.New("no")
	for _, tc := range []struct {
		name string
		in   []executor.Launched
		n    int
		want string
	}{
		{"one each", []executor.Launched{{Run: run}, {Err: no}, {Uncertain: no}}, 3, "run err uncertain"},
		{"too few", []executor.Launched{{Run: run}}, 3, "run uncertain:0 uncertain:0"},
		{"too many", []executor.Launched{{Run: run}, {Err: no}}, 1, "run"},
		{"none set", []executor.Launched{{}}, 1, "uncertain:0"},
		{"two set", []executor.Launched{{Run: run, Err: no}}, 1, "uncertain:2"},
	} {
		var got []string
		for _, l := range launchedEach(tc.in, tc.n) {
			switch {
			case l.Run != nil:
				got = append(got, "run")
			case l.Err != nil:
				got = append(got, "err")
			case strings.Contains(l.Uncertain.Error(), "gave "):
				got = append(got, "uncertain:"+strings.Fields(strings.SplitAfter(l.Uncertain.Error(), "gave ")[1])[0])
			default:
				got = append(got, "uncertain")
			}
		}
		if strings.Join(got, " ") != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, strings.Join(got, " "), tc.want)
		}
	}
}
