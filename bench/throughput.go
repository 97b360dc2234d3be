package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dispatch-tool/dispatch/controller"
	"github.com/dispatch-tool/dispatch/home"
	"github.com/dispatch-tool/dispatch/internal/sshdtest"
	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/nodes/sshnode"
)

const (
	tpTasks = 200
	tpNodes = 4
	tpSlots = 8
)

type throughput struct {
	o       *options
	t       *tb
	c       *sshdtest.Client
	servers []*sshdtest.Server
	sshCfg  string
	runs    int
	refused int
	// launches of the session-limit check left uncertain, and why
	sessionsUncertain int
	sessionsWhy       string
	// cpu is user+sys of each warm `dispatch start` at the default poll
	// interval, in seconds.
	cpu []float64
	// machine is the CPU every process of the machine used (controller,
	// sshd, wrappers, bwrap, tools) during each warm default `dispatch
	// start`, and floorMachine during each run of the SSH floor, in
	// seconds (/proc/stat; nil where it cannot be read).
	machine, floorMachine []float64
	// sandbox is the nodes' sandbox: setting for the next dispatch runs
	// ("" leaves it out: auto).
	sandbox string
}

func benchThroughput(ctx context.Context, o *options, t *tb) (*section, error) {
	c := sshdtest.NewClient(t)
	tp := &throughput{o: o, t: t, c: c, runs: o.pick(2, 4)}
	tp.servers = startServers(t, c, "n", tpNodes, nodeHomeSetting(t))
	tp.sshCfg = tp.writeSSHConfig()

	sec := &section{title: "Throughput: 200 no-op tasks over 4 nodes × 8 slots"}
	coldD, err := tp.dispatch(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("dispatch (cold): %w", err)
	}
	tp.cpu = nil // the cold run installs the wrappers: not a no-op batch
	cmOpts, stopMasters, err := tp.controlMasters(ctx)
	if err != nil {
		return nil, err
	}
	defer stopMasters()
	var dDef, dShort, dNoSandbox, par, parKex, parCM, floor []float64
	for i := 0; i < tp.runs; i++ {
		d, err := tp.dispatch(ctx, "")
		if err != nil {
			return nil, err
		}
		dDef = append(dDef, d)
		f, err := tp.floor(ctx, cmOpts)
		if err != nil {
			return nil, err
		}
		floor = append(floor, f)
		p, err := tp.parallel(ctx, nil)
		if err != nil {
			return nil, err
		}
		par = append(par, p)
		p, err = tp.parallel(ctx, cmOpts)
		if err != nil {
			return nil, err
		}
		parCM = append(parCM, p)
		if i < 2 {
			d, err = tp.dispatch(ctx, "200ms")
			if err != nil {
				return nil, err
			}
			dShort = append(dShort, d)
			tp.sandbox = "off"
			d, err = tp.dispatch(ctx, "200ms")
			tp.sandbox = ""
			if err != nil {
				return nil, err
			}
			dNoSandbox = append(dNoSandbox, d)
			p, err = tp.parallel(ctx, []string{"-o", "KexAlgorithms=curve25519-sha256"})
			if err != nil {
				return nil, err
			}
			parKex = append(parKex, p)
		}
		fmt.Printf("bench throughput: run %d: dispatch %.2fs, SSH floor %.2fs, parallel %.2fs, parallel with ControlMaster %.2fs\n", i+1, dDef[i], floor[i], par[i], parCM[i])
	}
	walls, err := tp.consecutive(ctx)
	if err != nil {
		return nil, err
	}
	floorRatio := median(dDef) / median(floor)
	floorGot := fmt.Sprintf("%s vs %s = %s", fmtS(median(dDef)), fmtS(median(floor)), fmtRatio(floorRatio))
	sec.targets = append(sec.targets, target{goal: goalFloor,
		name: "SSH floor", want: "dispatch ≤ 1.0× the SSH floor: one `ssh node true` per task, 32 at a time, over ControlMaster connections opened beforehand",
		got: floorGot, met: floorRatio <= 1.0})
	sec.targets = append(sec.targets, target{goal: goalFloorStretch, name: "SSH floor", want: "stretch: dispatch ≤ 0.5× the SSH floor", got: floorGot, met: floorRatio <= 0.5})
	perTask := median(tp.cpu) / tpTasks
	sec.targets = append(sec.targets, target{goal: goalCPU,
		name: "controller CPU", want: "≤ 3 ms of controller CPU per no-op task over sshd (user+sys of `dispatch start`)",
		got: fmt.Sprintf("%s over %d tasks = %s", fmtS(median(tp.cpu)), tpTasks, fmtMS(perTask)), met: perTask <= 0.003})
	sec.targets = append(sec.targets, stallTarget(walls))
	ratio := median(dDef) / median(parCM)
	sec.targets = append(sec.targets, target{
		name: "throughput", want: "dispatch ≤ 0.5× GNU parallel reusing one ControlMaster connection per node (defaults but slots)",
		got: fmt.Sprintf("%s vs %s = %s", fmtS(median(dDef)), fmtS(median(parCM)), fmtRatio(ratio)), met: ratio <= 0.5})

	var b strings.Builder
	fmt.Fprintf(&b, "Each run: %d tasks whose script is `true`, %d sshd nodes on 127.0.0.1, 8 slots each. Wall time from "+
		"starting the command to its exit, median of %d runs (min–max). Runs of the two tools alternate. "+
		"dispatch's first (\"cold\") run is not in the median: it installs the wrapper on the four nodes; later runs use a "+
		"fresh home and project each, on the same nodes.\n\n",
		tpTasks, tpNodes, tp.runs)
	base := median(parCM)
	tbl := &table{head: []string{"command", "wall time", "vs GNU parallel with ControlMaster"}}
	tbl.add("`dispatch start` (nodes.yaml: only the slots; poll_interval 30s)", spread(dDef, fmtS), fmtRatio(ratio))
	tbl.add("`parallel --will-cite --ssh 'ssh -F ssh_config -o ControlPath=… -o ControlMaster=no' --sshlogin 8/n1,8/n2,8/n3,8/n4 -N0 true ::: $(seq 200)`, "+
		"one `ssh -o ControlMaster=yes -o ControlPersist=10m -N -f` per node opened beforehand", spread(parCM, fmtS), "1.00×")
	tbl.add(fmt.Sprintf("the SSH floor: `xargs -P%d -I{} ssh -F ssh_config -o ControlPath=… -o ControlMaster=no {} true` over the "+
		"node names n1…n4 in turn, %d lines, the same ControlMaster connections", tpNodes*tpSlots, tpTasks), spread(floor, fmtS), fmtRatio(median(floor)/base))
	tbl.add("context: the same `parallel` without ControlMaster (a new connection per job)", spread(par, fmtS), fmtRatio(median(par)/base))
	tbl.add("context: `dispatch start` with poll_interval 200ms", spread(dShort, fmtS), fmtRatio(median(dShort)/base))
	tbl.add("context: the same with `sandbox: off` on every node (no bubblewrap around each task)", spread(dNoSandbox, fmtS), fmtRatio(median(dNoSandbox)/base))
	tbl.add("context: `parallel --ssh 'ssh -o KexAlgorithms=curve25519-sha256'` (the key exchange dispatch's Go client negotiates)", spread(parKex, fmtS), fmtRatio(median(parKex)/base))
	tbl.add("cold first run of dispatch (installs the wrapper)", fmtS(coldD), fmtRatio(coldD/base))
	b.WriteString(tbl.markdown())
	fmt.Fprintf(&b, "\nTarget: dispatch ≤ 0.5× GNU parallel reusing one connection per node — %s (%s).\n", verdict(ratio <= 0.5), fmtRatio(ratio))
	fmt.Fprintf(&b, "Target: dispatch ≤ 1.0× the SSH floor — %s, stretch 0.5× — %s (%s).\n", verdict(floorRatio <= 1.0), verdict(floorRatio <= 0.5), fmtRatio(floorRatio))
	fmt.Fprintf(&b, "Target: ≤ 3 ms of controller CPU per no-op task over sshd — %s (user+sys of `dispatch start` %s, median of %d runs = %s a task).\n\n",
		verdict(perTask <= 0.003), spread(tp.cpu, fmtS), len(tp.cpu), fmtMS(perTask))
	b.WriteString(tp.machineText())
	fmt.Fprintf(&b, "Stalls: %d more `dispatch start` runs of the same batch, one after the other (a fresh home and project each), took %s; "+
		"target: none more than %.0f× their median — %s. The CPU figure above counts these runs too.\n\n",
		len(walls), fmtList(walls), stallLimit, verdict(stallTarget(walls).met))
	b.WriteString("The ssh_config given to GNU parallel names the four nodes (HostName, Port, User) and sets only what a " +
		"non-interactive login to them needs: the same key (IdentityFile, IdentitiesOnly), the same known_hosts " +
		"(UserKnownHostsFile, StrictHostKeyChecking yes), BatchMode yes and LogLevel ERROR. dispatch's nodes.yaml " +
		"gives `ssh: root@127.0.0.1:PORT`, `slots: 8` and the work_dir, nothing else.\n\n")
	b.WriteString(`What each side does. GNU parallel opens a new SSH connection per job (key exchange, public-key
login, a session running ` + "`true`" + `), at most 8 at a time per node, and relays the output; it records nothing.
` + "`dispatch start`" + ` parses the 200 specs and stores them in SQLite (WAL), connects once per node (one
multiplexed connection, SFTP on it), checks the wrapper, keeps one status stream per node (` + "`wrapper watch`" + `, which
reports each finished task at once), and per node per tick makes one ` + "`wrapper run`" + ` call with every new attempt's spec
and launch.json on stdin (the wrapper detaches one supervisor for the call's attempts that runs each ` + "`/bin/sh spec.md`" + `
in a bubblewrap sandbox, the nodes' default ` + "`sandbox: auto`" + `, and writes its status.json), pulls the status of every node once per tick, records every transition and event in the database,
collects task.log and output/ back in one ` + "`wrapper collect`" + ` stream per node per tick with a manifest, and writes runs/<project>/report.md at the end.

`)
	b.WriteString("What one remote command costs here — GNU parallel pays a new connection per job, dispatch one connection per node:\n\n")
	b.WriteString(tp.commandCosts(ctx))
	b.WriteString("\nThe bench's nodes give each SSH session an empty $HOME (sshd_config `SetEnv HOME=…`), so the shell sshd starts " +
		"for a command reads no ~/.bashrc: this machine's root ~/.bashrc runs `pyenv init`, which the last ssh row shows. " +
		"Both tools run every remote command through that shell.\n\n")
	if refused, launched, why, err := tp.sessionLimit(ctx); err != nil {
		b.WriteString("(session-limit check failed: " + err.Error() + ")\n\n")
	} else {
		fmt.Fprintf(&b, "**Launch burst against a stock sshd.** One node with 16 slots whose sshd keeps OpenSSH's default "+
			"`MaxSessions 10`, 16 tasks, one tick: %d launched, %d refused by the node", launched, refused)
		if refused > 0 {
			b.WriteString(" and failed with error_class start (each uses up a retry)")
			if why != "" {
				fmt.Fprintf(&b, ": `%s`", why)
			}
			b.WriteString(". `launchAll` opens one SSH session per claim at once, plus the SFTP session.")
		} else if launched+refused < 16 {
			fmt.Fprintf(&b, "; %d launches were left uncertain (the next pull decides; a launch that never started is "+
				"requeued after the claim grace of 30 s)", tp.sessionsUncertain)
			if tp.sessionsWhy != "" {
				fmt.Fprintf(&b, ": `%s`", tp.sessionsWhy)
			}
			b.WriteString(".")
		} else {
			b.WriteString(": the transport queues commands beyond what the connection allows.")
		}
		b.WriteString(" The bench's other nodes raise MaxSessions, so that no node's limit shapes the figures.\n\n")
		tp.refused = refused
	}
	tl, sum, err := tp.timeline(ctx)
	if err != nil {
		b.WriteString("(in-process timeline failed: " + err.Error() + ")\n")
	} else {
		b.WriteString(tl)
		sec.findings = append(sec.findings, finding{"throughput", throughputFinding(median(dDef), median(parCM), median(dShort), sum)})
	}
	switch {
	case tp.refused > 0:
		sec.findings = append(sec.findings, finding{"sessions", fmt.Sprintf("**Launch bursts exceed OpenSSH's default "+
			"MaxSessions (not a speed problem; found while benchmarking).** `controller.(*Controller).launchAll` starts every "+
			"claim of a node at once, one SSH session each (`sshnode.(*SSH).Exec`), on top of the SFTP session; a stock sshd "+
			"allows 10 sessions per connection. A node with 16 slots refused %d of 16 launches in one tick, and each refusal "+
			"failed its task with error_class start, using up a retry. **Change**: bound concurrent sessions per connection "+
			"in `sshnode.SSH`, and retry a session open that the server refused (`*ssh.OpenChannelError`) after a short pause.",
			tp.refused)})
	case tp.sessionsUncertain > 0:
		sec.findings = append(sec.findings, finding{"sessions", fmt.Sprintf("**A stock sshd still refuses some launches "+
			"(not a speed problem; found while benchmarking).** With `sshnode.SSH` running at most 8 commands at once per "+
			"connection, a node with 16 slots and OpenSSH's default `MaxSessions 10` still refused %d of 16 launches in one "+
			"tick (\"the node refused a new SSH session\"): sshd releases a closed session's slot a little after the client "+
			"sees it close, so a session opened at once can still be refused. Those launches are left uncertain and, never "+
			"started, wait out the 30 s claim grace before they are launched again. **Change**: in `sshnode.(*SSH).Exec`, when "+
			"`NewSession` fails with `*ssh.OpenChannelError`, retry it a few times after 10–50 ms instead of returning.",
			tp.sessionsUncertain)})
	}
	sec.body = b.String()
	return sec, nil
}

// controlMasters opens one ControlMaster connection per node, as one would
// run GNU parallel well, and returns the ssh options that reuse them and a
// function that closes them.
func (tp *throughput) controlMasters(ctx context.Context) ([]string, func(), error) {
	// A unix socket path must be short: not under the test's temp dir.
	dir, err := os.MkdirTemp("/tmp", "cm")
	if err != nil {
		return nil, nil, err
	}
	path := filepath.Join(dir, "%n")
	stop := func() {
		for i := range tp.servers {
			_ = exec.Command("ssh", "-F", tp.sshCfg, "-o", "ControlPath="+path, "-O", "exit", fmt.Sprintf("n%d", i+1)).Run()
		}
		_ = os.RemoveAll(dir)
	}
	for i := range tp.servers {
		cmd := exec.CommandContext(ctx, "ssh", "-F", tp.sshCfg, "-o", "ControlMaster=yes", "-o", "ControlPath="+path,
			"-o", "ControlPersist=10m", "-N", "-f", fmt.Sprintf("n%d", i+1))
		cmd.Env = dispatchEnv(tp.c)
		if out, err := cmd.CombinedOutput(); err != nil {
			stop()
			return nil, nil, fmt.Errorf("open a ControlMaster to n%d: %v\n%s", i+1, err, out)
		}
	}
	return []string{"-o", "ControlPath=" + path, "-o", "ControlMaster=no"}, stop, nil
}

// writeSSHConfig gives GNU parallel's ssh the same nodes, key and
// known_hosts as dispatch; nothing else is set.
func (tp *throughput) writeSSHConfig() string {
	var b strings.Builder
	for i, s := range tp.servers {
		fmt.Fprintf(&b, "Host n%d\n  HostName 127.0.0.1\n  Port %d\n  User %s\n  IdentityFile %s\n  IdentitiesOnly yes\n"+
			"  UserKnownHostsFile %s\n  StrictHostKeyChecking yes\n  BatchMode yes\n  LogLevel ERROR\n",
			i+1, s.Port, tp.c.User, tp.c.KeyFile, tp.c.KnownHosts)
	}
	path := filepath.Join(tp.t.TempDir(), "ssh_config")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		tp.t.Fatalf("%v", err)
	}
	return path
}

// parallel runs GNU parallel on the same nodes; sshOpts go on its ssh
// command line.
// floor times the SSH floor: one `ssh node true` per task, as many at once
// as dispatch has slots, over the ControlMaster connections of sshOpts —
// what running the batch costs with nothing recorded.
func (tp *throughput) floor(ctx context.Context, sshOpts []string) (float64, error) {
	var hosts strings.Builder
	for i := range tpTasks {
		fmt.Fprintf(&hosts, "n%d\n", i%tpNodes+1)
	}
	args := append([]string{"-P", strconv.Itoa(tpNodes * tpSlots), "-I{}", "ssh", "-F", tp.sshCfg}, sshOpts...)
	args = append(args, "{}", "true")
	cctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(cctx, "xargs", args...)
	cmd.Env = dispatchEnv(tp.c)
	cmd.Stdin = strings.NewReader(hosts.String())
	cpu0, cpuErr := machineCPU()
	start := time.Now()
	out, err := cmd.CombinedOutput()
	wall := time.Since(start)
	if err != nil {
		return 0, fmt.Errorf("xargs ssh (the SSH floor): %v\n%s", err, lastLines(string(out), 20))
	}
	if cpu1, err := machineCPU(); err == nil && cpuErr == nil {
		tp.floorMachine = append(tp.floorMachine, cpu1-cpu0)
	}
	return wall.Seconds(), nil
}

func (tp *throughput) parallel(ctx context.Context, sshOpts []string) (float64, error) {
	logins := make([]string, tpNodes)
	for i := range logins {
		logins[i] = fmt.Sprintf("%d/n%d", tpSlots, i+1)
	}
	sshCmd := strings.Join(append([]string{"ssh", "-F", tp.sshCfg}, sshOpts...), " ")
	args := []string{"--will-cite", "--ssh", sshCmd, "--sshlogin", strings.Join(logins, ",")}
	args = append(args, "-N0", "true", ":::")
	for i := 1; i <= tpTasks; i++ {
		args = append(args, strconv.Itoa(i))
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(cctx, "parallel", args...)
	cmd.Env = append(dispatchEnv(tp.c), "PARALLEL_HOME="+filepath.Join(tp.c.Home, ".parallel"))
	start := time.Now()
	out, err := cmd.CombinedOutput()
	wall := time.Since(start)
	if err != nil {
		return 0, fmt.Errorf("parallel: %v\n%s", err, lastLines(string(out), 20))
	}
	return wall.Seconds(), nil
}

var tpSeq int

// dispatch runs `dispatch start` on a fresh home with the 200 tasks; poll
// "" keeps every controller default.
func (tp *throughput) dispatch(ctx context.Context, poll string) (float64, error) {
	tpSeq++
	homeDir := tp.t.TempDir()
	project := fmt.Sprintf("tp%02d", tpSeq) // the nodes' work_dirs are reused: one project per run
	ctl := ""
	if poll != "" {
		ctl = "  poll_interval: " + poll + "\n"
	}
	var defs []nodeDef
	for i, s := range tp.servers {
		defs = append(defs, nodeDef{name: fmt.Sprintf("n%d", i+1), server: s, slots: tpSlots, sandbox: tp.sandbox})
	}
	if err := writeHome(homeDir, nodesYAML(tp.c, ctl, defs), project, tpTasks, func(int) string { return "true\n" }); err != nil {
		return 0, err
	}
	cpu0, cpuErr := machineCPU()
	cctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(cctx, tp.o.dispatch, "--home", homeDir, "start", project)
	cmd.Env = dispatchEnv(tp.c)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	wall := time.Since(start)
	if err != nil {
		return 0, fmt.Errorf("dispatch start %s: %v\n%s", project, err, lastLines(out.String(), 20))
	}
	counts, err := taskCounts(ctx, home.DBPath(homeDir), project)
	if err != nil {
		return 0, err
	}
	if counts["completed"] != tpTasks {
		return 0, fmt.Errorf("dispatch start %s: %v tasks by status, want %d completed", project, counts, tpTasks)
	}
	if poll == "" && tp.sandbox == "" {
		// Over sshd the wrappers run under the nodes' sshd: the process's
		// own user+sys is the controller's CPU.
		tp.cpu = append(tp.cpu, (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds())
		if cpu1, err := machineCPU(); err == nil && cpuErr == nil {
			tp.machine = append(tp.machine, cpu1-cpu0)
		}
	}
	return wall.Seconds(), nil
}

// timeline runs the same batch with the controller in this process, on the
// code `dispatch start` runs, recording every tick and every call to a node,
// under the CPU profiler.
// tlSummary is what the in-process batch says about where the time goes.
type tlSummary struct {
	total, idle, busy, pull, launch, collect, outside, cpu time.Duration
	ticks, activeTicks                                     int
	gap                                                    time.Duration // median pause after a tick that launched or changed something
	opMedian                                               map[string]time.Duration
	profile                                                *profStats
}

// timeline runs the same batch with the controller in this process, on the
// code `dispatch start` runs, recording every tick and every call to a node,
// under the CPU profiler. A tick is taken to start with its first call to a
// node (before it, the tick only lists the active projects).
func (tp *throughput) timeline(ctx context.Context) (string, *tlSummary, error) {
	tpSeq++
	home := tp.t.TempDir()
	project := fmt.Sprintf("tp%02d", tpSeq)
	var defs []nodeDef
	for i, s := range tp.servers {
		defs = append(defs, nodeDef{name: fmt.Sprintf("n%d", i+1), server: s, slots: tpSlots})
	}
	if err := writeHome(home, nodesYAML(tp.c, "", defs), project, tpTasks, func(int) string { return "true\n" }); err != nil {
		return "", nil, err
	}
	t0 := time.Now()
	ip, err := newInproc(ctx, tp.c, home, project)
	if err != nil {
		return "", nil, err
	}
	defer ip.close()
	setup := time.Since(t0)
	ctl := ip.controller(nil)
	poll := ip.cfg.Controller.PollInterval
	prof := filepath.Join(tp.o.outDir, "throughput.cpu.pprof")
	stop, err := cpuProfile(prof)
	if err != nil {
		return "", nil, err
	}
	type tick struct {
		start, end time.Time
		res        controller.TickResult
		st         tickStats
	}
	var ticks []tick
	var all []call
	runStart := time.Now()
	err = ctl.Run(ctx, 0, func(res controller.TickResult) {
		now := time.Now()
		calls := ip.rec.take()
		all = append(all, calls...)
		start := now
		for _, c := range calls {
			if c.start.Before(start) {
				start = c.start
			}
		}
		tk := tick{start: start, end: now, res: res}
		tk.st = analyseTick(tk.start, tk.end, calls)
		ticks = append(ticks, tk)
	})
	total := time.Since(runStart)
	stop()
	if err != nil {
		return "", nil, err
	}
	if c := ip.statusCounts(ctx); c["completed"] != tpTasks {
		return "", nil, fmt.Errorf("in-process run: %v", c)
	}
	sum := &tlSummary{total: total, ticks: len(ticks), opMedian: map[string]time.Duration{}}
	calls := map[string]int{}
	var gaps []float64
	tbl := &table{head: []string{"tick", "starts at", "took", "launched", "status changes", "pull", "launch", "collect", "outside SSH (DB, scheduling)", "calls to nodes"}}
	for i, tk := range ticks {
		sum.busy += tk.st.wall
		sum.pull += tk.st.phases["pull"]
		sum.launch += tk.st.phases["launch"]
		sum.collect += tk.st.phases["collect"]
		sum.outside += tk.st.outside
		for k, v := range tk.st.byOp {
			calls[k] += v
		}
		if i+1 < len(ticks) && (tk.res.Launched > 0 || tk.res.Changed > 0) {
			sum.activeTicks++
			gaps = append(gaps, ticks[i+1].start.Sub(tk.end).Seconds())
		}
		tbl.add(strconv.Itoa(i+1), fmtS(tk.start.Sub(runStart).Seconds()), fmtMS(tk.st.wall.Seconds()), strconv.Itoa(tk.res.Launched),
			strconv.Itoa(tk.res.Changed), fmtMS(tk.st.phases["pull"].Seconds()), fmtMS(tk.st.phases["launch"].Seconds()),
			fmtMS(tk.st.phases["collect"].Seconds()), fmtMS(tk.st.outside.Seconds()), strconv.Itoa(tk.st.calls))
	}
	sum.idle = total - sum.busy
	sum.gap = time.Duration(median(gaps) * float64(time.Second))
	byOp := map[string][]float64{}
	for _, c := range all {
		byOp[c.op] = append(byOp[c.op], c.end.Sub(c.start).Seconds())
	}
	ops := &table{head: []string{"call to a node", "count", "median", "90th percentile"}}
	for _, op := range sortedKeys(byOp) {
		xs := byOp[op]
		sum.opMedian[op] = time.Duration(median(xs) * float64(time.Second))
		ops.add("`"+op+"`", strconv.Itoa(len(xs)), fmtMS(median(xs)), fmtMS(percentile(xs, 0.9)))
	}
	if ps, err := analyseProfile(prof); err == nil {
		sum.cpu = ps.total
		sum.profile = ps
	}
	var b strings.Builder
	b.WriteString("### Where dispatch's time goes in this batch\n\n")
	fmt.Fprintf(&b, "The same batch with the controller in the bench process (`controller.New` + `(*Controller).Run`, as `dispatch start` "+
		"calls them, default poll_interval %s), every call to a node timed by a decorating `nodes.Transport`, under the CPU "+
		"profiler. Setup before the loop (load specs, add the project to SQLite): %s. The loop took %s in %d ticks: "+
		"**%s (%.0f%%) between ticks** — `Run`'s pause after a tick that launched or changed something was %s (median) — "+
		"and %s in ticks: pull %s, launch %s, collect %s, outside SSH (SQLite, scheduling) %s. A tick is counted from its "+
		"first call to a node.\n\n",
		poll, fmtS(setup.Seconds()), fmtS(total.Seconds()), len(ticks), fmtS(sum.idle.Seconds()), 100*sum.idle.Seconds()/total.Seconds(),
		fmtMS(sum.gap.Seconds()), fmtS(sum.busy.Seconds()), fmtS(sum.pull.Seconds()), fmtS(sum.launch.Seconds()),
		fmtS(sum.collect.Seconds()), fmtS(sum.outside.Seconds()))
	b.WriteString(tbl.markdown())
	b.WriteString("\nEvery call to a node during the batch (a node's launches of a tick are one `exec wrapper run`; " +
		"a node's collections of a tick are one `exec wrapper collect`, a stream of their task.logs and output/s; the status streams are not timed):\n\n")
	b.WriteString(ops.markdown())
	fmt.Fprintf(&b, "\nCPU profile of the bench process during the loop (`%s`):\n\n", rel(prof))
	b.WriteString(profileSummary(prof, 0))
	return b.String(), sum, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	i := int(math.Ceil(p*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

func rel(p string) string {
	if wd, err := os.Getwd(); err == nil {
		if r, err := filepath.Rel(wd, p); err == nil && !strings.HasPrefix(r, "..") {
			return r
		}
	}
	return p
}

// commandCosts measures what one remote command costs on these nodes: a
// new OpenSSH connection per command (GNU parallel) with OpenSSH's default
// key exchange and with curve25519, with and without the machine's own
// login shell startup, and one more session on dispatch's open connection.
func (tp *throughput) commandCosts(ctx context.Context) string {
	raw := tp.c.StartServer(tp.t, "raw") // no SetEnv HOME: the shell reads root's ~/.bashrc
	tp.c.Trust(tp.t, raw)
	cfg := filepath.Join(tp.t.TempDir(), "ssh_config")
	text, _ := os.ReadFile(tp.sshCfg)
	text = append(text, fmt.Sprintf("Host raw\n  HostName 127.0.0.1\n  Port %d\n  User %s\n  IdentityFile %s\n  IdentitiesOnly yes\n"+
		"  UserKnownHostsFile %s\n  StrictHostKeyChecking yes\n  BatchMode yes\n  LogLevel ERROR\n",
		raw.Port, tp.c.User, tp.c.KeyFile, tp.c.KnownHosts)...)
	if err := os.WriteFile(cfg, text, 0o600); err != nil {
		return "(" + err.Error() + ")\n"
	}
	const reps = 5
	sshTrue := func(host string, opts ...string) string {
		var walls, cpus []float64
		for range reps {
			args := append([]string{"-F", cfg}, opts...)
			cmd := exec.CommandContext(ctx, "ssh", append(args, host, "true")...)
			start := time.Now()
			if out, err := cmd.CombinedOutput(); err != nil {
				return fmt.Sprintf("failed: %v %s", err, strings.TrimSpace(string(out)))
			}
			walls = append(walls, time.Since(start).Seconds())
			cpus = append(cpus, (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds())
		}
		return fmt.Sprintf("%s | %s", fmtMS(median(walls)), fmtMS(median(cpus)))
	}
	tbl := &table{head: []string{"one remote `true`", "wall (median of 5)", "CPU of the ssh client"}}
	tbl.add("`ssh n1 true`: new connection, OpenSSH default key exchange (sntrup761x25519-sha512), bench nodes", sshTrue("n1"))
	tbl.add("same with `-o KexAlgorithms=curve25519-sha256`", sshTrue("n1", "-o", "KexAlgorithms=curve25519-sha256"))
	tbl.add("same, default key exchange, on a node whose shell reads the machine's root ~/.bashrc", sshTrue("raw"))

	tr, err := openTransport(tp.c, tp.servers[0])
	if err == nil {
		defer tr.Close()
		start := time.Now()
		_, err = tr.Exec(ctx, []string{"true"}, nil)
		connect := time.Since(start)
		var walls []float64
		for range 20 {
			if err != nil {
				break
			}
			start := time.Now()
			_, err = tr.Exec(ctx, []string{"true"}, nil)
			walls = append(walls, time.Since(start).Seconds())
		}
		if err == nil {
			tbl.add("dispatch's transport (x/crypto/ssh): first `Exec` (connects: curve25519, public key)", fmtMS(connect.Seconds())+" | (in process)")
			tbl.add("dispatch's transport: one more `Exec` on the open connection (median of 20)", fmtMS(median(walls))+" | (in process)")
		}
	}
	if err != nil {
		tbl.add("dispatch's transport", "failed: "+err.Error()+" | ")
	}
	return tbl.markdown()
}

// openTransport opens dispatch's SSH transport to s as the bench's client.
func openTransport(c *sshdtest.Client, s *sshdtest.Server) (nodes.Transport, error) {
	cfg, err := nodes.Parse("bench-nodes.yaml", []byte(fmt.Sprintf("nodes:\n  - name: x\n    ssh: %s@127.0.0.1:%d\n", c.User, s.Port)))
	if err != nil {
		return nil, err
	}
	return sshnode.Open(cfg, cfg.Nodes[0], sshnode.Env{Home: c.Home, User: c.User})
}

// sessionLimit launches 16 tasks on one node with 16 slots whose sshd has
// OpenSSH's default MaxSessions (10), in one tick, and reports how many
// launches the node refused. The bench's other nodes raise MaxSessions.
func (tp *throughput) sessionLimit(ctx context.Context) (refused, launched int, firstErr string, err error) {
	s := tp.c.StartServerWith(tp.t, "maxsessions10", nodeHomeSetting(tp.t), "MaxSessions 10")
	tp.c.Trust(tp.t, s)
	home := tp.t.TempDir()
	const n = 16
	yaml := nodesYAML(tp.c, "", []nodeDef{{name: "big", server: s, slots: n}})
	if err := writeHome(home, yaml, "sessions", n, func(int) string { return "sleep 2\n" }); err != nil {
		return 0, 0, "", err
	}
	ip, err := newInproc(ctx, tp.c, home, "sessions")
	if err != nil {
		return 0, 0, "", err
	}
	defer ip.close()
	defer killTasks(s.WorkDir, "sessions")
	res, err := ip.controller(nil).Tick(ctx)
	if err != nil {
		return 0, 0, "", err
	}
	runs, err := ip.st.Attempts(ctx, "sessions", "")
	if err != nil {
		return 0, 0, "", err
	}
	if evs, err := ip.st.Events(ctx, "sessions", 0, 0); err == nil {
		for _, ev := range evs {
			if ev.Kind == "warning" && strings.Contains(ev.Message, "launch interrupted") {
				tp.sessionsUncertain++
				if tp.sessionsWhy == "" {
					tp.sessionsWhy = ev.Message
				}
			}
		}
	}
	for _, r := range runs {
		if r.ErrorClass == "start" {
			refused++
			if firstErr == "" {
				firstErr = r.Error
			}
		}
	}
	return refused, res.Launched, firstErr, nil
}

// throughputFinding says where the batch's time goes and what would cut it,
// from what the in-process run measured.
func throughputFinding(dispatchWall, parallelWall, shortWall float64, sum *tlSummary) string {
	var b strings.Builder
	ratio := dispatchWall / parallelWall
	share := func(d time.Duration) float64 { return 100 * d.Seconds() / sum.total.Seconds() }
	fmt.Fprintf(&b, "**Throughput.** dispatch runs the 200 no-op tasks in %s against %s for GNU parallel reusing one "+
		"ControlMaster connection per node (%s; target %s). "+
		"In the in-process run of the same batch (%s, %d ticks) the time splits into: between ticks %s (%.0f%%; `Run` "+
		"paused %s after each of the %d ticks that launched or changed something, or woke at once on a node's stream), "+
		"launching %s (%.0f%%), collecting %s (%.0f%%), pulling %s (%.0f%%), and SQLite and scheduling outside SSH %s "+
		"(%.0f%%); the controller used %s of CPU in all. With poll_interval 200ms the binary takes %s.",
		fmtS(dispatchWall), fmtS(parallelWall), fmtRatio(ratio), map[bool]string{true: "met", false: "not met"}[ratio <= 0.5],
		fmtS(sum.total.Seconds()), sum.ticks, fmtS(sum.idle.Seconds()), share(sum.idle), fmtMS(sum.gap.Seconds()), sum.activeTicks,
		fmtS(sum.launch.Seconds()), share(sum.launch), fmtS(sum.collect.Seconds()), share(sum.collect),
		fmtS(sum.pull.Seconds()), share(sum.pull), fmtS(sum.outside.Seconds()), share(sum.outside), fmtS(sum.cpu.Seconds()), fmtS(shortWall))
	op := func(name string) string { return fmtMS(sum.opMedian[name].Seconds()) }
	if sum.launch >= sum.total/10 {
		fmt.Fprintf(&b, " **Launching** is one launch document per node per tick, over the node's held `wrapper run --serve` conversation (%s median for up to 8 attempts), "+
			"which takes each attempt's lock, writes its spec and launch.json, forks one detached supervisor for the node's attempts and "+
			"replies once that supervisor holds the locks (it does not wait for the tools to start): on this machine the "+
			"supervisors, the tools, their sandboxes and the four sshd share two cores.", op("exec wrapper run"))
	}
	if sum.collect >= sum.total/10 {
		fmt.Fprintf(&b, " **Collecting** is one request per node per tick over the node's held `wrapper collect --serve` conversation (%s median), a stream of the finished "+
			"attempts' task.logs and output/s, and one transaction per tick for what it collected.",
			op("exec wrapper collect"))
	}
	return b.String()
}

// machineText says what the machine's CPU did in the runs: on this
// machine the nodes, their sshd and the controller share the cores, so a
// batch's wall time is bounded below by its machine CPU over the cores.
func (tp *throughput) machineText() string {
	if len(tp.machine) == 0 || len(tp.floorMachine) == 0 {
		return ""
	}
	d, f := median(tp.machine)/tpTasks, median(tp.floorMachine)/tpTasks
	ctl := median(tp.cpu) / tpTasks
	return fmt.Sprintf("Machine CPU (every process: /proc/stat over the run, the bench's own idle waiting aside): "+
		"`dispatch start` %s a task (of which the controller %s; the rest is the nodes' sshd, the `wrapper run`/`collect`/`watch` "+
		"processes, each attempt's supervisor work, its bubblewrap sandbox and `/bin/sh`), the SSH floor %s a task (ssh client, "+
		"sshd, the shell, `true`). Both keep the %d cores busy, so on this machine each one's wall time is about its machine CPU "+
		"over the cores: at %s against %s a task, dispatch cannot reach the floor here while its nodes share the controller's "+
		"cores; on separate nodes only the controller's %s a task is on the operator's machine.\n\n",
		fmtMS(d), fmtMS(ctl), fmtMS(f), runtime.NumCPU(), fmtMS(d), fmtMS(f), fmtMS(ctl))
}

// machineCPU is the CPU time every process of the machine has used since
// boot, in seconds (the first line of /proc/stat, idle and iowait left
// out).
func machineCPU() (float64, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return 0, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	var ticks float64
	for i, v := range f[1:] {
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		n, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/stat: %w", err)
		}
		ticks += n
	}
	return ticks / 100, nil // USER_HZ is 100 on Linux
}
