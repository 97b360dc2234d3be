package main

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/crypto/ssh"
	"golang.org/x/term"

	"github.com/dispatch-tool/dispatch/controller"
	"github.com/dispatch-tool/dispatch/home"
	"github.com/dispatch-tool/dispatch/internal/termtext"
	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/nodes/sshnode"
	"github.com/dispatch-tool/dispatch/readmodel"
	"github.com/dispatch-tool/dispatch/store"
	"github.com/dispatch-tool/dispatch/wire"
)

func nodesCommand() *cli.Command {
	return &cli.Command{
		Name:  "nodes",
		Usage: "show the nodes (state, slots, memory, wrapper, RTT, last error); check or trust them",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "json", Usage: "print JSON: {\"nodes\": [...]}"},
		},
		Action: nodesList,
		Subcommands: []*cli.Command{
			{
				Name:   "check",
				Usage:  "connect to every node, install the wrapper, run a no-op and show the clock skew; record what it saw for `dispatch nodes`; exit 1 if any node fails",
				Flags:  []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "print JSON"}},
				Action: nodesCheck,
			},
			{
				Name:      "trust",
				Usage:     "show a node's SSH host key fingerprint and record it in ~/.ssh/known_hosts",
				ArgsUsage: "<node>",
				Flags:     []cli.Flag{&cli.BoolFlag{Name: "yes", Usage: "record the key without asking"}},
				Action:    nodesTrust,
			},
		},
	}
}

// nodesList is `dispatch nodes`.
func nodesList(c *cli.Context) error {
	ctx := c.Context
	e, err := newEnv(c)
	if err != nil {
		return err
	}
	if c.NArg() > 0 {
		return usagef("dispatch nodes check | dispatch nodes trust <node>", "unknown nodes subcommand %q", c.Args().First())
	}
	cfg, err := e.loadConfig()
	if err != nil {
		return err
	}
	st, err := e.openIfAny(ctx)
	if err != nil {
		return err
	}
	if st != nil {
		defer st.Close()
	}
	v, err := readmodel.NodeList(ctx, st, cfg)
	if err != nil {
		return err
	}
	views := v.Nodes
	v.Controller = controllerOf(e.home)
	if c.Bool("json") {
		return writeJSON(e.out, v)
	}
	now := time.Now()
	if !v.Controller.LastTick().IsZero() {
		if line := v.Controller.Line("", now); line != "" {
			fmt.Fprintln(e.out, e.styles.warn.Render(line))
		}
	}
	tw := tabwriter.NewWriter(e.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tSTATE\tSLOTS\tMEM AVAILABLE\tLOAD\tPLATFORM\tWRAPPER\tRTT\tLAST ERROR")
	ctl := v.Controller
	for _, v := range views {
		platform := "-"
		if v.OS != "" {
			platform = v.OS + "/" + v.Arch
		}
		rtt := "-"
		if v.RTTMillis > 0 {
			rtt = fmt.Sprintf("%.0fms", v.RTTMillis)
		}
		wv := v.WrapperVersion
		if wv == "" {
			wv = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d/%d\t%s\t%.2f\t%s\t%s\t%s\t%s\n", v.Name, nodeState(ctl, v, now), v.Running, v.Slots,
			bytesHuman(v.MemAvailableBytes), v.Load1, platform, wv, rtt, termtext.Clean(firstLine(v.LastError)))
	}
	return tw.Flush()
}

// nodeState is a node's state as `dispatch nodes` shows it: as recorded
// while a controller runs; else an online node is only "last seen" then.
func nodeState(ctl *readmodel.ControllerView, n readmodel.NodeListEntry, now time.Time) string {
	if !ctl.Stale() || ctl.LastTick().IsZero() || n.State != store.NodeOnline {
		return n.State
	}
	if t, err := time.Parse(time.RFC3339Nano, n.LastSeen); err == nil {
		return "last seen " + readmodel.Clock(t, now)
	}
	return "last seen"
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// checkResult is one node in `dispatch nodes check`.
type checkResult struct {
	Name             string  `json:"name"`
	OK               bool    `json:"ok"`
	Seconds          float64 `json:"seconds"`
	OS               string  `json:"os"`
	Arch             string  `json:"arch"`
	WrapperVersion   string  `json:"wrapper_version"`
	Installed        bool    `json:"installed"`
	WorkDir          string  `json:"work_dir"`
	MemAvailable     int64   `json:"mem_available_bytes"`
	DiskFree         int64   `json:"disk_free_bytes"`
	ClockSkewSeconds float64 `json:"clock_skew_seconds"`
	// GitVersion is what `git --version` says there ("2.39.5"), "" when
	// the node has no git: repo projects need it, the others do not.
	GitVersion string `json:"git_version"`
	// Sandbox is "bwrap" when the sandbox works there for the node user,
	// "unavailable" when it does not (SandboxError says why, SandboxFix
	// what to do); SandboxSetting is the node's sandbox: in nodes.yaml.
	Sandbox        string `json:"sandbox"`
	SandboxError   string `json:"sandbox_error,omitempty"`
	SandboxFix     string `json:"sandbox_fix,omitempty"`
	SandboxSetting string `json:"sandbox_setting"`
	// Limits is how the node enforces a task's limits: "cgroup v2
	// (cpu,memory,pids) at DIR" or "cgroup v1 (cpu,memory,pids)" (the
	// controllers named by the cgroup, memory and pids without one by the
	// watchdog, file_size by RLIMIT_FSIZE), "rlimits+watchdog" (memory and
	// pids by the wrapper's watchdog, file_size by RLIMIT_FSIZE; cpu not
	// enforced), "none" (not Linux), "" (a wrapper that does not say). LimitsSetting is the node's limits: in
	// nodes.yaml, as written ("" for none).
	Limits        string `json:"limits"`
	LimitsSetting string `json:"limits_setting,omitempty"`
	Error         string `json:"error"`
	// SharedWith names the other nodes whose markers are in this node's
	// work_dir ("box2", or "box2 of <home>" for another home's); Shared
	// says what that means and how to set them apart (see
	// nodes.SharedWarning).
	SharedWith []string `json:"shared_with,omitempty"`
	Shared     string   `json:"shared,omitempty"`
	// Slurm is what the probe job of a Slurm node proved (its work_dir
	// shared by the login host and the compute nodes); "" for other nodes.
	Slurm string `json:"slurm,omitempty"`
	// What the controller records too (see recordCheck).
	load1 float64
	rtt   time.Duration
}

func nodesCheck(c *cli.Context) error {
	ctx := c.Context
	e, err := newEnv(c)
	if err != nil {
		return err
	}
	cfg, err := e.loadConfig()
	if err != nil {
		return err
	}
	env, err := sshnode.DefaultEnv()
	if err != nil {
		return err
	}
	results := checkNodes(ctx, cfg, env, nodes.HomeID(e.home))
	recordCheck(ctx, e, results)
	failed := 0
	for _, r := range results {
		if !r.OK {
			failed++
		}
	}
	if c.Bool("json") {
		if err := writeJSON(e.out, map[string]any{"nodes": results}); err != nil {
			return err
		}
	} else {
		writeCheckTable(e, results)
		writeCheckNotes(e.out, results)
	}
	if failed > 0 {
		return &workFailed{msg: fmt.Sprintf("dispatch: %d of %d nodes failed the check", failed, len(results))}
	}
	return nil
}

// checkNodes checks every node of cfg, at most max_parallel_ssh at once,
// in two rounds: each node alone (checkNode), then, once every node has
// left its marker, what it shares with the others and its Slurm.
func checkNodes(ctx context.Context, cfg *nodes.Config, env sshnode.Env, homeID string) []checkResult {
	wrappers := nodes.NewWrappers()
	results := make([]checkResult, len(cfg.Nodes))
	trs := make([]nodes.Transport, len(cfg.Nodes))
	sem := make(chan struct{}, max(cfg.Controller.MaxParallelSSH, 1))
	onEach := func(fn func(i int, n nodes.Node)) {
		var wg sync.WaitGroup
		for i, n := range cfg.Nodes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sem <- struct{}{}
				defer func() { <-sem }()
				fn(i, n)
			}()
		}
		wg.Wait()
	}
	onEach(func(i int, n nodes.Node) { results[i], trs[i] = checkNode(ctx, cfg, n, env, wrappers, homeID) })
	// Every node has left its marker: now each finds the others'.
	onEach(func(i int, n nodes.Node) {
		if trs[i] != nil {
			defer trs[i].Close()
			sharedCheck(ctx, cfg, n, trs[i], homeID, &results[i])
			if n.Slurm != nil {
				slurmCheck(ctx, n, trs[i], homeID, &results[i])
			}
		}
	})
	return results
}

// writeCheckTable writes one row per node of the check.
func writeCheckTable(e *env, results []checkResult) {
	tw := tabwriter.NewWriter(e.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tRESULT\tTIME\tPLATFORM\tWRAPPER\tGIT\tSANDBOX\tMEM AVAILABLE\tDISK FREE\tCLOCK SKEW\tERROR")
	for _, r := range results {
		res := e.styles.ok.Render("ok")
		if !r.OK {
			res = e.styles.bad.Render("FAILED")
		}
		wv := r.WrapperVersion
		if r.Installed {
			wv += " (installed now)"
		}
		platform := "-"
		if r.OS != "" {
			platform = r.OS + "/" + r.Arch
		}
		skew := "-"
		if r.OK {
			skew = fmt.Sprintf("%+.2fs", r.ClockSkewSeconds)
		}
		git := "-"
		if r.GitVersion != "" {
			git = r.GitVersion
		} else if r.OK {
			git = "none"
		}
		sandbox := "-"
		if r.Sandbox != "" {
			sandbox = r.Sandbox + " (" + r.SandboxSetting + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%.2fs\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Name, res, r.Seconds, platform, wv,
			termtext.Clean(git), sandbox, bytesHuman(r.MemAvailable), bytesHuman(r.DiskFree), skew, termtext.Clean(firstLine(r.Error)))
	}
	tw.Flush()
}

// writeCheckNotes writes, under the table, what a row has no room for:
// each node's limits, its Slurm, why its sandbox is unavailable, what it
// shares with another, and a many-line error whole.
func writeCheckNotes(w io.Writer, results []checkResult) {
	for _, r := range results {
		if r.OK {
			fmt.Fprintf(w, "\n%s: limits: %s\n", r.Name, limitsText(r.Limits, r.LimitsSetting))
		}
	}
	for _, r := range results {
		if r.Slurm != "" {
			fmt.Fprintf(w, "\n%s: slurm: %s\n", r.Name, termtext.Clean(r.Slurm))
		}
	}
	for _, r := range results {
		if r.SandboxError != "" {
			fmt.Fprintf(w, "\n%s: sandbox: unavailable%s (%s; fix: %s)\n", r.Name, sandboxConsequence(r.SandboxSetting),
				termtext.Clean(r.SandboxError), termtext.Clean(r.SandboxFix))
		}
	}
	for _, r := range results {
		if r.Shared != "" {
			fmt.Fprintf(w, "\nwarning: %s\n", termtext.Clean(r.Shared))
		}
	}
	for _, r := range results {
		if !r.OK && strings.Contains(r.Error, "\n") {
			fmt.Fprintf(w, "\n%s: %s\n", r.Name, termtext.Clean(r.Error))
		}
	}
}

// checkNode connects, installs the wrapper, leaves the node's marker in
// its work_dir, runs a no-op through the shell and one status call, and
// measures the clock skew. It returns the node's open transport when the
// check passed (the caller closes it), else nil.
func checkNode(ctx context.Context, cfg *nodes.Config, n nodes.Node, env sshnode.Env, w *nodes.Wrappers, homeID string) (checkResult, nodes.Transport) {
	start := time.Now()
	tr, err := sshnode.Open(cfg, n, env)
	if err != nil {
		return checkResult{Name: n.Name, Error: nodes.CauseFirst(err).Error(), Seconds: time.Since(start).Seconds()}, nil
	}
	r := checkOpen(ctx, cfg, n, tr, w, homeID, start)
	if !r.OK {
		tr.Close()
		return r, nil
	}
	return r, tr
}

// checkOpen is checkNode over the open transport tr.
func checkOpen(ctx context.Context, cfg *nodes.Config, n nodes.Node, tr nodes.Transport, w *nodes.Wrappers, homeID string, start time.Time) checkResult {
	r := checkResult{Name: n.Name}
	fail := func(err error) checkResult {
		r.Error = nodes.CauseFirst(err).Error()
		r.Seconds = time.Since(start).Seconds()
		return r
	}
	ctx, cancel := context.WithTimeout(ctx, max(cfg.Controller.SSHConnectTimeout*3, 30*time.Second))
	defer cancel()
	inst, err := nodes.EnsureWrapper(ctx, tr, n.WorkDir, w)
	if err != nil {
		return fail(err)
	}
	r.OS, r.Arch, r.WrapperVersion, r.Installed, r.WorkDir = inst.OS, inst.Arch, inst.Version, inst.Reinstalled, inst.WorkDir
	if err := nodes.WriteMarker(ctx, tr, inst.WorkDir, nodes.Marker{Node: n.Name, Home: homeID}, time.Now()); err != nil {
		return fail(err)
	}
	if res, err := tr.Exec(ctx, []string{"true"}, nil); err != nil || res.ExitCode != 0 {
		if err == nil {
			err = fmt.Errorf("`true` exited %d", res.ExitCode)
		}
		return fail(fmt.Errorf("no-op: %w", err))
	}
	t0 := time.Now()
	facts, err := controller.NodeFacts(ctx, tr, inst)
	if err != nil {
		return fail(err)
	}
	r.rtt = time.Since(t0)
	mid := t0.Add(r.rtt / 2)
	if remote, err := time.Parse(time.RFC3339Nano, facts.Time); err == nil {
		r.ClockSkewSeconds = remote.Sub(mid).Seconds()
	}
	r.MemAvailable, r.DiskFree, r.load1 = facts.Facts.MemAvailableBytes, facts.Facts.DiskFreeBytes, facts.Facts.Load1
	r.GitVersion = gitVersion(ctx, tr)
	r.SandboxSetting = cmp.Or(n.Sandbox, nodes.SandboxOff)
	r.Sandbox, r.SandboxError, r.SandboxFix, r.Limits = sandboxCheck(ctx, tr, inst)
	r.LimitsSetting = n.Limits.String()
	r.OK = true
	r.Seconds = time.Since(start).Seconds()
	return r
}

// sharedCheck looks in n's work_dir for the markers of other nodes (see
// nodes.SharedWith) and records them in r.
func sharedCheck(ctx context.Context, cfg *nodes.Config, n nodes.Node, tr nodes.Transport, homeID string, r *checkResult) {
	ctx, cancel := context.WithTimeout(ctx, max(cfg.Controller.SSHConnectTimeout*3, 30*time.Second))
	defer cancel()
	others := sharedWorkDir(ctx, cfg, n, tr, r.WorkDir, homeID)
	for _, m := range others {
		name := m.Node
		if m.Home != homeID {
			name += " of " + m.Home
		}
		r.SharedWith = append(r.SharedWith, name)
	}
	if len(others) > 0 {
		r.Shared = nodes.SharedWarning(n.Name, r.WorkDir, cfg.File, n.Line, homeID, others)
	}
}

// sharedWorkDir returns the other nodes whose markers are in n's work_dir
// wd (absolute), nil when none are or they cannot be read.
func sharedWorkDir(ctx context.Context, cfg *nodes.Config, n nodes.Node, tr nodes.Transport, wd, homeID string) []nodes.Marker {
	found, err := nodes.ReadMarkers(ctx, tr, wd)
	if err != nil {
		return nil
	}
	return nodes.SharedWith(nodes.Marker{Node: n.Name, Home: homeID}, found, nodeNames(cfg))
}

// sandboxConsequence says what an unavailable sandbox means for the tasks
// of a node with the given sandbox setting.
func sandboxConsequence(setting string) string {
	switch setting {
	case nodes.SandboxAuto:
		return ", so its tasks run unsandboxed (sandbox: auto)"
	case nodes.SandboxOn:
		return ", so no task can run there (sandbox: on)"
	}
	return ""
}

// sandboxCheck asks the node's wrapper whether bwrap works there, and how
// it enforces limits.
func sandboxCheck(ctx context.Context, tr nodes.Transport, inst nodes.Installed) (sandbox, why, fix, limits string) {
	const unavailable = "unavailable"
	res, err := tr.Exec(ctx, []string{inst.Path, "sandbox"}, nil)
	if err != nil {
		return unavailable, "ask the wrapper: " + err.Error(), "", ""
	}
	var reply wire.SandboxReply
	if res.ExitCode != 0 || json.Unmarshal(res.Stdout, &reply) != nil {
		return unavailable, "the wrapper's reply: " + firstLine(string(res.Stdout)+string(res.Stderr)), "", ""
	}
	if reply.Sandbox == wire.SandboxBwrap {
		return reply.Sandbox, "", "", reply.Limits
	}
	return unavailable, reply.Error, reply.Fix, reply.Limits
}

// limitsText says how a node enforces limits, for `nodes check`.
func limitsText(enforcement, setting string) string {
	var msg string
	switch {
	case strings.HasPrefix(enforcement, "cgroup v"):
		msg = enforcement + " (" + cgroupText(wire.EnforcementControllers(enforcement)) + ")"
	case enforcement == wire.EnforceRlimits:
		msg = "rlimits+watchdog (memory and pids: the wrapper's watchdog; file_size: RLIMIT_FSIZE; cpu is not enforced: it needs cgroups)"
	case enforcement == wire.EnforceNone:
		msg = "none (not Linux: a task with memory, pids or file_size limits fails to start there)"
	default:
		msg = "unknown (the wrapper does not say)"
	}
	if setting != "" {
		msg += "; node default: " + setting
	}
	return termtext.Clean(msg)
}

// cgroupText says which limit the cgroup enforces, controllers ctrls,
// and which the rest.
func cgroupText(ctrls []string) string {
	var cg, watchdog []string
	for _, c := range []string{"memory", "pids"} {
		if slices.Contains(ctrls, c) {
			cg = append(cg, c)
		} else {
			watchdog = append(watchdog, c)
		}
	}
	var parts []string
	if len(cg) > 0 {
		parts = append(parts, strings.Join(cg, " and ")+": the cgroup")
	}
	if len(watchdog) > 0 {
		parts = append(parts, strings.Join(watchdog, " and ")+": the wrapper's watchdog")
	}
	if slices.Contains(ctrls, "cpu") {
		parts = append(parts, "cpu: the cgroup's quota")
	}
	parts = append(parts, "file_size: RLIMIT_FSIZE")
	if !slices.Contains(ctrls, "cpu") {
		parts = append(parts, "cpu is not enforced: no cpu controller the node user can write")
	}
	return strings.Join(parts, "; ")
}

// gitVersion asks the node's git for its version: "2.39.5", or "" when
// it has none (or answers with anything but a version).
func gitVersion(ctx context.Context, tr nodes.Transport) string {
	res, err := tr.Exec(ctx, []string{"git", "--version"}, nil)
	if err != nil || res.ExitCode != 0 {
		return ""
	}
	return parseGitVersion(string(res.Stdout))
}

// gitVersionRE is git's own answer: "git version 2.39.5" (Apple's adds
// " (Apple Git-146)").
var gitVersionRE = regexp.MustCompile(`^git version ([0-9]+(?:\.[0-9A-Za-z]+){1,4})`)

func parseGitVersion(out string) string {
	if m := gitVersionRE.FindStringSubmatch(strings.TrimSpace(out)); m != nil {
		return m[1]
	}
	return ""
}

// recordCheck records what the check saw of each node in the database, as
// the controller records a pull: state, error, facts and last_seen, so
// that `dispatch nodes` shows it. The database has one writer: when a
// controller (or another command) holds the home's lock, the check is not
// recorded — a running controller records the nodes itself at every pull.
func recordCheck(ctx context.Context, e *env, results []checkResult) {
	lock, err := home.AcquireLock(e.home)
	if errors.Is(err, home.ErrLocked) {
		fmt.Fprintln(e.errOut, "note: a controller is running on this home and records the nodes itself; this check was not recorded")
		return
	}
	if err == nil {
		defer lock.Release()
		err = writeCheck(ctx, e, results)
	}
	if err != nil {
		fmt.Fprintf(e.errOut, "note: the check was not recorded: %v\n", err)
	}
}

func writeCheck(ctx context.Context, e *env, results []checkResult) error {
	st, err := store.Open(ctx, e.dbPath())
	if err != nil {
		return err
	}
	defer st.Close()
	known, err := st.Nodes(ctx)
	if err != nil {
		return err
	}
	prev := map[string]store.Node{}
	for _, n := range known {
		prev[n.Name] = n
	}
	now := time.Now()
	return st.Update(ctx, func(tx *store.Tx) error {
		for _, r := range results {
			old := prev[r.Name]
			n := store.Node{Name: r.Name, LastSeen: old.LastSeen, OS: old.OS, Arch: old.Arch, WrapperVersion: old.WrapperVersion,
				MemAvailableBytes: old.MemAvailableBytes, Load1: old.Load1, DiskFreeBytes: old.DiskFreeBytes, RTTMillis: old.RTTMillis}
			if r.OK {
				n.State, n.LastSeen = store.NodeOnline, now
				n.OS, n.Arch, n.WrapperVersion = r.OS, r.Arch, r.WrapperVersion
				n.MemAvailableBytes, n.Load1, n.DiskFreeBytes = r.MemAvailable, r.load1, r.DiskFree
				n.RTTMillis = float64(r.rtt.Microseconds()) / 1000
			} else {
				n.State, n.LastError, n.OfflineSince = store.NodeOffline, r.Error, old.OfflineSince
				if old.State != store.NodeOffline || n.OfflineSince.IsZero() {
					n.OfflineSince = now
				}
			}
			if err := tx.PutNode(ctx, n); err != nil {
				return err
			}
		}
		return nil
	})
}

func nodesTrust(c *cli.Context) error {
	ctx := c.Context
	e, err := newEnv(c)
	if err != nil {
		return err
	}
	if c.NArg() != 1 {
		return usagef("dispatch nodes trust <node> [--yes]", "nodes trust takes one node name")
	}
	cfg, err := e.loadConfig()
	if err != nil {
		return err
	}
	name := c.Args().First()
	n, ok := cfg.Node(name)
	if !ok {
		return usagef("dispatch nodes trust "+strings.Join(nodeNames(cfg), " | "), "no node %q in %s", name, cfg.File)
	}
	if n.IsLocal() {
		return usagef("dispatch nodes check", "node %s is local (ssh: null): it has no host key to trust", name)
	}
	env, err := sshnode.DefaultEnv()
	if err != nil {
		return err
	}
	tr, err := sshnode.New(sshnode.NodeConfig(cfg, n, env))
	if err != nil {
		return &nodes.ConfigError{File: cfg.File, Line: n.Line, Msg: fmt.Sprintf("node %s: %v", name, err)}
	}
	defer tr.Close()
	ctx, cancel := context.WithTimeout(ctx, max(cfg.Controller.SSHConnectTimeout*2, 20*time.Second))
	defer cancel()
	hk, err := tr.HostKey(ctx)
	if err != nil {
		return err
	}
	fp := ssh.FingerprintSHA256(hk.Key)
	switch hk.State {
	case sshnode.KeyKnown:
		fmt.Fprintf(e.out, "node %s (%s) is already trusted: %s %s\n", name, hk.Addr, hk.Key.Type(), fp)
		return nil
	case sshnode.KeyChanged:
		return &workFailed{msg: (&sshnode.HostKeyChangedError{Node: name, Addr: hk.Addr, Key: hk.Key, Known: hk.Known}).Error()}
	}
	fmt.Fprintf(e.out, "node %s (%s) presents this host key:\n  %s %s\n", name, hk.Addr, hk.Key.Type(), fp)
	if !c.Bool("yes") {
		// The answer comes from the terminal or from a pipe (`echo y |`);
		// no answer at all (stdin at its end) records nothing.
		fmt.Fprintf(e.out, "Record it in %s? [y/N] ", hk.File)
		line, err := bufio.NewReader(c.App.Reader).ReadString('\n')
		if in, isFile := c.App.Reader.(*os.File); !isFile || !term.IsTerminal(int(in.Fd())) {
			fmt.Fprintln(e.out, strings.TrimSpace(line)) // the answer, as a terminal would echo it
		}
		if err != nil && strings.TrimSpace(line) == "" {
			return usagef("dispatch nodes trust "+name+" --yes", "not recorded: no answer on stdin; check the fingerprint above (e.g. `ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub` on the node), then answer y, or rerun with --yes")
		}
		if a := strings.ToLower(strings.TrimSpace(line)); a != "y" && a != "yes" {
			return &workFailed{msg: "dispatch: not recorded"}
		}
	}
	if err := sshnode.AddKnownHost(hk.File, hk.Addr, hk.Key); err != nil {
		return err
	}
	fmt.Fprintf(e.out, "recorded in %s\n", hk.File)
	return nil
}
