package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os/exec"
	"strings"
	"time"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/home"
	"github.com/dispatch-tool/dispatch/internal/sshdtest"
	"github.com/dispatch-tool/dispatch/store"
)

const (
	sbTasks = 200
	// sbSlots is 1: the attempts run one after the other, so that each
	// one's run time is its own, not shared with 7 others on the bench
	// machine's 2 cores (with 8 slots a no-op attempt took 29 ms more
	// sandboxed, 6 ms of it bwrap's own).
	sbSlots = 1
)

// sbRun is one `dispatch start` of the sandbox scenario.
type sbRun struct {
	wall float64 // seconds, start to exit
	// run is the median of the attempts' run time on the node, from
	// the supervisor's start to the tool's end (started_at →
	// completed_at): for `true`, the launch of the tool, bwrap's setup
	// included, and its exit.
	run float64
}

// benchSandbox runs 200 no-op tasks through `dispatch start` on one sshd
// node with `sandbox: on` and with `sandbox: off`, alternating, and puts
// the difference per task against issue 20's ≤ 20 ms per launch.
func benchSandbox(ctx context.Context, o *options, t *tb) (*section, error) {
	if _, err := exec.LookPath("bwrap"); err != nil {
		return nil, fmt.Errorf("the sandbox scenario needs bubblewrap (apt install bubblewrap): %w", err)
	}
	c := sshdtest.NewClient(t)
	s := startServers(t, c, "sb", 1, nodeHomeSetting(t))[0]
	runs := o.pick(1, 2) // a run of 200 launches one after the other takes about 20 s
	seq := 0
	start := func(sandbox string) (sbRun, error) {
		seq++
		homeDir := t.TempDir()
		project := fmt.Sprintf("sb%02d", seq) // the node's work_dir is reused: one project per run
		yaml := nodesYAML(c, "", []nodeDef{{name: "sb1", server: s, slots: sbSlots, sandbox: sandbox}})
		if err := writeHome(homeDir, yaml, project, sbTasks, func(int) string { return "true\n" }); err != nil {
			return sbRun{}, err
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(cctx, o.dispatch, "--home", homeDir, "start", project)
		cmd.Env = dispatchEnv(c)
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		began := time.Now()
		err := cmd.Run()
		wall := time.Since(began)
		if err != nil {
			return sbRun{}, fmt.Errorf("dispatch start %s (sandbox: %s): %v\n%s", project, sandbox, err, lastLines(out.String(), 20))
		}
		run, err := sbAttempts(ctx, home.DBPath(homeDir), project, sandbox)
		if err != nil {
			return sbRun{}, err
		}
		return sbRun{wall: wall.Seconds(), run: run}, nil
	}
	// The first run installs the wrapper; it is not counted.
	cold, err := start("off")
	if err != nil {
		return nil, fmt.Errorf("cold run: %w", err)
	}
	var onWall, offWall, onRun, offRun []float64
	for i := 0; i < runs; i++ {
		order := []string{"on", "off"}
		if i%2 == 1 {
			order = []string{"off", "on"}
		}
		for _, mode := range order {
			r, err := start(mode)
			if err != nil {
				return nil, err
			}
			if mode == "on" {
				onWall, onRun = append(onWall, r.wall), append(onRun, r.run)
			} else {
				offWall, offRun = append(offWall, r.wall), append(offRun, r.run)
			}
		}
		fmt.Printf("bench sandbox: run %d: on %.2fs (run %.1f ms), off %.2fs (run %.1f ms)\n",
			i+1, onWall[i], onRun[i]*1000, offWall[i], offRun[i]*1000)
	}
	perTask := (median(onWall) - median(offWall)) / sbTasks
	perRun := median(onRun) - median(offRun)
	sec := &section{title: fmt.Sprintf("Sandbox: %d no-op tasks with `sandbox: on` and `off`", sbTasks)}
	sec.targets = append(sec.targets,
		target{name: "sandbox", want: fmt.Sprintf("≤ 20 ms per launch: (wall on − wall off) / 200 no-op tasks, one node × %d slot", sbSlots),
			got: fmt.Sprintf("%s − %s over %d = %s", fmtS(median(onWall)), fmtS(median(offWall)), sbTasks, fmtMS(perTask)), met: perTask <= 0.020},
		target{name: "sandbox", want: "≤ 20 ms per launch: an attempt's run time on the node (supervisor start → tool end), on − off",
			got: fmt.Sprintf("%s − %s = %s", fmtMS(median(onRun)), fmtMS(median(offRun)), fmtMS(perRun)), met: perRun <= 0.020})

	var b strings.Builder
	fmt.Fprintf(&b, "Each run: `dispatch start` of %d tasks whose script is `true` on one sshd node on 127.0.0.1 (slots: %d), "+
		"its nodes.yaml saying `sandbox: on` or `sandbox: off` and nothing else but the slots (every controller default: "+
		"poll_interval 30s). Runs of the two settings alternate (on first, then off first), %d of each; each uses a fresh "+
		"home and project on the same node. A first run (off, %s) installs the wrapper and is not counted. The node logs "+
		"in as %s: bwrap runs without a user namespace of its own when the node user is root, with one for any other user.\n\n",
		sbTasks, sbSlots, runs, fmtS(cold.wall), c.User)
	tbl := &table{head: []string{"", "`sandbox: off`", "`sandbox: on`", "on − off"}}
	tbl.add("wall time of `dispatch start`, median (min–max)", spread(offWall, fmtS), spread(onWall, fmtS),
		fmt.Sprintf("%s, %s per task", fmtS(median(onWall)-median(offWall)), fmtMS(perTask)))
	tbl.add("an attempt's run time on the node (started_at → completed_at: the supervisor's start to the tool's end), median of the 200, median of the runs",
		spread(offRun, fmtMS), spread(onRun, fmtMS), fmtMS(perRun))
	b.WriteString(tbl.markdown())
	fmt.Fprintf(&b, "\nTarget: the sandbox costs ≤ 20 ms per launch — by the wall time %s (%s per task), by an attempt's run "+
		"time %s (%s). With one slot the attempts run one after the other: the wall time is 200 launches end to end, the run time one attempt's own: "+
		"the supervisor starting bwrap, bwrap's namespaces and mounts, `true`, and the exit. Every attempt of an `on` run "+
		"is recorded `sandbox: bwrap`, of an `off` run unconfined.\n",
		verdict(perTask <= 0.020), fmtMS(perTask), verdict(perRun <= 0.020), fmtMS(perRun))
	probe := sbTime(ctx, 20, "bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
		"--unshare-pid", "--die-with-parent", "--new-session", "--cap-drop", "ALL", "--", "true")
	git := sbTime(ctx, 20, "git", "config", "--global", "--get-regexp", `^user\.(name|email)$`)
	fmt.Fprintf(&b, "\nWhat a sandboxed attempt adds on the node, each timed alone here (median of 20, the machine otherwise as "+
		"loaded as the bench left it): `bwrap --ro-bind / / --dev /dev --proc /proc --unshare-pid … -- true` %s, "+
		"`git config --global --get-regexp '^user\\.(name|email)$'` %s. The supervisor runs the trial only when the "+
		"node has no probe of the last 10 minutes (the controller's, when it connects, is kept beside the wrapper).\n", fmtMS(probe), fmtMS(git))
	if perRun > 0.020 || perTask > 0.020 {
		sec.findings = append(sec.findings, finding{"sandbox", fmt.Sprintf("**Sandbox.** A no-op attempt runs %s longer on the node "+
			"under bwrap (%s against %s, started_at → completed_at), and `dispatch start` of 200 such tasks takes %s more "+
			"(%s per task): over the 20 ms target. A trial sandbox (`bwrap … -- true`) takes %s alone here; the supervisor "+
			"runs it only when no probe of the last 10 minutes is kept beside the wrapper, and reads the git identity with "+
			"one `git config` (%s). Look at what else the supervisor does before the tool starts (wrapper.log's \"attempt "+
			"started\" and \"tool started\" times).",
			fmtMS(perRun), fmtMS(median(onRun)), fmtMS(median(offRun)), fmtS(median(onWall)-median(offWall)), fmtMS(perTask),
			fmtMS(probe), fmtMS(git))})
	}
	sec.body = b.String()
	return sec, nil
}

// sbTime is the median wall time in seconds of n runs of a command, its
// output discarded; NaN when it fails.
func sbTime(ctx context.Context, n int, name string, args ...string) float64 {
	var xs []float64
	for range n {
		began := time.Now()
		if err := exec.CommandContext(ctx, name, args...).Run(); err != nil {
			var exit *exec.ExitError
			if !errors.As(err, &exit) { // git config exits 1 for a key not set
				return math.NaN()
			}
		}
		xs = append(xs, time.Since(began).Seconds())
	}
	return median(xs)
}

// sbAttempts checks that every task of project completed in one attempt,
// confined as sandbox says, and returns the median of the attempts' run
// time on the node in seconds.
func sbAttempts(ctx context.Context, dbPath, project, sandbox string) (float64, error) {
	st, err := store.OpenReadOnly(ctx, dbPath)
	if err != nil {
		return 0, err
	}
	defer st.Close()
	runs, err := st.Attempts(ctx, project, "")
	if err != nil {
		return 0, err
	}
	if len(runs) != sbTasks {
		return 0, fmt.Errorf("%s: %d attempts, want %d", project, len(runs), sbTasks)
	}
	want := map[string]string{"on": "bwrap", "off": ""}[sandbox]
	var took []float64
	for _, r := range runs {
		if r.Status != domain.Completed || r.Sandbox != want {
			return 0, fmt.Errorf("%s: %s#%d %s with sandbox %q, want completed with %q", project, r.Task, r.Attempt, r.Status, r.Sandbox, want)
		}
		took = append(took, r.CompletedAt.Sub(r.StartedAt).Seconds())
	}
	return median(took), nil
}
