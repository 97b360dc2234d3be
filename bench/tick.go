package main

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/internal/sshdtest"
	"github.com/dispatch-tool/dispatch/store"
)

const (
	tickTasks    = 1000
	tickMaxNodes = 20
	// heartbeatWait is longer than the wrapper's heartbeat period (10 s):
	// after it every running task has a new heartbeat, as at the default
	// poll_interval of 30 s.
	heartbeatWait = 10500 * time.Millisecond
)

type tickResult struct {
	nodes          int
	setup          time.Duration
	setupTicks     int
	quiet, beat    []tickStats
	beatsWritten   []int
	natural        tickStats // 10.5 s after the previous tick
	naturalWritten int
	profile        string
	dbTasks        []float64 // one Store.Tasks of the project
	dbRuns         []float64
	dbBeatTx       []float64 // one transaction writing every task's heartbeat
	statusBytes    int
	listSnapshots  bool // Store.Tasks returns the spec text too
	supervisorsRSS int64
}

func benchTick(ctx context.Context, o *options, t *tb) (*section, error) {
	c := sshdtest.NewClient(t)
	// MaxSessions is raised so that the node's session limit (OpenSSH's
	// default is 10) never shapes the setup's launch bursts.
	servers := startServers(t, c, "t", tickMaxNodes, nodeHomeSetting(t), "MaxSessions 1100")
	sweep := []int{1, 2, 5, 10, 20}
	if o.quick {
		sweep = []int{1, 20}
	}
	var results []*tickResult
	for _, n := range sweep {
		r, err := tickRun(ctx, o, t, c, servers[:n])
		if err != nil {
			return nil, fmt.Errorf("%d node(s): %w", n, err)
		}
		results = append(results, r)
		fmt.Printf("bench tick: %2d nodes: quiet tick %s, heartbeat tick %s (setup %s)\n", n,
			fmtMS(median(walls(r.quiet))), fmtMS(median(walls(r.beat))), r.setup.Round(time.Second))
	}
	return tickSection(o, results), nil
}

func walls(ts []tickStats) []float64 {
	var out []float64
	for _, t := range ts {
		out = append(out, t.wall.Seconds())
	}
	return out
}

func pick(ts []tickStats, f func(tickStats) time.Duration) []float64 {
	var out []float64
	for _, t := range ts {
		out = append(out, f(t).Seconds())
	}
	return out
}

func tickRun(ctx context.Context, o *options, t *tb, c *sshdtest.Client, servers []*sshdtest.Server) (*tickResult, error) {
	n := len(servers)
	r := &tickResult{nodes: n}
	home := t.TempDir()
	project := fmt.Sprintf("tick%02d", n)
	slots := (tickTasks + n - 1) / n
	var defs []nodeDef
	for i, s := range servers {
		defs = append(defs, nodeDef{name: fmt.Sprintf("t%d", i+1), server: s, slots: slots})
	}
	if err := writeHome(home, nodesYAML(c, "", defs), project, tickTasks, func(int) string { return "sleep 600\n" }); err != nil {
		return nil, err
	}
	ip, err := newInproc(ctx, c, home, project)
	if err != nil {
		return nil, err
	}
	defer ip.close()
	defer func() {
		killed := 0
		for _, s := range servers {
			killed += killTasks(s.WorkDir, project)
		}
		fmt.Printf("bench tick: killed the %d supervisors of %s\n", killed, project)
	}()

	// Launch the 1,000 tasks, about 200 per tick: a controller whose nodes
	// have fewer slots claims fewer tasks.
	perRound := (200 + n - 1) / n
	setupStart := time.Now()
	for round := 1; ; round++ {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if time.Since(setupStart) > 5*time.Minute {
			return nil, fmt.Errorf("1,000 tasks not running after %s: %v", time.Since(setupStart).Round(time.Second), ip.statusCounts(ctx))
		}
		cfg := *ip.cfg
		cfg.Nodes = slices.Clone(ip.cfg.Nodes)
		for i := range cfg.Nodes {
			cfg.Nodes[i].Slots = min(slots, round*perRound)
		}
		if _, err := ip.controller(&cfg).Tick(ctx); err != nil {
			return nil, err
		}
		r.setupTicks++
		ip.rec.take()
		counts := ip.statusCounts(ctx)
		if counts[domain.Running] == tickTasks {
			break
		}
		if counts[domain.Failed] > 0 {
			return nil, fmt.Errorf("tasks failed during setup: %v", counts)
		}
	}
	r.setup = time.Since(setupStart)

	ctl := ip.controller(nil)
	if _, err := ctl.Tick(ctx); err != nil { // a new controller checks the wrapper once
		return nil, err
	}
	ip.rec.take()
	var stopProfile func()
	if n == 1 || n == tickMaxNodes {
		r.profile = filepath.Join(o.outDir, fmt.Sprintf("tick-%02dnodes.cpu.pprof", n))
		stop, err := cpuProfile(r.profile)
		if err != nil {
			return nil, err
		}
		stopProfile = stop
		defer func() {
			if stopProfile != nil {
				stopProfile()
			}
		}()
	}
	measure := func() (tickStats, error) {
		start := time.Now()
		res, err := ctl.Tick(ctx)
		end := time.Now()
		calls := ip.rec.take()
		if err != nil {
			return tickStats{}, err
		}
		if res.Launched != 0 || res.Changed != 0 {
			return tickStats{}, fmt.Errorf("steady tick launched %d and changed %d", res.Launched, res.Changed)
		}
		return analyseTick(start, end, calls), nil
	}
	// Work of the bench itself between timed ticks carries the pprof label
	// bench=setup and is left out of the profile's analysis.
	setup := func(fn func(context.Context) error) error {
		var err error
		pprof.Do(ctx, pprof.Labels("bench", "setup"), func(ctx context.Context) { err = fn(ctx) })
		return err
	}
	// blank sets every task's stored heartbeat to a value no node reports,
	// so that the next tick finds all of them changed and writes them all.
	blank := func(ctx context.Context) error {
		tasks, err := ip.st.Tasks(ctx, project)
		if err != nil {
			return err
		}
		return ip.st.Update(ctx, func(tx *store.Tx) error {
			for _, tk := range tasks {
				if err := tx.SetTask(ctx, project, tk.ID, store.TaskPatch{Heartbeat: new("-")}); err != nil {
					return err
				}
			}
			return nil
		})
	}
	written := func(ctx context.Context, n *int) error {
		tasks, err := ip.st.Tasks(ctx, project)
		for _, tk := range tasks {
			if tk.Heartbeat != "-" {
				*n++
			}
		}
		return err
	}
	for i := 0; i < o.pick(3, 9); i++ {
		ts, err := measure()
		if err != nil {
			return nil, err
		}
		r.quiet = append(r.quiet, ts)
		if err := setup(blank); err != nil {
			return nil, err
		}
		if ts, err = measure(); err != nil {
			return nil, err
		}
		n := 0
		if err := setup(func(ctx context.Context) error { return written(ctx, &n) }); err != nil {
			return nil, err
		}
		r.beat = append(r.beat, ts)
		r.beatsWritten = append(r.beatsWritten, n)
	}
	// One tick as at the default poll_interval, for real: every wrapper has
	// beaten since the previous tick.
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(heartbeatWait):
	}
	var before []domain.Task
	if err := setup(func(ctx context.Context) (err error) { before, err = ip.st.Tasks(ctx, project); return err }); err != nil {
		return nil, err
	}
	ts, err := measure()
	if err != nil {
		return nil, err
	}
	r.natural = ts
	if err := setup(func(ctx context.Context) error {
		after, err := ip.st.Tasks(ctx, project)
		for j := range after {
			if j < len(before) && after[j].Heartbeat != before[j].Heartbeat {
				r.naturalWritten++
			}
		}
		return err
	}); err != nil {
		return nil, err
	}

	if stopProfile != nil {
		stopProfile()
		stopProfile = nil
	}

	// What the database calls of a tick cost on their own.
	for range 10 {
		start := time.Now()
		tasks, err := ip.st.Tasks(ctx, project)
		if err != nil {
			return nil, err
		}
		r.dbTasks = append(r.dbTasks, time.Since(start).Seconds())
		r.listSnapshots = len(tasks) > 0 && len(tasks[0].Snapshot) > 0
		start = time.Now()
		if _, err := ip.st.Attempts(ctx, project, ""); err != nil {
			return nil, err
		}
		r.dbRuns = append(r.dbRuns, time.Since(start).Seconds())
		if len(r.dbBeatTx) < 3 {
			start = time.Now()
			beats := make(map[string]string, len(tasks))
			for _, tk := range tasks {
				beats[tk.ID] = tk.Heartbeat + "."
			}
			err = ip.st.Update(ctx, func(tx *store.Tx) error { return tx.Beats(ctx, project, beats, time.Now()) })
			if err != nil {
				return nil, err
			}
			r.dbBeatTx = append(r.dbBeatTx, time.Since(start).Seconds())
		}
	}
	// The size of one node's status reply.
	if res, err := ip.trs["t1"].Exec(ctx, []string{filepath.Join(servers[0].WorkDir, ".bin", wrapperName(servers[0].WorkDir)), "status",
		"--root", servers[0].WorkDir, "--project", project}, nil); err == nil {
		r.statusBytes = len(res.Stdout)
	}
	ip.rec.take()
	return r, nil
}

// wrapperName finds the installed wrapper's file name under workDir/.bin.
func wrapperName(workDir string) string {
	m, _ := filepath.Glob(filepath.Join(workDir, ".bin", "dispatch-wrapper-*"))
	if len(m) == 0 {
		return "dispatch-wrapper"
	}
	return filepath.Base(m[len(m)-1])
}

func tickSection(o *options, rs []*tickResult) *section {
	sec := &section{title: "Tick cost: one poll of 1 to 20 nodes holding 1,000 running tasks"}
	var b strings.Builder
	fmt.Fprintf(&b, "The controller runs in the bench process (`controller.New` + `(*Controller).Tick`, the code `dispatch start` "+
		"runs) on a fresh SQLite database, with the transports of `sshnode.Open` decorated to count and time every call. For each "+
		"node count, %d tasks (`sleep 600`, real wrappers: one detached supervisor per node and launch, heartbeat every 10 s) are launched by "+
		"the controller itself, spread evenly (%d/N slots per node), until all run; then steady ticks are timed (they launch "+
		"nothing and change no status), alternating:\n\n"+
		"- **quiet tick**: right after the previous tick; few heartbeats changed in between;\n"+
		"- **heartbeat tick**: just before it, the bench sets every task's stored heartbeat to a value no node reports "+
		"(outside the timing, and left out of the profile's analysis by a pprof label), so the tick finds all %d changed and "+
		"writes them — what every tick does at the default poll_interval of 30 s, where every wrapper has beaten since the "+
		"last tick;\n"+
		"- and, as a check, one **natural heartbeat tick** %.1f s after the previous tick.\n\n"+
		"Medians (min–max) of %d quiet and %d heartbeat ticks. \"SSH round trips\" are the calls the tick made to nodes (each "+
		"an SSH session on the node's open connection); \"pull\" is from the first status call's start to the last one's end; "+
		"\"outside SSH\" is the rest of the tick (SQLite, decoding the replies, scheduling), where the controller waits on no "+
		"node. The 1,000 idle supervisors cost the machine about a tenth of a core (their heartbeats and timers), which adds "+
		"noise to every figure.\n\n",
		tickTasks, tickTasks, tickTasks, heartbeatWait.Seconds(), len(rs[0].quiet), len(rs[0].beat))
	tbl := &table{head: []string{"nodes", "tasks/node", "SSH round trips / tick", "quiet tick", "× 1 node", "heartbeat tick", "× 1 node",
		"natural heartbeat tick", "pull (heartbeat tick)", "slowest status call", "outside SSH (heartbeat tick)", "heartbeats written", "setup: launch 1,000"}}
	base := rs[0]
	var r1, r20 *tickResult
	for _, r := range rs {
		if r.nodes == 1 {
			r1 = r
		}
		if r.nodes == tickMaxNodes {
			r20 = r
		}
		calls := "–"
		if len(r.quiet) > 0 {
			calls = opsSummary(r.quiet[0].byOp)
		}
		tbl.add(strconv.Itoa(r.nodes), strconv.Itoa(tickTasks/r.nodes), calls,
			mm(walls(r.quiet)), fmtRatio(median(walls(r.quiet))/median(walls(base.quiet))),
			mm(walls(r.beat)), fmtRatio(median(walls(r.beat))/median(walls(base.beat))),
			fmt.Sprintf("%s (%d written)", fmtMS(r.natural.wall.Seconds()), r.naturalWritten),
			fmtMS(median(pick(r.beat, func(t tickStats) time.Duration { return t.pullSpan }))),
			fmtMS(median(pick(r.beat, func(t tickStats) time.Duration { return t.statusMax }))),
			fmtMS(median(pick(r.beat, func(t tickStats) time.Duration { return t.outside }))),
			writtenSummary(r.beatsWritten), fmt.Sprintf("%s in %d ticks", fmtS(r.setup.Seconds()), r.setupTicks))
	}
	b.WriteString(tbl.markdown())
	if r1 != nil && r20 != nil {
		qr := median(walls(r20.quiet)) / median(walls(r1.quiet))
		hr := median(walls(r20.beat)) / median(walls(r1.beat))
		sec.targets = append(sec.targets,
			target{name: "tick cost", want: "20-node tick ≤ 1.5× 1-node tick (1,000 tasks; heartbeat tick)",
				got: fmt.Sprintf("%s vs %s = %s", fmtMS(median(walls(r20.beat))), fmtMS(median(walls(r1.beat))), fmtRatio(hr)), met: hr <= 1.5},
			target{name: "tick cost", want: "20-node tick ≤ 1.5× 1-node tick (1,000 tasks; quiet tick)",
				got: fmt.Sprintf("%s vs %s = %s", fmtMS(median(walls(r20.quiet))), fmtMS(median(walls(r1.quiet))), fmtRatio(qr)), met: qr <= 1.5})
		tickWallHint = fmtMS(median(walls(r20.beat))) + " with 1,000 tasks on 20 nodes (tick scenario)"
		fmt.Fprintf(&b, "\nTarget: 20-node tick ≤ 1.5× 1-node tick — heartbeat tick %s (%s), quiet tick %s (%s).\n\n",
			verdict(hr <= 1.5), fmtRatio(hr), verdict(qr <= 1.5), fmtRatio(qr))

		fmt.Fprintf(&b, "One full poll of 20 nodes holding 1,000 tasks: **%s** (heartbeat tick; quiet: %s), **%d SSH round trips** "+
			"(one `wrapper status` per node), of which the pull took %s and the rest — SQLite, decoding %d status replies of "+
			"about %d KiB each, scheduling — %s.\n\n",
			fmtMS(median(walls(r20.beat))), fmtMS(median(walls(r20.quiet))), r20.beat[0].calls,
			fmtMS(median(pick(r20.beat, func(t tickStats) time.Duration { return t.pullSpan }))), r20.nodes, r20.statusBytes/1024,
			fmtMS(median(pick(r20.beat, func(t tickStats) time.Duration { return t.outside }))))
		db := &table{head: []string{"database call on the 20-node database (1,000 tasks, 1,000 runs)", "median of 10"}}
		what := "every column of 1,000 tasks but the snapshot"
		if r20.listSnapshots {
			what = "every column of 1,000 tasks, snapshots included"
		}
		db.add("`Store.Tasks(project)`: "+what, fmtMS(median(r20.dbTasks)))
		db.add("`Store.Runs(project, \"\")`: 1,000 runs", fmtMS(median(r20.dbRuns)))
		db.add("one `Store.Update` writing 1,000 heartbeats (`Tx.Beats`, one statement)", fmtMS(median(r20.dbBeatTx)))
		b.WriteString(db.markdown())
		fmt.Fprintf(&b, "\nA steady tick reads the project's tasks once (`Tx.Tasks` in `apply`, %s at these prices) and no "+
			"list of its runs (collection and the phase read only what is unfinished or unsettled); the heartbeat writes come on top.\n\n",
			fmtMS(median(r20.dbTasks)))
		if ps, err := analyseProfile(r20.profile); err == nil && r20.profile != "" {
			sec.findings = append(sec.findings, finding{"tick", tickFinding(r1, r20, ps, hr)})
		}
		if r20.profile != "" {
			nt := len(r20.quiet) + len(r20.beat)
			fmt.Fprintf(&b, "CPU profile of the bench process over the %d measured ticks of 20 nodes (`%s`); \"per tick\" divides by %d:\n\n",
				nt, rel(r20.profile), nt)
			b.WriteString(profileSummary(r20.profile, nt))
		}
		if r1.profile != "" {
			nt := len(r1.quiet) + len(r1.beat)
			fmt.Fprintf(&b, "\nThe same for 1 node holding the 1,000 tasks (`%s`), categories only:\n\n", rel(r1.profile))
			full := profileSummary(r1.profile, nt)
			if i := strings.Index(full, "\n\n"); i > 0 {
				full = full[:i+1]
			}
			b.WriteString(full)
		}
	}
	sec.body = b.String()
	return sec
}

// mm renders "median (min–max)" in milliseconds.
func mm(xs []float64) string {
	return fmt.Sprintf("%s (%s–%s)", fmtMS(median(xs)), fmtMS(minOf(xs)), fmtMS(maxOf(xs)))
}

func writtenSummary(ns []int) string {
	if len(ns) == 0 {
		return "–"
	}
	lo, hi := slices.Min(ns), slices.Max(ns)
	if lo == hi {
		return fmt.Sprintf("%d in each", lo)
	}
	return fmt.Sprintf("%d–%d", lo, hi)
}

// tickFinding says where a 20-node tick's time goes, from the measurements.
func tickFinding(r1, r20 *tickResult, ps *profStats, hr float64) string {
	pull := func(r *tickResult) string {
		return fmtMS(median(pick(r.beat, func(t tickStats) time.Duration { return t.pullSpan })))
	}
	var b strings.Builder
	sqlite := ps.share(ps.cat[catSQLite])
	fmt.Fprintf(&b, "**Tick cost.** A steady tick of 20 nodes holding 1,000 tasks takes %s (every heartbeat changed; %s the "+
		"1-node tick, target %s) with %d SSH round trips (one `wrapper status` per node: a full pull, which `Run` makes once per "+
		"poll interval, and a `Tick` outside `Run` every time; between full pulls a node's open status stream spares the call). The pull is %s of it and the "+
		"rest, %s, is the controller alone, where the CPU profile puts %.0f%% of the CPU in SQLite and row scanning "+
		"(`store.queryTasks` %.0f%% inclusive, `store.scanTask` %.0f%%) and %.0f%% in decoding the status replies.",
		fmtMS(median(walls(r20.beat))), fmtRatio(hr), map[bool]string{true: "met", false: "not met"}[hr <= 1.5], r20.beat[0].calls,
		pull(r20), fmtMS(median(pick(r20.beat, func(t tickStats) time.Duration { return t.outside }))),
		100*sqlite, 100*ps.share(ps.fn["store.queryTasks"]), 100*ps.share(ps.fn["store.scanTask"]),
		100*ps.share(ps.cat["JSON decoding of the nodes' status replies"]))
	if sqlite >= 0.3 {
		snap := "without the snapshot"
		if r20.listSnapshots {
			snap = "with every column, the `snapshot` BLOB included"
		}
		fmt.Fprintf(&b, " The tick reads what can move once, in `decide`'s transaction (`readSnapshot`: the live tasks, those "+
			"a failure may block, and counts kept by triggers, where reading every task would take %s %s), with its candidates and busy slots counted in SQL; `collectAll` reads only the finished runs not yet "+
			"collected (`Store.Uncollected`, on a partial index) and `advance` one count while any task is unsettled "+
			"(`Store.Settled`, a count kept by triggers); the heartbeats of a project are written in one statement (`Tx.Beats`: %s "+
			"for 1,000).",
			fmtMS(median(r20.dbTasks)), snap, fmtMS(median(r20.dbBeatTx)))
	}
	fmt.Fprintf(&b, " The pull grows from %s (1 node) to %s (20 nodes) because the 20 sshd and wrapper processes share this "+
		"machine's %d cores; on separate machines it is the slowest node's status call. `max_parallel_ssh` (default 16) "+
		"caps how many status calls run at once.", pull(r1), pull(r20), runtime.NumCPU())
	return b.String()
}
