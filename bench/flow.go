package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/dispatch-tool/dispatch/home"
	"github.com/dispatch-tool/dispatch/internal/sshdtest"
	"github.com/dispatch-tool/dispatch/store"
)

// flowBytes is the size of each output the DAG passes on (issue 33).
const flowBytes = 50 << 20

// flowDependent is one dependent of the DAG, what it receives and the
// plain copy it is held to.
type flowDependent struct {
	id, why string
	node    int // index of its node
	inputs  int // outputs of flowBytes it receives
}

var flowDependents = []flowDependent{
	{"S02", "S01's output, which ran on the same node", 0, 1},
	{"S03", "S01's output, which ran on the other node", 1, 1},
	{"S04", "S02's (same node) and S03's (other node) outputs", 0, 2},
}

// benchFlow runs a 3-level DAG passing 50 MB outputs across two sshd
// nodes — S01 on n1; S02 on n1 and S03 on n2, each after S01; S04 on n1
// after both — and holds each dependent's launch (claimed → `wrapper run`
// answered: its inputs in place and its tool started) to a plain scp of
// the same bytes to its node over the same link.
func benchFlow(ctx context.Context, o *options, t *tb) (*section, error) {
	c := sshdtest.NewClient(t)
	servers := startServers(t, c, "flow", 2, nodeHomeSetting(t))
	var defs []nodeDef
	for i, s := range servers {
		defs = append(defs, nodeDef{name: fmt.Sprintf("n%d", i+1), server: s, slots: 2})
	}
	yaml := nodesYAML(c, "", defs)
	data := t.TempDir()
	var files []string
	for i := range 2 {
		p := filepath.Join(data, fmt.Sprintf("in%d.bin", i+1))
		if err := writeRandom(p, flowBytes); err != nil {
			return nil, err
		}
		files = append(files, p)
	}
	launches := map[string][]float64{}
	copies := map[string][]float64{}
	for run := 0; run < o.pick(2, 4); run++ {
		homeDir := t.TempDir()
		project := fmt.Sprintf("flow%d", run)
		if err := writeFlowHome(homeDir, yaml, project); err != nil {
			return nil, err
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
		cmd := exec.CommandContext(cctx, o.dispatch, "--home", homeDir, "start", project)
		cmd.Env = dispatchEnv(c)
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			return nil, fmt.Errorf("dispatch start %s: %v\n%s", project, err, lastLines(string(out), 20))
		}
		got, err := flowLaunches(ctx, homeDir, project)
		if err != nil {
			return nil, err
		}
		// The plain copies, right after, over the same links.
		for _, d := range flowDependents {
			s := servers[d.node]
			secs, err := scpTo(ctx, c, s, files[:d.inputs], filepath.Join(s.WorkDir, "scp-"+project+"-"+d.id))
			if err != nil {
				return nil, err
			}
			launches[d.id] = append(launches[d.id], got[d.id])
			copies[d.id] = append(copies[d.id], secs)
			fmt.Printf("bench flow: run %d: %s launch %s, scp of its %d MB %s\n", run, d.id, fmtS(got[d.id]), d.inputs*flowBytes>>20, fmtS(secs))
		}
		for _, s := range servers {
			_ = os.RemoveAll(filepath.Join(s.WorkDir, project))
		}
	}
	sec := &section{title: "Results along the DAG: 50 MB outputs across two sshd nodes"}
	tbl := &table{head: []string{"dependent", "receives", "launch (claimed → running)", "scp of the same bytes to its node", "target"}}
	for _, d := range flowDependents {
		l, p := median(launches[d.id]), median(copies[d.id])
		met := l <= p
		sec.targets = append(sec.targets, target{name: "flow " + d.id, want: fmt.Sprintf("launch ≤ plain copy of its inputs (%d MB, %s)", d.inputs*flowBytes>>20, d.why),
			got: fmt.Sprintf("%s vs %s = %s", fmtS(l), fmtS(p), fmtRatio(l/p)), met: met})
		tbl.add(d.id, fmt.Sprintf("%d MB: %s", d.inputs*flowBytes>>20, d.why), spread(launches[d.id], fmtS), spread(copies[d.id], fmtS),
			fmt.Sprintf("≤ scp: %s", verdict(met)))
	}
	local, pushed := median(launches["S02"]), median(launches["S03"])
	sec.findings = append(sec.findings, finding{"flow", fmt.Sprintf("**Results along the DAG.** A dependent whose 50 MB input "+
		"ran on its own node launches in %s (copied and checked there by `wrapper inputs`, nothing on the link), against %s "+
		"for one whose input comes from the other node (sent from the controller's collected copy) and %s for scp of the "+
		"same bytes. The sent launch is the transfer plus `wrapper untar` writing the tree again from the uploaded "+
		"archive plus the `wrapper run` call, so it stays near the plain copy; **change**: stream the archive into "+
		"`wrapper untar` on its stdin (one write on the node, no archive file, one call less) in `controller.(*Controller).pushTree`, "+
		"which needs a `nodes.Transport` call whose stdin is a reader.",
		fmtS(local), fmtS(pushed), fmtS(median(copies["S03"])))})
	var b strings.Builder
	b.WriteString("Each run: `dispatch start` on a fresh home of a project of four shell tasks on two sshd nodes (2 slots " +
		"each, the sandbox as by default): S01 (pinned to n1) writes 50 MB of random bytes; S02 (n1) and S03 (n2) each " +
		"depend on S01 and write 50 MB of their own; S04 (n1) depends on S02 and S03. A dependent's launch is the " +
		"time from its claim to the answer of `wrapper run` (its attempt's claimed_at → started_at): its inputs/ filled, " +
		"its supervisor started. Right after each run, `scp` sends the same bytes (one or two 50 MB files) to the " +
		"dependent's node over the same loopback link and sshd, as a plain copy would. Medians of the runs (min–max).\n\n")
	b.WriteString(tbl.markdown())
	b.WriteString("\nWhere the time goes: a dependent on the node where its dependency ran gets that output copied " +
		"there by `wrapper inputs`, each file a copy of its own (never a hard link, which an unsandboxed dependent " +
		"could chmod and write through into the dependency's files) checked against the size and sha256 recorded " +
		"at collection, so nothing crosses the link; an output from the other node is sent from the controller's " +
		"collected copy as one tar stream over SFTP, unpacked by `wrapper untar`, which costs what a plain copy " +
		"costs plus the unpacking.\n")
	sec.body = b.String()
	return sec, nil
}

// writeFlowHome writes the home of one run: nodes.yaml and the DAG.
func writeFlowHome(homeDir, yaml, project string) error {
	if err := os.MkdirAll(homeDir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(home.ConfigPath(homeDir), []byte(yaml), 0o644); err != nil {
		return err
	}
	dir := filepath.Join(home.SpecsDir(homeDir), project)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	make50 := fmt.Sprintf("head -c %d /dev/urandom > out.bin\n", flowBytes)
	check := func(deps ...string) string {
		var b strings.Builder
		for _, d := range deps {
			fmt.Fprintf(&b, "test \"$(wc -c < \"$DISPATCH_INPUTS/%s/out.bin\")\" -eq %d\n", d, flowBytes)
		}
		return b.String()
	}
	specs := map[string]string{
		"project.yaml": "tool: shell\nintegration: false\n",
		"S01-make.md":  "---\nnode: n1\n---\n" + make50,
		"S02-same.md":  "---\nnode: n1\ndepends_on: [S01]\n---\n" + check("S01") + make50,
		"S03-other.md": "---\nnode: n2\ndepends_on: [S01]\n---\n" + check("S01") + make50,
		"S04-both.md":  "---\nnode: n1\ndepends_on: [S02, S03]\n---\n" + check("S02", "S03"),
	}
	for name, body := range specs {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// flowLaunches reads each dependent's launch time, in seconds.
func flowLaunches(ctx context.Context, homeDir, project string) (map[string]float64, error) {
	st, err := store.OpenReadOnly(ctx, home.DBPath(homeDir))
	if err != nil {
		return nil, err
	}
	defer st.Close()
	runs, err := st.Attempts(ctx, project, "")
	if err != nil {
		return nil, err
	}
	got := map[string]float64{}
	for _, r := range runs {
		if r.Attempt == 1 && !r.StartedAt.IsZero() {
			got[r.Task] = r.StartedAt.Sub(r.ClaimedAt).Seconds()
		}
	}
	for _, d := range flowDependents {
		if _, ok := got[d.id]; !ok {
			return nil, fmt.Errorf("%s: no first attempt started (%d attempts)", d.id, len(runs))
		}
	}
	return got, nil
}

// scpTo copies files to dir on s with scp, as the test client, and
// returns the seconds it took.
func scpTo(ctx context.Context, c *sshdtest.Client, s *sshdtest.Server, files []string, dir string) (float64, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	args := []string{"-q", "-i", c.KeyFile, "-o", "IdentitiesOnly=yes", "-o", "UserKnownHostsFile=" + c.KnownHosts,
		"-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "-P", fmt.Sprint(s.Port)}
	args = append(append(args, files...), fmt.Sprintf("%s@127.0.0.1:%s/", c.User, dir))
	start := time.Now()
	if out, err := exec.CommandContext(ctx, "scp", args...).CombinedOutput(); err != nil {
		return 0, fmt.Errorf("scp to %s: %v\n%s", s.Name, err, out)
	}
	return time.Since(start).Seconds(), nil
}

// writeRandom writes n bytes that do not compress.
func writeRandom(p string, n int) error {
	r := rand.NewChaCha8([32]byte{1})
	buf := make([]byte, n)
	r.Read(buf)
	return os.WriteFile(p, buf, 0o644)
}
