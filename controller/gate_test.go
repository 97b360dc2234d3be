package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/internal/gittest"
	"github.com/dispatch-tool/dispatch/readmodel"
	"github.com/dispatch-tool/dispatch/store"
	"github.com/dispatch-tool/dispatch/wire"
)

// gateCheck passes when answer says right, and prints what it found.
const gateCheck = `test "$(cat answer 2>/dev/null)" = right || { echo "answer is $(cat answer 2>/dev/null)"; exit 1; }`

// fakeAgent is an agent CLI that does what its prompt says, or gets it
// wrong: it writes answer "right" only when the prompt carries the gate's
// output ("answer is wrong"), and "wrong" otherwise; as a verifier it
// claims a pass whatever the tree holds.
const fakeAgent = `#!/bin/sh
spec=$1
if grep -q '^# Verify' "$spec"; then
  echo '{"pass": true, "issues": []}' > verdict.json
  exit 0
fi
if grep -q 'answer is wrong' "$spec"; then echo right > answer; else echo wrong > answer; fi
echo done
`

func fakeAgentYAML(t *testing.T) string {
	t.Helper()
	script := filepath.Join(t.TempDir(), "fake-agent")
	if err := os.WriteFile(script, []byte(fakeAgent), 0o755); err != nil {
		t.Fatal(err)
	}
	// heartbeat_timeout: the gate tests' ticks move the clock a second to
	// a minute each, far faster than the wrapper's heartbeat; on a loaded
	// machine a slow attempt must not be taken for hung and retried (the
	// tests that are about hangs set their own).
	return unsandboxed(`
controller:
  retry_backoff: 1s
  max_retries: 2
  heartbeat_timeout: 1h
nodes:
  - name: local
    slots: 2
    work_dir: WORK
    tool: fake
tools:
  fake: { command: [`+script+`, "{spec}"] }
`, "the fake agent lies under /tmp (the sandboxed gate: wrapper:TestGateSandboxed)")
}

// finished ticks until the project is done, the clock a second further
// each tick (retries wait their backoff; no heartbeat looks stale).
func (h *harness) finished() domain.Project {
	h.t.Helper()
	ctx := context.Background()
	h.tickUntil("the project to finish", func() bool {
		h.clock.Advance(time.Second)
		p, _ := h.st.Project(ctx, "p")
		return p.State == domain.ProjectDone
	})
	p, _ := h.st.Project(ctx, "p")
	return p
}

// TestTaskGate: an author task whose result fails the task gate fails
// that attempt (class gate); its retry is told the command and the
// gate's output, gets it right, and the task completes once its gate
// passed; the gate ran once per attempt.
func TestTaskGate(t *testing.T) {
	h := newHarness(t, fakeAgentYAML(t), map[string]string{
		"project.yaml": "integration: false\ngate:\n  task: '" + gateCheck + "'\n",
		"S01-a.md":     "# Write the answer\nWrite the answer.\n",
		"S02-b.md": "---\ntool: shell\n---\n" +
			`case "$DISPATCH_GATE_OUTPUT" in *"answer is wrong"*) echo right > answer;; *) echo wrong > answer;; esac` + "\n",
	})
	p := h.finished()
	for _, id := range []string{"S01", "S02"} {
		if tk := h.task(id); tk.Status != domain.Completed || tk.Attempt != 2 {
			t.Fatalf("%s %s after %d attempts; want completed at attempt 2:%s", id, tk.Status, tk.Attempt, h.dump())
		}
	}
	if p.Result != domain.ResultPassed {
		t.Fatalf("project %s", p.Result)
	}
	spec, err := os.ReadFile(filepath.Join(h.work, "p", "tasks", "S01", "spec.md"))
	if err != nil || !strings.Contains(string(spec), "## The gate failed on your last attempt") || !strings.Contains(string(spec), "answer is wrong") {
		t.Errorf("the retry's spec does not carry the gate's output (%v):\n%s", err, spec)
	}
	ctx := context.Background()
	attempts, _ := h.st.Attempts(ctx, "p", "S01")
	if len(attempts) != 2 || attempts[0].ErrorClass != "gate" || !strings.Contains(attempts[0].Error, "gate") {
		t.Fatalf("attempts %+v; want the first failed as class gate", attempts)
	}
	var runs []store.GateRun
	all, _ := h.st.GateRuns(ctx, "p", 0)
	for _, g := range all {
		if g.Task == "S01" {
			runs = append(runs, g)
		}
	}
	if len(runs) != 2 || runs[0].Passed || !strings.Contains(runs[0].OutputTail, "answer is wrong") || !runs[1].Passed || runs[0].Tree == runs[1].Tree {
		t.Fatalf("gate runs %+v; want a failure with its output, then a pass on another tree", runs)
	}
	r, err := readmodel.BuildReport(ctx, h.st, h.cfg, h.home, "p", h.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	// Claims vs gate: the node's tool, fake (S01 names none), and the
	// shell (S02) each exited 0 twice and passed once.
	want := []readmodel.GateClaims{{Tool: "fake", ExitedZero: 2, PassedGate: 1}, {Tool: "shell", ExitedZero: 2, PassedGate: 1}}
	if g := r.Gate; g == nil || len(g.Tasks) != 4 || !reflect.DeepEqual(g.Claims, want) {
		t.Fatalf("report's gate %+v", r.Gate)
	}
	if md := r.Markdown(); !strings.Contains(md, "fake: 2 exited 0, 1 passed the gate") || !strings.Contains(md, "shell: 2 exited 0, 1 passed the gate") {
		t.Errorf("report.md's claims vs gate:\n%s", md)
	}
}

// TestProjectGate: S99's result fails the project gate; V01 is not asked
// (a verifier that claims a pass would pass it), F01 is told the gate's
// output and fixes it, the gate passes on F01's result, V02 verifies it,
// and only then the project passes. The report has the gate's runs.
func TestProjectGate(t *testing.T) {
	h := newHarness(t, fakeAgentYAML(t), map[string]string{
		"project.yaml": "max_fix_rounds: 2\ngate:\n  project: '" + gateCheck + "'\n",
		"S01-a.md":     "# Part A\nDo part A.\n",
	})
	p := h.finished()
	if p.Result != domain.ResultPassed {
		t.Fatalf("project %s (%s):%s", p.Result, p.Problem, h.dump())
	}
	ctx := context.Background()
	for id, want := range map[string]domain.Status{"S99": domain.Completed, "F01": domain.Completed, "V02": domain.Completed} {
		if tk, err := h.st.Task(ctx, "p", id); err != nil || tk.Status != want {
			t.Errorf("%s: %v %v, want %s", id, tk.Status, err, want)
		}
	}
	if _, err := h.st.Task(ctx, "p", "V01"); err == nil {
		t.Error("V01 ran although the gate failed on S99")
	}
	runs, _ := h.st.GateRuns(ctx, "p", 0)
	if len(runs) != 2 || runs[0].Task != "S99" || runs[0].Passed || runs[1].Task != "F01" || !runs[1].Passed {
		t.Fatalf("gate runs %+v; want S99 failed, F01 passed", runs)
	}
	r, err := readmodel.BuildReport(ctx, h.st, h.cfg, h.home, "p", h.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	g := r.Gate
	if g == nil || len(g.Project) != 2 || g.Project[0].After != "S99" || g.Project[0].Passed || !strings.Contains(g.Project[0].OutputTail, "answer is wrong") ||
		g.Project[1].After != "F01" || !g.Project[1].Passed || len(g.Tasks) != 0 {
		t.Fatalf("report's gate %+v", g)
	}
	data, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Gate struct {
			Project []map[string]any `json:"project"`
		} `json:"gate"`
	}
	if err := json.Unmarshal(data, &doc); err != nil || len(doc.Gate.Project) != 2 {
		t.Fatalf("report JSON's gate: %s", data)
	}
	for _, k := range []string{"after", "passed", "seconds", "output_tail"} {
		if _, ok := doc.Gate.Project[0][k]; !ok {
			t.Errorf("report JSON's gate.project entries lack %q: %v", k, doc.Gate.Project[0])
		}
	}
	if md := r.Markdown(); !strings.Contains(md, "## Gate") || !strings.Contains(md, "project, after S99") || !strings.Contains(md, "answer is wrong") {
		t.Errorf("report.md's gate section:\n%s", md)
	}
}

// TestProjectGateFixRoundsRunOut: a project gate that still fails when
// max_fix_rounds are spent fails the project, the gate's failure in its
// note; no verification claims it passed.
func TestProjectGateFixRoundsRunOut(t *testing.T) {
	h := newHarness(t, fakeAgentYAML(t), map[string]string{
		"project.yaml": "max_fix_rounds: 1\ngate:\n  project: 'echo never; exit 3'\n",
		"S01-a.md":     "# Part A\nDo part A.\n",
	})
	p := h.finished()
	ctx := context.Background()
	runs, _ := h.st.GateRuns(ctx, "p", 0)
	if p.Result != domain.ResultFailed || len(runs) != 2 || runs[1].Task != "F01" {
		t.Fatalf("project %s, gate runs %+v; want failed after S99 and F01 gated:%s", p.Result, runs, h.dump())
	}
	for _, id := range []string{"V01", "V02", "F02"} {
		if _, err := h.st.Task(ctx, "p", id); err == nil {
			t.Errorf("%s ran", id)
		}
	}
}

// TestGateMissing: a task gate whose command is not on the node stops the
// project once, with the fix as its problem, and the task is not retried
// (the project then ends failed, nothing else able to run).
func TestGateMissing(t *testing.T) {
	h := newHarness(t, fakeAgentYAML(t), map[string]string{
		"project.yaml": "integration: false\ngate: {task: no-such-gate-xyz}\n",
		"S01-a.md":     "# A\nDo A.\n",
		"S02-b.md":     "---\ndepends_on: [S01]\n---\n# B\nDo B.\n",
	})
	ctx := context.Background()
	h.tickUntil("the project to stop", func() bool {
		h.clock.Advance(time.Minute)
		p, _ := h.st.Project(ctx, "p")
		return p.State != domain.ProjectActive
	})
	p, _ := h.st.Project(ctx, "p")
	tk := h.task("S01")
	if !strings.Contains(p.Problem, "no-such-gate-xyz") || !strings.Contains(p.Problem, "install") || tk.Attempt != 1 || tk.Status != domain.Failed {
		t.Fatalf("project problem %q, S01 %s attempt %d", p.Problem, tk.Status, tk.Attempt)
	}
}

// TestGateReuseAndHang: a gate that hangs is stopped at gate.timeout and
// fails the attempt; the retry, whose result is the same tree, takes that
// result instead of gating the tree again (the gate ran once).
func TestGateReuseAndHang(t *testing.T) {
	mark := filepath.Join(t.TempDir(), "gated")
	h := newHarness(t, fakeAgentYAML(t), map[string]string{
		"project.yaml": "integration: false\ngate:\n  task: 'echo ran >> " + mark + "; echo hanging; sleep 60'\n  timeout: 1s\n",
		"S01-a.md":     "---\ntool: shell\nmax_retries: 1\n---\necho same > answer\n",
	})
	p := h.finished()
	ctx := context.Background()
	runs, _ := h.st.GateRuns(ctx, "p", 0)
	data, _ := os.ReadFile(mark)
	if p.Result != domain.ResultFailed || len(runs) != 2 || runs[0].Passed || !strings.Contains(runs[0].Error, "timed out") ||
		!strings.Contains(runs[0].OutputTail, "hanging") || !runs[1].Reused || runs[1].Tree != runs[0].Tree || strings.Count(string(data), "ran") != 1 {
		t.Fatalf("project %s, gate runs %+v, gated %d times; want a timeout, then the same tree's result reused:%s",
			p.Result, runs, strings.Count(string(data), "ran"), h.dump())
	}
	if tk := h.task("S01"); tk.ErrorClass != "gate" || tk.Attempt != 2 {
		t.Errorf("S01: class %q after %d attempts, want gate after 2", tk.ErrorClass, tk.Attempt)
	}
}

// TestGateShownWhileItRuns: while an attempt's gate runs, status shows the
// task running with its gate (JSON "gating"), and an event says so; once
// it ended, neither.
func TestGateShownWhileItRuns(t *testing.T) {
	release := filepath.Join(t.TempDir(), "release")
	h := newHarness(t, fakeAgentYAML(t), map[string]string{
		"project.yaml": "integration: false\ngate:\n  task: 'while [ ! -e " + release + " ]; do sleep 0.05; done'\n",
		"S01-a.md":     "---\ntool: shell\n---\necho done > answer\n",
	})
	ctx := context.Background()
	gating := func() bool {
		v, err := readmodel.Status(ctx, h.st, nil, "p", h.clock.Now())
		if err != nil {
			t.Fatal(err)
		}
		return len(v.Tasks) == 1 && v.Tasks[0].Gating && v.Tasks[0].Status == domain.Running
	}
	h.tickUntil("status to show S01's gate running", gating)
	if evs := h.events("gate"); len(evs) != 1 || !strings.Contains(evs[0].Message, "the gate runs on its result") {
		t.Errorf("gate events %+v", evs)
	}
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if p := h.finished(); p.Result != domain.ResultPassed || gating() {
		t.Fatalf("project %s, still gating %v", p.Result, gating())
	}
}

// TestGitGate: in a project on a git repository, the task gate runs on a
// checkout of the attempt's result commit and the project gate on S99's:
// a file the task left out of its commit (ignored) is not there, and a
// filter driver the task's .gitattributes names from the node user's git
// config does not run while the result is checked out.
func TestGitGate(t *testing.T) {
	tmp := t.TempDir()
	marker := filepath.Join(tmp, "filter-ran")
	global := filepath.Join(tmp, "gitconfig")
	if err := os.WriteFile(global, []byte("[filter \"evil\"]\n\tsmudge = touch "+marker+"; cat\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("GIT_CONFIG_GLOBAL", global)
	op := gittest.New(t)
	op.Write(".gitignore", "*.cache\n")
	op.Write("a.txt", "a\n")
	op.Commit("base")
	h := newHarness(t, "", map[string]string{
		"project.yaml": "tool: shell\nverification: false\nrepo: " + op.Dir + "\n" +
			"gate:\n  task: 'test -f made.txt && test ! -e pass.cache'\n  project: 'test -f made.txt && test -f integrated.md'\n",
		"S01-make.md":      "echo made > made.txt\ntouch pass.cache\nprintf '* filter=evil\\n' > .gitattributes\n",
		"S99-integrate.md": "echo integrated > integrated.md\n",
	})
	p := h.finished()
	if p.Result != domain.ResultPassed {
		t.Fatalf("project %s (%s):%s", p.Result, p.Problem, h.dump())
	}
	runs, _ := h.st.GateRuns(context.Background(), "p", 0)
	if len(runs) != 2 || runs[0].Task != "S01" || !runs[0].Passed || !strings.HasPrefix(runs[0].Tree, "git:") ||
		runs[1].Task != "S99" || !runs[1].Passed {
		t.Fatalf("gate runs %+v; want S01's and S99's commits gated, both passed", runs)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("checking out the result for the gate ran the filter driver the task's .gitattributes named")
	}
}

// TestGateBaseline: with gate.baseline, the project gate first runs on the
// base itself (task G00, which changes nothing): here the base fails it,
// which the report says, and the project goes on — its tasks fix what the
// base lacked, the gate passes on S99's result and the project passes.
func TestGateBaseline(t *testing.T) {
	h := newHarness(t, "", map[string]string{
		"project.yaml":     "tool: shell\nverification: false\nbase: base\ngate:\n  project: '" + gateCheck + "'\n  baseline: true\n",
		"base/answer":      "wrong\n",
		"S01-fix.md":       "echo right > answer\n",
		"S99-integrate.md": "true\n",
	})
	p := h.finished()
	if p.Result != domain.ResultPassed {
		t.Fatalf("project %s (%s):%s", p.Result, p.Problem, h.dump())
	}
	r, err := readmodel.BuildReport(context.Background(), h.st, h.cfg, h.home, "p", h.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	g := r.Gate
	if g == nil || len(g.Project) != 2 || g.Project[0].After != "base" || g.Project[0].Passed || !strings.Contains(g.Project[0].OutputTail, "answer is wrong") ||
		g.Project[1].After != "S99" || !g.Project[1].Passed || len(g.Tasks) != 0 || len(g.Claims) != 0 {
		t.Fatalf("report's gate %+v", g)
	}
	if md := r.Markdown(); !strings.Contains(md, "The base itself failed the project gate") {
		t.Errorf("report.md does not say the base failed:\n%s", md)
	}
	if tk := h.task("G00"); tk.Status != domain.Completed || tk.Attempt != 1 {
		t.Errorf("G00 %s after %d attempts, want completed once", tk.Status, tk.Attempt)
	}
}

// TestTaskGateForgedCompletion: a task (unconfined) that rewrites its
// status.json to "completed" while its tool still runs, so that the gate
// never runs on its result, does not complete: without a passing gate in
// the supervisor's private record a completed attempt is a failed gate;
// its retry, gated, passes.
func TestTaskGateForgedCompletion(t *testing.T) {
	forged := filepath.Join(t.TempDir(), "forged")
	// heartbeat_timeout: the ticks advance the clock a second each, far
	// faster than the wrapper's heartbeat; the attempt must not be taken
	// for hung while its tool sleeps.
	h := newHarness(t, unsandboxed(`
controller:
  retry_backoff: 1s
  max_retries: 2
  heartbeat_timeout: 1h
nodes:
  - name: local
    slots: 2
    work_dir: WORK
`, "the task forges its status.json, which a sandboxed one cannot reach"), shellProject(map[string]string{
		"project.yaml": "tool: shell\nintegration: false\ngate:\n  task: '" + gateCheck + "'\n",
		"S01-a.md": "if [ -e " + forged + " ]; then echo right > answer; exit 0; fi\n" +
			"touch " + forged + "; echo wrong > answer\n" +
			`sed 's/"status": *"running"/"status":"completed"/' ../status.json > ../status.tmp && mv ../status.tmp ../status.json` + "\n" +
			"sleep 20\n",
	}))
	p := h.finished()
	tk := h.task("S01")
	ctx := context.Background()
	g, ok, _ := h.st.GateRunOf(ctx, "p", "S01", tk.Attempt)
	if tk.Status != domain.Completed || tk.Attempt != 2 || !ok || !g.Passed || p.Result != domain.ResultPassed {
		t.Fatalf("S01 %s at attempt %d, its gate %+v (%v), project %s; want completed at attempt 2 with its gate passed:%s",
			tk.Status, tk.Attempt, g, ok, p.Result, h.dump())
	}
	attempts, _ := h.st.Attempts(ctx, "p", "S01")
	if len(attempts) != 2 || attempts[0].ErrorClass != "gate" {
		t.Fatalf("attempts %+v; want the forged one failed as class gate", attempts)
	}
}

// TestGateOutputWithNUL: a gate whose output holds a NUL byte (a binary
// printed by a failing test) still tells its retry: the byte cannot go
// into DISPATCH_GATE_OUTPUT (no process starts with it in its
// environment), so it is left out, and the retry runs and gets it right.
func TestGateOutputWithNUL(t *testing.T) {
	h := newHarness(t, unsandboxed("", "a shell task; the sandbox is not what is tested"), shellProject(map[string]string{
		"project.yaml": "tool: shell\nintegration: false\ngate:\n  task: 'printf \"bin\\000ary\\n\"; " + strings.ReplaceAll(gateCheck, "'", "''") + "'\n",
		"S01-a.md":     `case "$DISPATCH_GATE_OUTPUT" in *"answer is wrong"*) echo right > answer;; *) echo wrong > answer;; esac` + "\n",
	}))
	p := h.finished()
	if tk := h.task("S01"); tk.Status != domain.Completed || tk.Attempt != 2 || p.Result != domain.ResultPassed {
		t.Fatalf("S01 %s at attempt %d (%s: %s), project %s; want completed at attempt 2:%s", tk.Status, tk.Attempt, tk.ErrorClass, tk.Error, p.Result, h.dump())
	}
}

// TestGateLaunchSize: a retry's launch with as many known results as it
// carries, each of the largest output a gate result holds, and the
// largest output to tell the retry, stays well under what the wrapper
// reads of launch.json (1 MiB); what it tells is the end of the output.
func TestGateLaunchSize(t *testing.T) {
	h := newHarness(t, "", map[string]string{
		"project.yaml": "tool: shell\nintegration: false\ngate: {task: make test}\n",
		"S01-a.md":     "# A\nDo A.\n",
	})
	ctx := context.Background()
	big := strings.Repeat("x", 120) + "\n"
	big = strings.Repeat(big, 64<<10/len(big)) + "the last line\n"
	if err := h.st.Update(ctx, func(tx *store.Tx) error {
		for i := range 2 * maxKnownGates {
			if err := tx.PutGateRun(ctx, store.GateRun{Project: "p", Task: "S01", Attempt: i + 1, Command: "make test",
				Tree: fmt.Sprintf("sha256:%064d", i), OutputTail: big, Error: big}); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	p, err := h.st.Project(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	opts, err := p.ParseOptions()
	if err != nil {
		t.Fatal(err)
	}
	task := h.task("S01")
	task.Attempt = 2*maxKnownGates + 1
	var l wire.Launch
	g, spec, err := h.ctl.gateLaunch(ctx, task, "claude", opts, []byte("# A\n"), &l)
	if err != nil {
		t.Fatal(err)
	}
	l.Gate = g
	data, err := json.Marshal(wire.LaunchItem{Launch: l, Spec: string(spec)})
	if err != nil {
		t.Fatal(err)
	}
	out := l.Env["DISPATCH_GATE_OUTPUT"]
	if len(g.Known) != maxKnownGates || len(data) > 512<<10 || len(out) > retryTailBytes || !strings.HasSuffix(out, "the last line\n") ||
		!strings.Contains(string(spec), "the last line") {
		t.Fatalf("%d known results, launch %d bytes, DISPATCH_GATE_OUTPUT %d bytes (ends %q); want %d known, ≤ 512 KiB, ≤ %d bytes ending with the last line",
			len(g.Known), len(data), len(out), out[max(len(out)-20, 0):], maxKnownGates, retryTailBytes)
	}
}
