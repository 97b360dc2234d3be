package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/control"
	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/home"
	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/plan"
	"github.com/dispatch-tool/dispatch/readmodel"
	"github.com/dispatch-tool/dispatch/spec"
	"github.com/dispatch-tool/dispatch/store"
)

var wrappers = nodes.NewWrappers()

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "dispatch-controller-test-")
	if err != nil {
		panic(err)
	}
	wrappers.CacheDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// clock is the controller's injected clock; tests move it by hand.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// harness is a home with one local node, a store and a controller on a fake
// clock.
type harness struct {
	t     *testing.T
	home  string
	work  string
	clock *clock
	st    *store.Store
	cfg   *nodes.Config
	ctl   *Controller
}

// defaultYAML is newHarness's nodes.yaml when a test gives none.
const defaultYAML = `
controller:
  retry_backoff: 10s
  retry_backoff_max: 1m
  max_retries: 2
nodes:
  - name: local
    slots: 2
    work_dir: WORK
`

// unsandboxed sets sandbox: off, with why as its comment, on every node of
// nodesYAML (defaultYAML when ""): for a test of dispatch, not of the
// sandbox, whose task needs a side channel outside its workspace (a file
// the test reads or a later attempt finds), which the default sandbox
// (auto: bwrap where it works) takes away.
func unsandboxed(nodesYAML, why string) string {
	if nodesYAML == "" {
		nodesYAML = defaultYAML
	}
	var b strings.Builder
	for _, line := range strings.SplitAfter(nodesYAML, "\n") {
		b.WriteString(line)
		if rest, ok := strings.CutPrefix(strings.TrimLeft(line, " "), "- name: "); ok && rest != "" {
			indent := strings.Repeat(" ", len(line)-len(strings.TrimLeft(line, " "))+2)
			fmt.Fprintf(&b, "%ssandbox: off # %s\n", indent, why)
		}
	}
	return b.String()
}

func newHarness(t *testing.T, nodesYAML string, specs map[string]string) *harness {
	t.Helper()
	home := t.TempDir()
	work := filepath.Join(home, "work")
	if nodesYAML == "" {
		nodesYAML = defaultYAML
	}
	nodesYAML = strings.ReplaceAll(nodesYAML, "WORK", work)
	cfg, err := nodes.Parse("nodes.yaml", []byte(nodesYAML))
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(home, "specs", "p")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range specs {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	clk := &clock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	st, err := store.Open(context.Background(), filepath.Join(home, "dispatch.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	st.Now = clk.Now
	h := &harness{t: t, home: home, work: work, clock: clk, st: st, cfg: cfg}
	h.ctl = h.newController()
	// Before the store closes and the directories go: the node workers a
	// tick left running (a pull past its wait) and the notices still
	// queued end, and the transports close, as at the end of Run. A
	// controller a test put in h.ctl instead is the one closed.
	t.Cleanup(func() { h.ctl.Close() })
	p, err := spec.Load(filepath.Join(home, "specs"), "p")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := plan.AddProject(context.Background(), st, cfg, home, p, control.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	return h
}

func (h *harness) newController() *Controller {
	tr := map[string]nodes.Transport{}
	for _, n := range h.cfg.Nodes {
		tr[n.Name] = nodes.NewLocal()
	}
	return New(Options{Home: h.home, Config: h.cfg, Store: h.st, Transports: tr, Wrappers: wrappers,
		Now: h.clock.Now, Jitter: func() float64 { return 0 }})
}

func (h *harness) tick() TickResult {
	h.t.Helper()
	res, err := h.ctl.Tick(context.Background())
	if err != nil {
		h.t.Fatalf("tick: %v", err)
	}
	return res
}

func (h *harness) task(id string) domain.Task {
	h.t.Helper()
	t, err := h.st.Task(context.Background(), "p", id)
	if err != nil {
		h.t.Fatal(err)
	}
	return t
}

// tickUntil ticks (without moving the fake clock) until cond holds, polling
// the real processes the wrapper runs.
func (h *harness) tickUntil(what string, cond func() bool) {
	h.t.Helper()
	// Generous: a loaded machine (the whole suite on 2 cores) is slow,
	// and a test that waits for an event asserts no wall-clock time.
	deadline := time.Now().Add(90 * time.Second)
	for {
		h.tick()
		if cond() {
			return
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("timed out waiting for %s; tasks: %s", what, h.dump())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (h *harness) dump() string {
	tasks, _ := h.st.Tasks(context.Background(), "p")
	var b strings.Builder
	for _, t := range tasks {
		fmt.Fprintf(&b, "\n  %s %s attempt=%d retries=%d class=%s err=%q", t.ID, t.Status, t.Attempt, t.RetriesUsed, t.ErrorClass, t.Error)
	}
	return b.String()
}

func shellProject(extra map[string]string) map[string]string {
	m := map[string]string{"project.yaml": "tool: shell\nintegration: false\n"}
	for k, v := range extra {
		m[k] = v
	}
	return m
}

func TestRetryWaitsForBackoffOnTheControllersClock(t *testing.T) {
	h := newHarness(t, "", shellProject(map[string]string{
		"S01-fail.md": "exit 3\n",
	}))
	h.tickUntil("first attempt to fail", func() bool {
		tk := h.task("S01")
		return tk.Status == domain.Pending && tk.RetriesUsed == 1
	})
	tk := h.task("S01")
	if want := h.clock.Now().Add(10 * time.Second); !tk.NotBefore.Equal(want) {
		t.Fatalf("retry 1 not_before = %s, want %s (retry_backoff 10s, no jitter)", tk.NotBefore, want)
	}
	// The clock has not moved: however often the controller ticks, no retry.
	for i := 0; i < 5; i++ {
		h.tick()
	}
	if tk := h.task("S01"); tk.Status != domain.Pending || tk.Attempt != 1 {
		t.Fatalf("retried before the backoff: %s attempt %d", tk.Status, tk.Attempt)
	}
	h.clock.Advance(10 * time.Second)
	h.tickUntil("second attempt to fail", func() bool { return h.task("S01").RetriesUsed == 2 })
	// Retry 2 doubles the backoff.
	if tk, want := h.task("S01"), h.clock.Now().Add(20*time.Second); !tk.NotBefore.Equal(want) {
		t.Fatalf("retry 2 not_before = %s, want %s", tk.NotBefore, want)
	}
	h.clock.Advance(20 * time.Second)
	h.tickUntil("task to fail for good", func() bool { return h.task("S01").Status == domain.Failed })
	tk = h.task("S01")
	if tk.Attempt != 3 || tk.ErrorClass != "exit" || tk.ExitCode != 3 {
		t.Fatalf("final: attempt %d class %q exit %d, want 3, exit, 3", tk.Attempt, tk.ErrorClass, tk.ExitCode)
	}
	runs, _ := h.st.Attempts(context.Background(), "p", "S01")
	if len(runs) != 3 {
		t.Fatalf("runs = %d, want 3", len(runs))
	}
	// Earlier attempts' logs were collected beside the last one.
	for _, a := range []string{"attempts/1/task.log", "attempts/2/task.log", "task.log"} {
		if _, err := os.Stat(filepath.Join(home.RunsDir(h.home, "p"), "S01", a)); err != nil {
			t.Errorf("collected %s: %v", a, err)
		}
	}
}

func TestBackoffIsCappedAndJittered(t *testing.T) {
	cfg := &nodes.Config{Controller: nodes.Controller{RetryBackoff: 30 * time.Second, RetryBackoffMax: 5 * time.Minute}}
	jitter := 0.0
	c := New(Options{Config: cfg, Jitter: func() float64 { return jitter }})
	cases := []struct {
		n      int
		jitter float64
		want   time.Duration
	}{
		{1, 0, 30 * time.Second},
		{2, 0, time.Minute},
		{4, 0, 4 * time.Minute},
		{5, 0, 5 * time.Minute}, // capped
		{50, 0, 5 * time.Minute},
		{1, 0.5, 33 * time.Second},            // +10%
		{5, 0.999, 359940 * time.Millisecond}, // cap plus under 20%
	}
	for _, tc := range cases {
		jitter = tc.jitter
		if got := c.backoff(tc.n); got != tc.want {
			t.Errorf("backoff(%d) with jitter %v = %s, want %s", tc.n, tc.jitter, got, tc.want)
		}
	}
}

func TestDependenciesAndBlockedDependents(t *testing.T) {
	h := newHarness(t, "", shellProject(map[string]string{
		"S01-ok.md":      "echo one > one.txt\n",
		"S02-after.md":   "---\ndepends_on: [S01]\n---\necho two > two.txt\n",
		"S03-broken.md":  "---\nmax_retries: 0\n---\nexit 1\n",
		"S04-blocked.md": "---\ndepends_on: [S03]\n---\necho never\n",
		"S05-chain.md":   "---\ndepends_on: [S04]\n---\necho never\n",
	}))
	var sawS02BeforeS01 bool
	h.tickUntil("project to finish", func() bool {
		if h.task("S02").Attempt > 0 && h.task("S01").Status != domain.Completed {
			sawS02BeforeS01 = true
		}
		p, _ := h.st.Project(context.Background(), "p")
		return p.State == domain.ProjectDone
	})
	if sawS02BeforeS01 {
		t.Fatal("S02 was claimed before its dependency S01 completed")
	}
	want := map[string]domain.Status{"S01": domain.Completed, "S02": domain.Completed, "S03": domain.Failed,
		"S04": domain.Blocked, "S05": domain.Blocked}
	for id, st := range want {
		if got := h.task(id); got.Status != st {
			t.Errorf("%s = %s, want %s", id, got.Status, st)
		}
		if id == "S04" || id == "S05" {
			if a := h.task(id).Attempt; a != 0 {
				t.Errorf("%s ran (attempt %d) although its dependency failed", id, a)
			}
		}
	}
	p, _ := h.st.Project(context.Background(), "p")
	if p.Result != domain.ResultFailed {
		t.Errorf("result = %q, want failed", p.Result)
	}
	b, err := os.ReadFile(filepath.Join(home.RunsDir(h.home, "p"), "S02", "output", "two.txt"))
	if err != nil || string(b) != "two\n" {
		t.Errorf("collected S02 output = %q, %v", b, err)
	}
	files, _ := h.st.Files(context.Background(), "p", "S02")
	if len(files) != 1 || files[0].Path != "two.txt" || files[0].Size != 4 {
		t.Errorf("manifest of S02 = %+v", files)
	}
	if _, err := os.Stat(filepath.Join(home.RunsDir(h.home, "p"), "report.md")); err != nil {
		t.Errorf("report.md: %v", err)
	}
}

func TestPriorityOrderAndSlots(t *testing.T) {
	yaml := `
nodes:
  - name: local
    slots: 1
    work_dir: WORK
`
	h := newHarness(t, yaml, shellProject(map[string]string{
		"S01-low.md":  "---\npriority: 9\n---\necho low\n",
		"S02-high.md": "---\npriority: 1\n---\necho high\n",
		"S03-mid.md":  "echo mid\n",
	}))
	var order []string
	seen := map[string]bool{}
	h.tickUntil("all tasks to complete", func() bool {
		running := 0
		for _, id := range []string{"S01", "S02", "S03"} {
			tk := h.task(id)
			if tk.Attempt > 0 && !seen[id] {
				seen[id] = true
				order = append(order, id)
			}
			if tk.Status == domain.Running || tk.Status == domain.Claimed {
				running++
			}
		}
		if running > 1 {
			t.Fatalf("%d tasks running on a node with one slot", running)
		}
		return len(seen) == 3 && h.task("S01").Status == domain.Completed
	})
	if strings.Join(order, ",") != "S02,S03,S01" {
		t.Fatalf("launch order = %v, want S02 (priority 1), S03 (5), S01 (9)", order)
	}
}

func TestWrapperDeathIsACrashAndRetried(t *testing.T) {
	h := newHarness(t, "", shellProject(map[string]string{
		"S01-long.md": "sleep 30\n",
	}))
	h.tickUntil("task to run", func() bool { return h.task("S01").Status == domain.Running })
	runs, _ := h.st.Attempts(context.Background(), "p", "S01")
	pid := runs[0].PID
	if pid <= 0 {
		t.Fatalf("no wrapper pid recorded: %+v", runs[0])
	}
	// kill -9 the wrapper (supervisor): status.json keeps saying running.
	if err := syscallKill(pid); err != nil {
		t.Fatal(err)
	}
	h.tickUntil("crash to be detected", func() bool { return h.task("S01").RetriesUsed == 1 })
	runs, _ = h.st.Attempts(context.Background(), "p", "S01")
	if runs[0].ErrorClass != "crash" {
		t.Fatalf("attempt 1 class = %q, want crash", runs[0].ErrorClass)
	}
	// Clean up the orphaned tool of attempt 1 by retrying: the wrapper kills
	// it before moving the attempt aside.
	h.clock.Advance(time.Minute)
	h.tickUntil("attempt 2 to run", func() bool { return h.task("S01").Status == domain.Running })
	h.ctl.Close()
	killAll(t, h)
}

func TestClaimWithoutLaunchIsRequeued(t *testing.T) {
	h := newHarness(t, "", shellProject(map[string]string{"S01-x.md": "echo x > x.txt\n"}))
	ctx := context.Background()
	// A controller that died between claim and launch leaves a claim behind.
	if err := h.st.Update(ctx, func(tx *store.Tx) error {
		_, err := tx.Claim(ctx, "p", "S01", "local")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	h.tick()
	if tk := h.task("S01"); tk.Status != domain.Claimed {
		t.Fatalf("claim requeued within the grace: %s", tk.Status)
	}
	h.clock.Advance(claimGrace + time.Second)
	h.tickUntil("task to complete", func() bool { return h.task("S01").Status == domain.Completed })
	if tk := h.task("S01"); tk.Attempt != 2 || tk.RetriesUsed != 0 {
		t.Fatalf("attempt %d retries %d, want attempt 2 without using a retry", tk.Attempt, tk.RetriesUsed)
	}
}

func TestStatusCountsAndReport(t *testing.T) {
	h := newHarness(t, "", shellProject(map[string]string{
		"S01-a.md": "# Alpha\necho a\n",
		"S02-b.md": "---\nmax_retries: 0\n---\necho bad; exit 4\n",
	}))
	h.tickUntil("project to finish", func() bool {
		p, _ := h.st.Project(context.Background(), "p")
		return p.State == domain.ProjectDone
	})
	v, err := readmodel.Status(context.Background(), h.st, h.cfg, "p", h.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	if v.Counts.Completed != 1 || v.Counts.Failed != 1 || v.Counts.Total() != 2 || v.Phase != domain.PhaseDone {
		t.Fatalf("counts %+v phase %s", v.Counts, v.Phase)
	}
	if v.Tasks[0].Title != "Alpha" {
		t.Errorf("title = %q", v.Tasks[0].Title)
	}
	r, err := readmodel.BuildReport(context.Background(), h.st, h.cfg, h.home, "p", h.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	if r.Result != domain.ResultFailed || r.Totals.Attempts != 2 || r.Totals.Failed != 1 {
		t.Fatalf("report result %s totals %+v", r.Result, r.Totals)
	}
	md := r.Markdown()
	if !strings.HasPrefix(md, "# dispatch report: p\n\n**FAILED**") {
		t.Errorf("report.md does not start with the outcome:\n%s", md)
	}
	if !strings.Contains(md, "echo bad") && !strings.Contains(md, "bad") {
		t.Errorf("report.md lacks the failed task's log tail:\n%s", md)
	}
	if !strings.Contains(md, "dispatch retry p S02") {
		t.Errorf("report.md does not say what to do next:\n%s", md)
	}
}

func TestRestartedControllerAdoptsRunningTasks(t *testing.T) {
	h := newHarness(t, "", shellProject(map[string]string{
		"S01-slow.md": "sleep 1; echo done > done.txt\n",
	}))
	h.tickUntil("task to run", func() bool { return h.task("S01").Status == domain.Running })
	// A new controller process: nothing in memory, everything from the
	// database and the node's files.
	h.ctl = h.newController()
	h.tickUntil("task to complete", func() bool { return h.task("S01").Status == domain.Completed })
	if tk := h.task("S01"); tk.Attempt != 1 {
		t.Fatalf("attempt = %d after a controller restart, want 1 (adopted, not relaunched)", tk.Attempt)
	}
	b, err := os.ReadFile(filepath.Join(home.RunsDir(h.home, "p"), "S01", "output", "done.txt"))
	if err != nil || string(b) != "done\n" {
		t.Fatalf("collected output = %q, %v", b, err)
	}
}

func TestAgentKilledIsRetried(t *testing.T) {
	h := newHarness(t, "", shellProject(map[string]string{
		"S01-victim.md": "if [ \"$DISPATCH_ATTEMPT\" = 1 ]; then sleep 30; fi\necho ok > ok.txt\n",
	}))
	h.tickUntil("task to run", func() bool { return h.task("S01").Status == domain.Running })
	var st struct {
		ToolPID int `json:"tool_pid"`
	}
	statusFile := filepath.Join(h.work, "p", "tasks", "S01", "status.json")
	deadline := time.Now().Add(10 * time.Second)
	for st.ToolPID == 0 && time.Now().Before(deadline) {
		b, _ := os.ReadFile(statusFile)
		_ = json.Unmarshal(b, &st)
		time.Sleep(10 * time.Millisecond)
	}
	if st.ToolPID == 0 {
		t.Fatal("no tool_pid in status.json")
	}
	if err := syscallKill(st.ToolPID); err != nil {
		t.Fatal(err)
	}
	h.tickUntil("crash to be recorded", func() bool { return h.task("S01").RetriesUsed == 1 })
	runs, _ := h.st.Attempts(context.Background(), "p", "S01")
	if runs[0].ErrorClass != "crash" || runs[0].Signal == "" {
		t.Fatalf("attempt 1: class %q signal %q, want crash with the signal", runs[0].ErrorClass, runs[0].Signal)
	}
	h.clock.Advance(time.Minute)
	h.tickUntil("retry to complete", func() bool { return h.task("S01").Status == domain.Completed })
	if tk := h.task("S01"); tk.Attempt != 2 {
		t.Fatalf("attempt = %d, want 2", tk.Attempt)
	}
}

// TestNewRuns: a finished project that is started again begins run N+1,
// reusing the results of the tasks whose inputs did not change and saying
// why each other task runs again; the ended run is archived.
func TestNewRuns(t *testing.T) {
	h := newHarness(t, "", map[string]string{
		"project.yaml": "tool: shell\nbase: base\n",
		"base/in.txt":  "base\n",
		"S01-a.md":     "cat in.txt > a.txt\n",
		"S02-b.md":     "---\ndepends_on: [S01]\n---\necho b > b.txt\n",
		"S03-c.md":     "echo c > c.txt\n",
		"S99-i.md":     "echo i > i.txt\n",
		"V01-v.md":     "echo '{\"pass\": true, \"issues\": []}' > verdict.json\n",
	})
	ctx := context.Background()
	specDir := filepath.Join(h.home, "specs", "p")
	finish := func(what string) domain.Project {
		h.tickUntil(what, func() bool {
			p, _ := h.st.Project(ctx, "p")
			return p.State == domain.ProjectDone
		})
		p, _ := h.st.Project(ctx, "p")
		return p
	}
	start := func(so control.StartOptions) plan.SyncResult {
		t.Helper()
		p, err := spec.Load(filepath.Join(h.home, "specs"), "p")
		if err != nil {
			t.Fatal(err)
		}
		res, err := plan.AddProject(ctx, h.st, h.cfg, h.home, p, so)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	reasons := func(res plan.SyncResult) string {
		var out []string
		for _, r := range res.Reasons {
			out = append(out, r.ID+": "+r.Reason)
		}
		return strings.Join(out, "|")
	}
	attempts := func() string {
		var out []string
		for _, id := range []string{"S01", "S02", "S03"} {
			tk := h.task(id)
			out = append(out, fmt.Sprintf("%s#%d/%d", id, tk.Attempt, tk.ReusedFrom))
		}
		return strings.Join(out, " ")
	}
	if p := finish("run 1 to finish"); p.Result != domain.ResultPassed || p.Run != 1 {
		t.Fatalf("run 1 = %+v", p)
	}

	// Nothing changed: run 2 reuses everything, phase included, and ends.
	h.clock.Advance(time.Hour)
	res := start(control.StartOptions{})
	if res.Run != 2 || !res.AllReused || !res.Finished || len(res.Reused) != 3 || reasons(res) != "" {
		t.Fatalf("run 2 = %+v", res)
	}
	if p, _ := h.st.Project(ctx, "p"); p.Run != 2 || p.State != domain.ProjectDone || p.Result != domain.ResultPassed {
		t.Fatalf("run 2's project = %+v", p)
	}
	if got := attempts(); got != "S01#1/1 S02#1/1 S03#1/1" {
		t.Errorf("after run 2: %s", got)
	}
	for _, f := range []string{"run-1/report.md", "run-1/S01/output/a.txt", "run-1/final/i.txt", "report.md", "S01/output/a.txt", "final/i.txt", "S01/attempts/1/task.log"} {
		if _, err := os.Stat(filepath.Join(h.home, "runs", "p", f)); err != nil {
			t.Errorf("after run 2: %v", err)
		}
	}

	// S01's spec changes: it runs again, and S02 with it; S03 is reused.
	if err := os.WriteFile(filepath.Join(specDir, "S01-a.md"), []byte("cat in.txt > a.txt; echo 2 >> a.txt\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	res = start(control.StartOptions{})
	if res.Run != 3 || res.Finished || reasons(res) != "S01: spec changed|S02: depends on S01" || strings.Join(res.Reused, " ") != "S03" {
		t.Fatalf("run 3 = %+v (%s)", res, reasons(res))
	}
	if p := finish("run 3 to finish"); p.Result != domain.ResultPassed {
		t.Fatalf("run 3 = %+v", p)
	}
	if got := attempts(); got != "S01#2/0 S02#2/0 S03#1/1" {
		t.Errorf("after run 3: %s", got)
	}
	if b, _ := os.ReadFile(filepath.Join(h.home, "runs", "p", "run-2", "S01", "output", "a.txt")); string(b) != "base\n" {
		t.Errorf("run 2's archived a.txt = %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(h.home, "runs", "p", "S01", "output", "a.txt")); string(b) != "base\n2\n" {
		t.Errorf("run 3's a.txt = %q", b)
	}

	// The base tree changes: every task that reads it runs again.
	if err := os.WriteFile(filepath.Join(specDir, "base", "in.txt"), []byte("new base\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	res = start(control.StartOptions{})
	if want := "S01: base tree changed|S02: base tree changed|S03: base tree changed"; reasons(res) != want {
		t.Errorf("run 4: %s, want %s", reasons(res), want)
	}
	finish("run 4 to finish")

	// --fresh runs everything again; a failed task runs again in the next run.
	if err := os.WriteFile(filepath.Join(specDir, "S03-c.md"), []byte("---\nmax_retries: 0\n---\nexit 3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	res = start(control.StartOptions{Fresh: true})
	if want := "S01: --fresh|S02: --fresh|S03: --fresh"; reasons(res) != want {
		t.Errorf("run 5: %s, want %s", reasons(res), want)
	}
	h.tickUntil("S03 to fail for good", func() bool { return h.task("S03").Status == domain.Failed })
	if p := finish("run 5 to finish"); p.Result != domain.ResultFailed {
		t.Fatalf("run 5 = %+v", p)
	}
	if err := os.WriteFile(filepath.Join(specDir, "S03-c.md"), []byte("echo c > c.txt\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	res = start(control.StartOptions{})
	if !strings.HasPrefix(reasons(res), "S03: failed in run 5") || len(res.Reused) != 2 || res.AllReused {
		t.Errorf("run 6: %+v (%s)", res, reasons(res))
	}
	finish("run 6 to finish")

	// Every run is kept: its project row, tasks, spending and events.
	hist, err := h.st.RunHistory(ctx, "p")
	if err != nil || len(hist) != 6 {
		t.Fatalf("RunHistory = %d runs, %v", len(hist), err)
	}
	var got []string
	for _, r := range hist {
		got = append(got, fmt.Sprintf("%d:%s:%d/%d", r.Project.Run, r.Project.Result, r.Ran, r.Reused))
	}
	// Run 2 reused the phase too (S99 and V01): 5 reused, none ran.
	if want := "1:passed:5/0 2:passed:0/5 3:passed:4/1 4:passed:5/0 5:failed:3/0 6:passed:3/2"; strings.Join(got, " ") != want {
		t.Errorf("runs = %s, want %s", strings.Join(got, " "), want)
	}
	run5, _, err := h.st.AtRun(ctx, "p", 5)
	if err != nil {
		t.Fatal(err)
	}
	if tk, err := run5.Task(ctx, "p", "S03"); err != nil || tk.Status != domain.Failed {
		t.Errorf("run 5's S03 = %+v, %v", tk, err)
	}
	if _, err := os.Stat(filepath.Join(h.home, "runs", "p", "run-5", "report.md")); err != nil {
		t.Errorf("run 5's report: %v", err)
	}

	// Every author task reused, but the verifier's spec changed: the
	// phase runs again rather than passing on the old verdict.
	v01 := h.task("V01").Attempt
	if err := os.WriteFile(filepath.Join(specDir, "V01-v.md"), []byte("echo '{\"pass\": false, \"issues\": [\"stricter\"]}' > verdict.json\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	res = start(control.StartOptions{})
	if res.AllReused || reasons(res) != "" || len(res.Reused) != 3 {
		t.Fatalf("run 7 after V01 changed: %+v", res)
	}
	if p := finish("run 7 to finish"); p.Result != domain.ResultFailed || h.task("V01").Attempt <= v01 {
		t.Errorf("run 7 = %+v, V01 attempt %d (was %d); want the phase run again and failing", p, h.task("V01").Attempt, v01)
	}
}

func TestMinFreeMemKeepsTasksOffANode(t *testing.T) {
	yaml := `
nodes:
  - name: starved
    slots: 4
    min_free_mem: 1000TiB
    work_dir: WORK/starved
  - name: roomy
    slots: 1
    work_dir: WORK/roomy
`
	h := newHarness(t, yaml, shellProject(map[string]string{
		"S01-a.md": "echo a\n", "S02-b.md": "echo b\n", "S03-c.md": "echo c\n",
	}))
	h.tickUntil("project to finish", func() bool {
		p, _ := h.st.Project(context.Background(), "p")
		return p.State == domain.ProjectDone
	})
	for _, id := range []string{"S01", "S02", "S03"} {
		if n := h.task(id).Node; n != "roomy" {
			t.Errorf("%s ran on %s, a node with less than min_free_mem available", id, n)
		}
	}
	nodes, _ := h.st.Nodes(context.Background())
	for _, n := range nodes {
		if n.MemAvailableBytes <= 0 {
			t.Errorf("node %s: no memory fact recorded", n.Name)
		}
	}
}

// TestHeadOfLineFreeTaskStartsInTheFirstTick: 2 slots; S0000 runs for long,
// 1,000 tasks wait for it, and S1001 (last by priority and ID) depends on
// nothing. S1001 takes the second slot in the very first tick: the
// candidates are the ready tasks, not the first pending ones.
func TestHeadOfLineFreeTaskStartsInTheFirstTick(t *testing.T) {
	specs := shellProject(map[string]string{
		"S0000-long.md": "sleep 60\n",
		"S1001-free.md": "---\npriority: 9\n---\necho free\n",
	})
	for i := 1; i <= 1000; i++ {
		specs[fmt.Sprintf("S%04d-wait.md", i)] = "---\ndepends_on: [S0000]\n---\necho after\n"
	}
	h := newHarness(t, "", specs)
	t.Cleanup(func() { killAll(t, h) })
	h.tick()
	if a := h.task("S1001").Attempt; a != 1 {
		t.Fatalf("S1001 (no dependencies) has attempt %d after the first tick, want 1: it waited behind S0000's dependents", a)
	}
	if a := h.task("S0000").Attempt; a != 1 {
		t.Fatalf("S0000 has attempt %d after the first tick, want 1", a)
	}
	states, _, err := h.st.States(context.Background(), "p")
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 1000; i++ {
		if id := fmt.Sprintf("S%04d", i); states[id] != domain.Pending {
			t.Fatalf("%s is %s while S0000 runs, want pending", id, states[id])
		}
	}
	h.tickUntil("S0000 to run", func() bool { return h.task("S0000").Status == domain.Running })
}
