package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dispatch-tool/dispatch/internal/slurmtest"
	"github.com/dispatch-tool/dispatch/wrapper/slurmjob"
)

// slurmHome is a home whose one node is the real one-host Slurm cluster
// c (its login host this machine), with the project dag: S01, then S02
// and S03 after it. It returns the home and the environment that names
// the cluster to the Slurm commands.
func slurmHome(t *testing.T, c *slurmtest.Cluster, slurm string) (home, work string, env []string) {
	t.Helper()
	home, work = newLocalHome(t)
	writeFile(t, filepath.Join(home, "nodes.yaml"), fmt.Sprintf(`controller:
  poll_interval: 200ms
  retry_backoff: 100ms
  retry_backoff_max: 1s
nodes:
  - name: hpc
    ssh: null
    slots: 4
    work_dir: %s
    slurm: %s
`, work, slurm))
	dir := filepath.Join(home, "specs", "dag")
	writeFile(t, filepath.Join(dir, "project.yaml"), "tool: shell\nintegration: false\n")
	writeFile(t, filepath.Join(dir, "S01-first.md"), "# First\necho \"$SLURM_JOB_ID\" > job.txt\n")
	writeFile(t, filepath.Join(dir, "S02-second.md"), "---\ndepends_on: [S01]\n---\n# Second\ncat \"$DISPATCH_INPUTS/S01/job.txt\" > from-s01.txt\n")
	writeFile(t, filepath.Join(dir, "S03-third.md"), "---\ndepends_on: [S01]\n---\n# Third\necho \"$SLURM_JOB_ID\" > job.txt\n")
	return home, work, []string{"SLURM_CONF=" + c.Conf}
}

// TestSlurmRunsADAG runs a project of three shell tasks, S02 and S03 after
// S01, on a Slurm node: each attempt is one batch job (SLURM_JOB_ID
// reaches the task, a different one each), S02 gets S01's output, and the
// project passes; no secrets file is left in any task directory.
func TestSlurmRunsADAG(t *testing.T) {
	c := slurmtest.Start(t)
	home, work, env := slurmHome(t, c, "{partition: "+slurmtest.Partition+"}")
	r := runDispatch(t, env, "--home", home, "start", "dag")
	if r.code != 0 {
		t.Fatalf("start dag: %s", r)
	}
	s, _ := getStatus(t, home, "dag")
	if s.Counts["completed"] != 3 || s.Phase != "done" {
		t.Fatalf("dag: counts %v, phase %q; want 3 completed, done", s.Counts, s.Phase)
	}
	out := func(task, file string) string {
		return strings.TrimSpace(readFile(t, filepath.Join(home, "runs", "dag", task, "output", file)))
	}
	j1, j3 := out("S01", "job.txt"), out("S03", "job.txt")
	if j1 == "" || j3 == "" || j1 == j3 || strings.Trim(j1+j3, "0123456789") != "" {
		t.Errorf("SLURM_JOB_ID of S01 %q and S03 %q: want two job ids", j1, j3)
	}
	if got := out("S02", "from-s01.txt"); got != j1 {
		t.Errorf("S02 read %q from S01's output, want %q", got, j1)
	}
	if ready, _ := filepath.Glob(filepath.Join(work, "dag", "tasks", "*", slurmjob.FileReady)); len(ready) != 3 {
		t.Errorf("supervisors' start reports: %v, want one per task (the glob must see the task directories)", ready)
	}
	if left, _ := filepath.Glob(filepath.Join(work, "dag", "tasks", "*", slurmjob.FileSecrets)); len(left) > 0 {
		t.Errorf("secrets files left: %v", left)
	}
	if jobs := strings.Fields(c.Run("squeue", "-h", "--states=all", "-o", "%i|%j|%T")); len(jobs) != 3 {
		t.Errorf("the cluster ran %d jobs, want 3: %v", len(jobs), jobs)
	}
}
