package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
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

// TestThroughputBatchesNeverStall runs consecutive batches of make bench's
// throughput scenario (200 no-op tasks over 4 sshd nodes × 8 slots,
// poll_interval 30s, each batch a new project), each by a controller of its
// own as `dispatch start` would, and fails when a batch takes more than 3×
// the median (make test's 10 batches: when two do; each is logged with the
// wait it made): one in four such batches used to stall for a poll interval
// (30.4 s instead of 2 s), a task's end never told by its node's status
// stream (see wrapper:TestWatchSeesADirectoryMadeWhileWatchesAreAdded).
//
// Any batch whose controller waited for a timer (the poll, a due time)
// rather than a node's word fails, whatever its wall time: that is what a
// stall is, and it does not move with the machine's load as the wall
// time does. Each slow or stalled batch names its longest wait and its
// slowest tick, step by step.
//
// It runs 10 batches in make test; DISPATCH_STRESS_BATCHES=100 runs more, with one
// busy process per core beside them (CPU load, as make bench sees).
// -short skips it.
func TestThroughputBatchesNeverStall(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: 10 batches of 200 tasks take a minute")
	}
	batches, load := 10, false
	if v := os.Getenv("DISPATCH_STRESS_BATCHES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 3 {
			t.Fatalf("DISPATCH_STRESS_BATCHES=%q: want a number of batches, 3 or more", v)
		}
		batches, load = n, true
	}
	sshdtest.Require(t)
	c := sshdtest.NewClient(t)
	var defs []nodeDef
	for i := range 4 {
		s := c.StartServer(t, fmt.Sprintf("n%d", i+1))
		c.Trust(t, s)
		defs = append(defs, nodeDef{name: s.Name, server: s, slots: tpSlots})
	}
	homeDir := t.TempDir()
	if err := os.WriteFile(home.ConfigPath(homeDir), []byte(nodesYAML(c, "", defs)), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	cfg, err := nodes.Load(home.ConfigPath(homeDir))
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(ctx, home.DBPath(homeDir))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if load {
		busyCores(t)
	}
	wrappers := nodes.NewWrappers()
	// The first batch builds and installs the wrapper: like make bench's
	// cold run, it is not counted.
	t.Logf("cold batch (installs the wrapper): %s", runBatch(t, ctx, c, cfg, st, wrappers, homeDir, "cold", io.Discard).Round(time.Millisecond))
	var walls []time.Duration
	logs := map[string]*bytes.Buffer{}
	for b := range batches {
		project := fmt.Sprintf("b%03d", b)
		logs[project] = &bytes.Buffer{}
		wall := runBatch(t, ctx, c, cfg, st, wrappers, homeDir, project, logs[project])
		walls = append(walls, wall)
		t.Logf("batch %s: %s", project, wall.Round(time.Millisecond))
	}
	sorted := slices.Clone(walls)
	slices.Sort(sorted)
	med := sorted[len(sorted)/2]
	// A stall is a wait for a timer while tasks ran: every change of a
	// batch is told by a node's status stream, and the loop never needs
	// the poll (or a claim's grace) to see one. Unlike the wall time, this
	// does not move with the machine's load (a batch at load 20 took 4×
	// the median of one at load 5, with every wait woken by the stream).
	for b := range batches {
		project := fmt.Sprintf("b%03d", b)
		if waits := timerWaits(logs[project].String()); len(waits) > 0 {
			t.Errorf("batch %s waited for a timer, not a node's word (a stall); %s:\n%s", project,
				longestWait(t, st, project, logs[project].String()), strings.Join(waits, "\n"))
		}
	}
	slow := 0
	for i, w := range walls {
		if w > 3*med {
			slow++
			project := fmt.Sprintf("b%03d", i)
			t.Logf("batch %d took %s, more than 3× the median %s of %d batches; %s", i, w.Round(time.Millisecond), med.Round(time.Millisecond), batches,
				longestWait(t, st, project, logs[project].String()))
		}
	}
	// The stress run (DISPATCH_STRESS_BATCHES) allows no slow batch. The
	// 10 batches of make test share the machine with every other test
	// package and allow one, named above (issue 32 item 12 is open: one
	// stall of ~27 s was seen there once in several runs, never under the
	// stress run): two fail.
	if allowed := map[bool]int{true: 0, false: 1}[load]; slow > allowed {
		t.Errorf("%d of %d batches took more than 3× the median %s (allowed: %d); their waits are logged above", slow, batches, med.Round(time.Millisecond), allowed)
	}
	t.Logf("%d batches of %d tasks: median %s, slowest %s", batches, tpTasks, med.Round(time.Millisecond), sorted[len(sorted)-1].Round(time.Millisecond))
}

// runBatch adds project (tpTasks no-op tasks) and runs a controller until
// it is finished, as `dispatch start` does, and returns the controller's
// wall time.
func runBatch(t *testing.T, ctx context.Context, c *sshdtest.Client, cfg *nodes.Config, st *store.Store, wrappers *nodes.Wrappers, homeDir, project string, log io.Writer) time.Duration {
	t.Helper()
	if err := writeProject(homeDir, project, tpTasks, func(int) string { return "true\n" }); err != nil {
		t.Fatal(err)
	}
	p, err := spec.Load(home.SpecsDir(homeDir), project)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := plan.AddProject(ctx, st, cfg, homeDir, p, control.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	// Each batch connects anew, as each `dispatch start` does; Run closes
	// the transports when it ends.
	trs := map[string]nodes.Transport{}
	for _, n := range cfg.Nodes {
		tr, err := sshnode.Open(cfg, n, sshnode.Env{Home: c.Home, User: c.User})
		if err != nil {
			t.Fatal(err)
		}
		trs[n.Name] = tr
	}
	ctl := controller.New(controller.Options{Home: homeDir, Config: cfg, Store: st, Transports: trs, Wrappers: wrappers,
		Logger: slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	start := time.Now()
	if err := ctl.Run(rctx, 0, nil); err != nil {
		t.Fatalf("batch %s: %v", project, err)
	}
	wall := time.Since(start)
	tasks, err := st.Tasks(ctx, project)
	if err != nil {
		t.Fatal(err)
	}
	for _, tk := range tasks {
		if tk.Status != domain.Completed {
			t.Fatalf("batch %s: %s is %s (%s)", project, tk.ID, tk.Status, tk.Error)
		}
	}
	return wall
}

// busyCores keeps every core busy with a shell loop until the test ends
// (or its process dies: each loop checks that it lives).
func busyCores(t *testing.T) {
	t.Helper()
	loop := fmt.Sprintf("while kill -0 %d 2>/dev/null; do :; done", os.Getpid())
	for range runtime.NumCPU() {
		cmd := exec.Command("/bin/sh", "-c", loop)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})
	}
}

// longestWait names where a slow batch waited: the longest gap between two
// of its events, those two events, and the controller's log lines of that
// gap (issue 32 item 12: the next stall names its wait).
func longestWait(t *testing.T, st *store.Store, project, log string) string {
	evs, err := st.Events(t.Context(), project, 0, 1_000_000)
	if err != nil || len(evs) < 2 {
		return fmt.Sprintf("no events to tell the wait (%v)", err)
	}
	at := 1
	for i := 2; i < len(evs); i++ {
		if evs[i].Time.Sub(evs[i-1].Time) > evs[at].Time.Sub(evs[at-1].Time) {
			at = i
		}
	}
	a, b := evs[at-1], evs[at]
	var lines []string
	for _, l := range strings.Split(log, "\n") {
		ts, ok := logTime(l)
		if ok && !ts.Before(a.Time) && !ts.After(b.Time.Add(time.Second)) && len(lines) < 60 {
			lines = append(lines, l)
		}
	}
	return fmt.Sprintf("longest wait %s, between %s %s/%s %s→%s (%s) and %s %s/%s %s→%s (%s); slowest tick: %s; controller log of the wait:\n%s",
		b.Time.Sub(a.Time).Round(time.Millisecond),
		a.Time.Format("15:04:05.000"), a.Kind, a.Task, a.FromStatus, a.ToStatus, a.Message,
		b.Time.Format("15:04:05.000"), b.Kind, b.Task, b.FromStatus, b.ToStatus, b.Message, slowestTick(log), strings.Join(lines, "\n"))
}

// timerWaits are the controller's debug lines of the waits between ticks
// that the poll interval or a due time ended (woke_by=poll|due).
func timerWaits(log string) []string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, `msg="tick wait"`) && (strings.Contains(l, " woke_by=poll ") || strings.Contains(l, " woke_by=due ")) {
			out = append(out, l)
		}
	}
	return out
}

// slowestTick is the controller's debug line of the batch's longest tick,
// which says how long each of its steps took.
func slowestTick(log string) string {
	var slowest string
	var most time.Duration
	for _, l := range strings.Split(log, "\n") {
		if !strings.Contains(l, " msg=tick took=") {
			continue
		}
		v, _, _ := strings.Cut(l[strings.Index(l, " took=")+len(" took="):], " ")
		if d, err := time.ParseDuration(v); err == nil && d > most {
			slowest, most = l, d
		}
	}
	return slowest
}

// logTime reads the time= of a slog text line.
func logTime(line string) (time.Time, bool) {
	v, ok := strings.CutPrefix(line, "time=")
	if !ok {
		return time.Time{}, false
	}
	v, _, _ = strings.Cut(v, " ")
	ts, err := time.Parse(time.RFC3339Nano, v)
	return ts, err == nil
}
