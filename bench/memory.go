package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/dispatch-tool/dispatch/control"
	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/home"
	"github.com/dispatch-tool/dispatch/internal/sshdtest"
	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/plan"
	"github.com/dispatch-tool/dispatch/spec"
	"github.com/dispatch-tool/dispatch/store"
)

const (
	memTasks   = 10000
	memRunning = 1000
	memNodes   = 20
	memPoll    = 5 * time.Second
)

type memSample struct {
	at       time.Duration
	rss, hwm int64
}

type memResult struct {
	specBytes      int
	launch         time.Duration // start → 1,000 running in the database
	samples        []memSample
	running        time.Duration // when 1,000 were running, since start
	steadyRSS      []float64
	launchMax, hwm int64
	firstLaunch    time.Duration // when the first task directory appeared on a node
	validateMax    int64         // peak RSS of `dispatch validate` of the same home (ru_maxrss)
	addMax         int64         // max RSS before the first launch: parse the specs, add them to SQLite
	// adding the project again in process, on a fresh database
	addPeakHeap, addAlloc int64
	addTop                string
	loadLive              int64 // live heap of the parsed project after spec.Load
	// in process, resumed on the same home
	tickWall                []float64
	tickAlloc               []float64 // bytes allocated per tick
	tickCPU                 []float64 // the bench process's CPU per tick, seconds
	heapAfter               []float64 // HeapInuse right after a tick
	liveAfterGC             int64
	allocProfile, heapTopFn string
	// tickShares are parts of the steady ticks' CPU profile, inclusive.
	tickShares      []part
	queryTasksShare float64 // of the ticks' allocations, inclusive
	listSnapshots   bool
}

func benchMemory(ctx context.Context, o *options, t *tb) (*section, error) {
	c := sshdtest.NewClient(t)
	servers := startServers(t, c, "m", memNodes, nodeHomeSetting(t), "MaxSessions 1100")
	var results []*memResult
	for i, size := range []int{0, 4096} {
		r, err := memRun(ctx, o, t, c, servers, fmt.Sprintf("mem%d", i+1), size)
		if err != nil {
			return nil, err
		}
		results = append(results, r)
		fmt.Printf("bench memory: specs of %d bytes: peak RSS %s, steady %s\n", r.specBytes, mib(r.hwm), mib(int64(median(r.steadyRSS))))
	}
	return memSection(o, results), nil
}

// memBody is a spec of about size bytes: `sleep 600` plus comment lines
// standing for a prompt.
func memBody(size int) func(int) string {
	return func(i int) string {
		var b strings.Builder
		fmt.Fprintf(&b, "# Task %d\nsleep 600\n", i)
		for b.Len() < size {
			b.WriteString("# Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut labore.\n")
		}
		return b.String()
	}
}

func memRun(ctx context.Context, o *options, t *tb, c *sshdtest.Client, servers []*sshdtest.Server, project string, size int) (*memResult, error) {
	r := &memResult{specBytes: len(memBody(size)(1))}
	homeDir := t.TempDir()
	var defs []nodeDef
	for i, s := range servers {
		defs = append(defs, nodeDef{name: fmt.Sprintf("m%d", i+1), server: s, slots: memRunning / memNodes})
	}
	if err := writeHome(homeDir, nodesYAML(c, "  poll_interval: "+memPoll.String()+"\n", defs), project, memTasks, memBody(size)); err != nil {
		return nil, err
	}
	defer func() {
		for _, s := range servers {
			killTasks(s.WorkDir, project)
		}
	}()
	logf, err := os.Create(filepath.Join(homeDir, "start.log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(o.dispatch, "--home", homeDir, "start", project)
	cmd.Env = dispatchEnv(c)
	cmd.Stdout, cmd.Stderr = logf, logf
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}
	defer stop()

	var mu sync.Mutex
	done := make(chan struct{})
	go func() {
		tk := time.NewTicker(100 * time.Millisecond)
		defer tk.Stop()
		for {
			rss, hwm, err := procMem(cmd.Process.Pid)
			if err == nil && rss > 0 {
				mu.Lock()
				r.samples = append(r.samples, memSample{at: time.Since(start), rss: rss, hwm: hwm})
				if r.firstLaunch == 0 {
					if _, err := os.Stat(filepath.Join(servers[0].WorkDir, project, "tasks")); err == nil {
						r.firstLaunch = time.Since(start)
					}
				}
				mu.Unlock()
			}
			select {
			case <-done:
				return
			case <-tk.C:
			}
		}
	}()
	fail := func(format string, args ...any) (*memResult, error) {
		close(done)
		log, _ := os.ReadFile(filepath.Join(homeDir, "start.log"))
		return nil, fmt.Errorf("%s\ndispatch start said:\n%s", fmt.Sprintf(format, args...), lastLines(string(log), 15))
	}

	dbPath := home.DBPath(homeDir)
	var counts map[domain.Status]int
	if !waitFor(5*time.Minute, 500*time.Millisecond, func() bool {
		select {
		case err := <-exited:
			exited <- err
			return true
		default:
		}
		counts, _ = taskCounts(ctx, dbPath, project)
		return counts[domain.Running] >= memRunning
	}) || counts[domain.Running] < memRunning {
		return fail("not %d running: %v", memRunning, counts)
	}
	r.running = time.Since(start)
	r.launch = r.running
	steady := time.Duration(o.pick(15, 30)) * time.Second
	select {
	case <-ctx.Done():
		return fail("interrupted")
	case <-time.After(steady):
	}
	if counts, _ = taskCounts(ctx, dbPath, project); counts[domain.Running] != memRunning || counts[domain.Pending] != memTasks-memRunning {
		return fail("after the steady phase: %v", counts)
	}
	close(done)
	stop()
	if r.validateMax, err = peakRSS(ctx, o, c, "--home", homeDir, "validate", project); err != nil {
		return nil, err
	}
	mu.Lock()
	for _, s := range r.samples {
		switch {
		case r.firstLaunch == 0 || s.at < r.firstLaunch:
			r.addMax = max(r.addMax, s.rss)
		case s.at <= r.running:
			r.launchMax = max(r.launchMax, s.rss)
		default:
			r.steadyRSS = append(r.steadyRSS, float64(s.rss))
		}
		r.hwm = max(r.hwm, s.hwm)
	}
	mu.Unlock()

	if err := memInproc(ctx, o, c, homeDir, project, r); err != nil {
		return nil, fmt.Errorf("in-process ticks: %w", err)
	}
	if err := memAdd(ctx, o, t, homeDir, project, r); err != nil {
		return nil, fmt.Errorf("in-process add: %w", err)
	}
	return r, nil
}

// steadyTicks is how many steady ticks memInproc measures: fifty, so that
// the median of a tick's ~10 ms of CPU is not moved by one busy moment of
// the machine (ten ticks' medians ranged 8.3–13.5 ms on one build under
// load). The first tick, not measured, lists every task directory; the
// measured ones are live calls (a full listing comes after ten calls and
// 30 s, and fifty ticks take a few seconds).
const steadyTicks = 50

// part is a share of a CPU profile.
type part struct {
	what string
	of   float64
}

// tickParts are the parts of a steady tick's CPU that RESULTS.md names,
// by the function that is their root.
var tickParts = []struct{ what, fn string }{
	{"the tick's one transaction (read, plan, record: `decide`)", "controller.(*Controller).decide"},
	{"the status calls (`pullNode`: SSH session, request, reply)", "controller.(*Controller).pullNode"},
	{"decoding the replies", "encoding/json.Unmarshal"},
	{"the SSH connections' read loops", "ssh.(*handshakeTransport).readLoop"},
	{"collection and the phase (`collectAll`, `advance`)", "controller.(*Controller).Tick.func1"},
	{"the garbage collector", "runtime.gcBgMarkWorker"},
}

// memInproc resumes the stopped controller's home in this process and
// measures the allocations of a few ticks.
func memInproc(ctx context.Context, o *options, c *sshdtest.Client, home, project string, r *memResult) error {
	ip, err := newInproc(ctx, c, home, project)
	if err != nil {
		return err
	}
	defer ip.close()
	ctl := ip.controller(nil)
	if _, err := ctl.Tick(ctx); err != nil {
		return err
	}
	if tasks, err := ip.st.Tasks(ctx, project); err == nil && len(tasks) > 0 {
		r.listSnapshots = len(tasks[0].Snapshot) > 0
	}
	runtime.GC()
	base := filepath.Join(o.outDir, project+".heap.base.pprof")
	after := filepath.Join(o.outDir, project+".heap.pprof")
	if err := writeHeap(base); err != nil {
		return err
	}
	cpuProf, err := os.Create(filepath.Join(o.outDir, project+".ticks.cpu.pprof"))
	if err != nil {
		return err
	}
	defer cpuProf.Close()
	if err := pprof.StartCPUProfile(cpuProf); err != nil {
		return err
	}
	defer pprof.StopCPUProfile()
	for range steadyTicks {
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		cpu0 := selfCPU()
		start := time.Now()
		res, err := ctl.Tick(ctx)
		wall := time.Since(start)
		cpu := selfCPU() - cpu0
		runtime.ReadMemStats(&m1)
		if err != nil {
			return err
		}
		if res.Launched != 0 {
			return fmt.Errorf("a resumed steady tick launched %d", res.Launched)
		}
		r.tickWall = append(r.tickWall, wall.Seconds())
		r.tickAlloc = append(r.tickAlloc, float64(m1.TotalAlloc-m0.TotalAlloc))
		r.tickCPU = append(r.tickCPU, cpu)
		r.heapAfter = append(r.heapAfter, float64(m1.HeapInuse))
	}
	pprof.StopCPUProfile()
	cpuProf.Close()
	if out, err := exec.Command("go", "tool", "pprof", "-top", "-cum", "-nodecount=1000", cpuProf.Name()).Output(); err == nil {
		for _, p := range tickParts {
			r.tickShares = append(r.tickShares, part{p.what, cumShare(string(out), p.fn)})
		}
	}
	ip.rec.take()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	r.liveAfterGC = int64(m.HeapAlloc)
	if err := writeHeap(after); err != nil {
		return err
	}
	r.allocProfile = after
	out, err := exec.Command("go", "tool", "pprof", "-sample_index=alloc_space", "-base", base, "-top", "-nodecount=40", after).Output()
	if err == nil {
		r.queryTasksShare = cumShare(string(out), "store.queryTasks")
		var keep []string
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if strings.HasPrefix(l, "File:") || strings.HasPrefix(l, "Build ID:") || strings.HasPrefix(l, "Time:") || strings.HasPrefix(l, "Showing top") {
				continue
			}
			if len(keep) >= 16 {
				break
			}
			keep = append(keep, l)
		}
		r.heapTopFn = "```\n$ go tool pprof -sample_index=alloc_space -base " + rel(base) + " -top -nodecount=10 " + rel(after) + "\n" +
			strings.Join(keep, "\n") + "\n```\n"
	}
	return nil
}

// memAdd does what `dispatch start` does before its first tick — load the
// specs, plan, add the project to a fresh database — in this process,
// sampling the heap every 2 ms, and profiles its allocations.
func memAdd(ctx context.Context, o *options, t *tb, homeDir, project string, r *memResult) error {
	cfg, err := nodes.Load(home.ConfigPath(homeDir))
	if err != nil {
		return err
	}
	st, err := store.Open(ctx, filepath.Join(t.TempDir(), "dispatch.db"))
	if err != nil {
		return err
	}
	defer st.Close()
	// First what the parsed project keeps alive.
	runtime.GC()
	var l0, l1 runtime.MemStats
	runtime.ReadMemStats(&l0)
	loaded, err := spec.Load(home.SpecsDir(homeDir), project)
	if err != nil {
		return err
	}
	runtime.GC()
	runtime.ReadMemStats(&l1)
	r.loadLive = int64(l1.HeapAlloc) - int64(l0.HeapAlloc)
	runtime.KeepAlive(loaded)

	runtime.GC()
	base := filepath.Join(o.outDir, project+".add.base.pprof")
	after := filepath.Join(o.outDir, project+".add.pprof")
	if err := writeHeap(base); err != nil {
		return err
	}
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(sample)
	floor := int64(sample[0].Value.Uint64())
	var peak atomic.Int64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		for {
			metrics.Read(s)
			if v := int64(s[0].Value.Uint64()); v > peak.Load() {
				peak.Store(v)
			}
			select {
			case <-done:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	p, err := spec.Load(home.SpecsDir(homeDir), project)
	if err == nil {
		_, err = plan.Plan(cfg, p, nil, control.StartOptions{})
	}
	if err == nil {
		_, err = plan.AddProject(ctx, st, cfg, homeDir, p, control.StartOptions{})
	}
	runtime.ReadMemStats(&m1)
	close(done)
	wg.Wait()
	if err != nil {
		return err
	}
	r.addPeakHeap = peak.Load() - floor
	r.addAlloc = int64(m1.TotalAlloc - m0.TotalAlloc)
	if err := writeHeap(after); err != nil {
		return err
	}
	out, err := exec.Command("go", "tool", "pprof", "-sample_index=alloc_space", "-base", base, "-top", "-nodecount=12", after).Output()
	if err == nil {
		var keep []string
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if strings.HasPrefix(l, "File:") || strings.HasPrefix(l, "Build ID:") || strings.HasPrefix(l, "Time:") || strings.HasPrefix(l, "Showing top") {
				continue
			}
			keep = append(keep, l)
		}
		r.addTop = "```\n$ go tool pprof -sample_index=alloc_space -base " + rel(base) + " -top -nodecount=12 " + rel(after) + "\n" +
			strings.Join(keep, "\n") + "\n```\n"
	}
	return nil
}

func writeHeap(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return pprof.Lookup("allocs").WriteTo(f, 0)
}

func memSection(o *options, rs []*memResult) *section {
	sec := &section{title: "Memory: controller RSS with 10,000 tasks in the database, 1,000 running"}
	var b strings.Builder
	fmt.Fprintf(&b, "`dispatch start` (the binary) on a project of %d shell tasks (`sleep 600`), %d sshd nodes × %d slots: the first "+
		"tick claims and launches %d, the other %d stay pending. The bench reads VmRSS and VmHWM of the dispatch process from "+
		"/proc every 100 ms: while it parses the specs and adds the project (until the first task directory appears on a "+
		"node), while it launches, then for %s of steady ticks once the database shows %d running (poll_interval %s, so that "+
		"several ticks fall in the window; a tick does the same work at any interval). The second run pads every spec with "+
		"comment lines to about 4 KiB, the size of a short agent prompt.\n\n",
		memTasks, memNodes, memRunning/memNodes, memRunning, memTasks-memRunning, time.Duration(o.pick(15, 30))*time.Second, memRunning, memPoll)
	tbl := &table{head: []string{"spec size", "max RSS before the first launch (specs parsed, project added)", "max RSS while launching 1,000",
		"steady RSS median (max)", "peak VmHWM", "≤ 100 MB", "start → 1,000 running", "`dispatch validate`: peak RSS"}}
	for _, r := range rs {
		tbl.add(fmt.Sprintf("%d B", r.specBytes), mib(r.addMax), mib(r.launchMax),
			fmt.Sprintf("%s (%s)", mib(int64(median(r.steadyRSS))), mib(int64(maxOf(r.steadyRSS)))), mib(r.hwm),
			verdict(r.hwm <= 100e6), fmtS(r.launch.Seconds()), mib(r.validateMax))
	}
	b.WriteString(tbl.markdown())
	primary := rs[0]
	sec.targets = append(sec.targets, target{name: "memory", want: "controller RSS ≤ 100 MB (10,000 tasks, 1,000 running; no-op specs)",
		got: fmt.Sprintf("peak %s, steady %s", mib(primary.hwm), mib(int64(median(primary.steadyRSS)))), met: primary.hwm <= 100e6})
	if len(rs) > 1 {
		sec.targets = append(sec.targets, specMemTarget(rs[1]))
	}
	fmt.Fprintf(&b, "\nTarget: RSS ≤ 100 MB — %s (no-op specs: peak %s).\n\n", verdict(primary.hwm <= 100e6), mib(primary.hwm))

	b.WriteString("Where the memory goes, in the bench process on the same code. Before the first tick — `spec.Load`, " +
		"`plan.Plan` and `plan.AddProject` of the same 10,000 specs into a fresh database, the heap sampled every 2 ms:\n\n")
	t1 := &table{head: []string{"spec size", "spec text in all", "live heap of the parsed project (after `spec.Load`, GC)", "heap peak above the start", "allocated"}}
	for _, r := range rs {
		t1.add(fmt.Sprintf("%d B", r.specBytes), mib(int64(r.specBytes)*memTasks), mib(r.loadLive), mib(r.addPeakHeap), mib(r.addAlloc))
	}
	b.WriteString(t1.markdown())
	fmt.Fprintf(&b, "\nThen the stopped controller's home, resumed (the same code), %d steady ticks (live status calls: the first tick after the resume, not measured, listed every task directory; a full listing comes again after ten calls and 30 s):\n\n", steadyTicks)
	t2 := &table{head: []string{"spec size", "tick wall (10,000 tasks)", "controller CPU per tick", "allocated per tick", "heap in use right after a tick", "live heap after GC"}}
	for _, r := range rs {
		t2.add(fmt.Sprintf("%d B", r.specBytes), spread(r.tickWall, fmtMS), spread(r.tickCPU, fmtMS), mib(int64(median(r.tickAlloc))),
			mib(int64(median(r.heapAfter))), mib(r.liveAfterGC))
	}
	b.WriteString(t2.markdown())
	alloc, cpu := median(primary.tickAlloc), median(primary.tickCPU)
	sec.targets = append(sec.targets, target{name: "steady tick",
		want: "≤ 4 MiB allocated and ≤ 10 ms of controller CPU (10,000 tasks, 1,000 running, 20 nodes; a full status call to every node)",
		got:  fmt.Sprintf("%s, %s", mib(int64(alloc)), fmtMS(cpu)), met: alloc <= 4<<20 && cpu <= 0.010})
	fmt.Fprintf(&b, "\nTarget (issue 24): a steady tick allocates ≤ 4 MiB and uses ≤ 10 ms of controller CPU — %s (%s, %s). "+
		"The controller CPU is the bench process's own (getrusage) during `Tick`: the status calls' SSH client, their JSON, "+
		"SQLite and the decisions; the sshd and wrapper processes are not in it. Each of these ticks makes a full status "+
		"call to every node; in `Run` that comes once per poll interval, and the ticks between act on what the nodes' "+
		"streams said.\n", verdict(alloc <= 4<<20 && cpu <= 0.010), mib(int64(alloc)), fmtMS(cpu))
	if len(primary.tickShares) > 0 {
		var parts []string
		for _, p := range primary.tickShares {
			if p.of >= 0.01 { // a part the profile did not sample is not named
				parts = append(parts, fmt.Sprintf("%s %.0f%%", p.what, 100*p.of))
			}
		}
		fmt.Fprintf(&b, "\nThe CPU profile of these ticks (`%s`, inclusive shares, parts overlap): %s. The rest is the Go scheduler "+
			"and the system calls of 20 SSH sessions.\n", rel(filepath.Join(o.outDir, "mem1.ticks.cpu.pprof")), strings.Join(parts, "; "))
	}
	for _, r := range rs {
		if r.addTop != "" {
			fmt.Fprintf(&b, "\nAllocations of adding the project, %d-byte specs:\n\n%s", r.specBytes, r.addTop)
		}
		if r.heapTopFn != "" {
			fmt.Fprintf(&b, "\nAllocations of the %d ticks, %d-byte specs:\n\n%s", steadyTicks, r.specBytes, r.heapTopFn)
		}
	}
	memTickHint = fmtS(median(rs[0].tickWall)) + " per tick"
	sec.findings = append(sec.findings, finding{"memory", memFinding(rs)})
	sec.body = b.String()
	return sec
}

// specMemLimit is issue 35's bound on the peak RSS of `dispatch start`
// and `dispatch validate` with 10,000 specs of 4 KiB.
const specMemLimit = 100 << 20

// specMemTarget is issue 35's memory goal, from the run with 4 KiB specs.
func specMemTarget(r *memResult) target {
	return target{name: "memory", goal: goalSpecMemory,
		want: "10,000 specs of 4 KiB: `dispatch start` (1,000 of them running) and `dispatch validate` ≤ 100 MiB peak RSS",
		got:  fmt.Sprintf("start: peak %s, steady %s; validate: peak %s", mib(r.hwm), mib(int64(median(r.steadyRSS))), mib(r.validateMax)),
		met:  r.hwm <= specMemLimit && r.validateMax <= specMemLimit}
}

// peakRSS runs dispatch with args to its end and returns its peak RSS,
// as GNU time reports it (%M), or, without /usr/bin/time, the largest
// VmHWM read every 5 ms. Not the rusage os/exec returns: its child begins
// as a vfork of this process, and the kernel counts the high-water mark
// of that memory, the bench's own, in the child's ru_maxrss.
func peakRSS(ctx context.Context, o *options, c *sshdtest.Client, args ...string) (int64, error) {
	f, err := os.CreateTemp("", "peakrss")
	if err != nil {
		return 0, err
	}
	f.Close()
	defer os.Remove(f.Name())
	_, noTime := os.Stat("/usr/bin/time")
	cmd := exec.CommandContext(ctx, "/usr/bin/time", append([]string{"-f", "%M", "-o", f.Name(), o.dispatch}, args...)...)
	if noTime != nil {
		cmd = exec.CommandContext(ctx, o.dispatch, args...)
	}
	cmd.Env = dispatchEnv(c)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	var hwm atomic.Int64
	done := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		if noTime == nil {
			return // GNU time measures
		}
		for {
			if _, h, err := procMem(cmd.Process.Pid); err == nil && h > hwm.Load() {
				hwm.Store(h)
			}
			select {
			case <-done:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	err = cmd.Wait()
	close(done)
	<-sampled
	if err != nil {
		return 0, fmt.Errorf("dispatch %s: %v\n%s", strings.Join(args, " "), err, lastLines(out.String(), 15))
	}
	if noTime != nil {
		return hwm.Load(), nil
	}
	b, err := os.ReadFile(f.Name())
	if err != nil {
		return 0, err
	}
	kb, err := strconv.ParseInt(strings.TrimSpace(lastLines(string(b), 1)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("GNU time's %%M of dispatch %s: %q: %v", strings.Join(args, " "), b, err)
	}
	return kb << 10, nil
}

// selfCPU is the CPU time this process has used, in seconds.
func selfCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return math.NaN()
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// memFinding says where the controller's memory goes, from the measurements.
func memFinding(rs []*memResult) string {
	var b strings.Builder
	met := func(ok bool) string { return map[bool]string{true: "met", false: "not met"}[ok] }
	a := rs[0]
	fmt.Fprintf(&b, "**Memory.** With 10,000 tasks of which 1,000 run, `dispatch start` peaks at %s RSS with no-op specs "+
		"(target %s; %s before the first launch, %s while launching, %s steady)",
		mib(a.hwm), met(a.hwm <= 100e6), mib(a.addMax), mib(a.launchMax), mib(int64(median(a.steadyRSS))))
	if len(rs) > 1 {
		z := rs[1]
		fmt.Fprintf(&b, " and at %s with 4 KiB specs (issue 35's target, with validate's peak of %s: %s; %s before the first launch, %s while launching, %s steady)",
			mib(z.hwm), mib(z.validateMax), met(specMemTarget(z).met), mib(z.addMax), mib(z.launchMax), mib(int64(median(z.steadyRSS))))
	}
	b.WriteString(".")
	big := rs[len(rs)-1]
	if big.addMax >= big.launchMax && big.addMax >= int64(maxOf(big.steadyRSS)) {
		b.WriteString(" The peak comes before the first tick, while the specs are parsed and stored.")
	}
	fmt.Fprintf(&b, " `spec.Load` of the %d specs of the larger size (%s of spec text) leaves %s live (%.2f× the text): a loaded project keeps "+
		"each spec's hash, not its text, and `AddProject` reads each snapshot back from its file as it stores the task. With `Plan` "+
		"and `AddProject` the heap grows by %s and %s is allocated. `start` keeps a soft memory limit (48 MiB) while it loads and "+
		"stores the project, then collects before the first tick, so that the collector's goal is set from what stays live.",
		memTasks, mib(int64(big.specBytes)*memTasks), mib(big.loadLive), float64(big.loadLive)/float64(int64(big.specBytes)*memTasks),
		mib(big.addPeakHeap), mib(big.addAlloc))
	fmt.Fprintf(&b, " Between ticks the controller holds about %s of live heap; steady RSS is each tick's garbage: "+
		"%s allocated per tick (%.0f%% under `store.queryTasks`, the tick's one read of the tasks), a tick of %s against %s.",
		mib(a.liveAfterGC), mib(int64(median(a.tickAlloc))), 100*a.queryTasksShare, fmtS(median(a.tickWall)), tickWallHint)
	if big.listSnapshots {
		b.WriteString(" Task lists still carry the snapshot: with 4 KiB specs that is most of the bytes of every read.")
	}
	return b.String()
}

// memTickHint is a steady tick's time with 10,000 tasks, for the
// detection finding.
var memTickHint = "more"

// tickWallHint is the 20-node heartbeat tick of the tick scenario, for
// comparison, when it ran.
var tickWallHint = "a fraction of that with 1,000 tasks (tick scenario)"

// cumShare reads the cum% of fn from `go tool pprof -top` output.
func cumShare(top, fn string) float64 {
	for _, l := range strings.Split(top, "\n") {
		f := strings.Fields(l)
		if len(f) >= 6 && strings.HasSuffix(f[len(f)-1], fn) {
			v, err := strconv.ParseFloat(strings.TrimSuffix(f[4], "%"), 64)
			if err == nil {
				return v / 100
			}
		}
	}
	return 0
}
