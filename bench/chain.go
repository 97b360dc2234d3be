package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/dispatch-tool/dispatch/internal/sshdtest"
)

// chainTarget is issue 11's target for a chain of 5 dependent `sleep 1`
// tasks on one node with the default nodes.yaml (poll_interval 30s).
const chainTarget = 7 * time.Second

// benchChain times a chain of 5 tasks, each depending on the one before,
// each `sleep 1`, on one sshd node whose nodes.yaml sets nothing but the
// node: every step waits for the node to say the one before has ended.
func benchChain(ctx context.Context, o *options, t *tb) (*section, error) {
	c := sshdtest.NewClient(t)
	s := startServers(t, c, "chain", 1, nodeHomeSetting(t))[0]
	yaml := nodesYAML(c, "", []nodeDef{{name: "n", server: s, slots: 1}})
	body := func(i int) string {
		if i == 1 {
			return "sleep 1\n"
		}
		return fmt.Sprintf("---\ndepends_on: [S%03d]\n---\nsleep 1\n", i-1)
	}
	var cold float64
	var walls []float64
	for run := 0; run <= o.pick(2, 4); run++ {
		home := t.TempDir()
		project := fmt.Sprintf("chain%d", run)
		if err := writeHome(home, yaml, project, 5, body); err != nil {
			return nil, err
		}
		cctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
		cmd := exec.CommandContext(cctx, o.dispatch, "--home", home, "start", project)
		cmd.Env = dispatchEnv(c)
		start := time.Now()
		out, err := cmd.CombinedOutput()
		wall := time.Since(start).Seconds()
		cancel()
		if err != nil {
			return nil, fmt.Errorf("dispatch start %s: %v\n%s", project, err, lastLines(string(out), 15))
		}
		if run == 0 {
			cold = wall
		} else {
			walls = append(walls, wall)
		}
		fmt.Printf("bench chain: run %d: %.2fs\n", run, wall)
		_ = os.RemoveAll(filepath.Join(s.WorkDir, project))
	}
	met := median(walls) <= chainTarget.Seconds()
	sec := &section{title: "Chain: 5 dependent `sleep 1` tasks on one node, default nodes.yaml"}
	sec.targets = append(sec.targets, target{name: "chain", want: fmt.Sprintf("5 dependent `sleep 1` tasks, poll_interval 30s: ≤ %s", fmtS(chainTarget.Seconds())),
		got: fmt.Sprintf("%s (ideal 5 s)", fmtS(median(walls))), met: met})
	var b strings.Builder
	b.WriteString("Each run: `dispatch start` on a fresh home, one sshd node, nodes.yaml with only the node (so " +
		"poll_interval is 30s), a project of S001 … S005, each `sleep 1` and depending on the one before. Wall time " +
		"from starting the command to its exit. The first run installs the wrapper and is not in the median.\n\n")
	tbl := &table{head: []string{"run", "wall time", "target"}}
	tbl.add(fmt.Sprintf("median of %d", len(walls)), spread(walls, fmtS), fmt.Sprintf("≤ %s: %s", fmtS(chainTarget.Seconds()), verdict(met)))
	tbl.add("cold first run", fmtS(cold), "")
	b.WriteString(tbl.markdown())
	b.WriteString("\nWhere the time goes: each node keeps one status stream open (`wrapper watch`), which reports a " +
		"task's new status.json as soon as the supervisor writes it; the controller ticks at once, applies it and " +
		"launches the next step in the same tick (one `wrapper run` call with the launch document). Each step costs its second of sleep plus " +
		"a pull, a launch (the supervisor's start) and the collection of the step before.\n")
	sec.body = b.String()
	return sec, nil
}
