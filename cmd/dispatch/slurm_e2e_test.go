package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dispatch-tool/dispatch/internal/slurmtest"
	"github.com/dispatch-tool/dispatch/wrapper/slurmjob"
)

// TestNodesCheckSlurmProbe: `nodes check` of a Slurm node submits a probe
// job that writes a file in work_dir and reads it on the login host (here
// the controller's machine, ssh: null): the check says work_dir is shared,
// names the job, and leaves no probe file behind. A probe sbatch refuses
// (a feature the cluster lacks) fails the node's check with sbatch's
// reason, exit 1.
func TestNodesCheckSlurmProbe(t *testing.T) {
	c := slurmtest.Start(t)
	home, work := newLocalHome(t)
	if err := os.MkdirAll(work, 0o700); err != nil {
		t.Fatal(err)
	}
	env := []string{"SLURM_CONF=" + c.Conf}
	writeNodes := func(extra string) {
		writeFile(t, filepath.Join(home, "nodes.yaml"), fmt.Sprintf(`nodes:
  - name: hpc
    ssh: null
    slots: 2
    work_dir: %s
    slurm: {partition: %s%s}
`, work, slurmtest.Partition, extra))
	}
	writeNodes("")
	r := runDispatch(t, env, "--home", home, "nodes", "check", "--json")
	if r.code != 0 {
		t.Fatalf("nodes check: %s", r)
	}
	var out struct {
		Nodes []checkResult `json:"nodes"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || len(out.Nodes) != 1 {
		t.Fatalf("nodes check --json: %v\n%s", err, r)
	}
	if got := out.Nodes[0].Slurm; !strings.HasPrefix(got, "work_dir is shared: probe job ") || !strings.HasSuffix(got, " on "+c.Node) {
		t.Errorf("slurm = %q, want the probe's proof", got)
	}
	if left, _ := filepath.Glob(filepath.Join(work, slurmjob.ProbeFile("*"))); len(left) > 0 {
		t.Errorf("probe files left: %v", left)
	}

	writeNodes(", extra: [--constraint=nosuchfeature]")
	r = runDispatch(t, env, "--home", home, "nodes", "check")
	t.Logf("refused probe:\n%s", r.stdout)
	if r.code != 1 || !strings.Contains(r.stdout, "slurm probe: sbatch: exit 1") || !strings.Contains(r.stdout, "feature") {
		t.Errorf("a refused probe: want exit 1 with sbatch's reason: %s", r)
	}
}
