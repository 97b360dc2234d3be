package slurmjob

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/internal/slurmtest"
)

// TestOnARealCluster submits an attempt as SbatchArgs and Script make it,
// to a real one-host Slurm cluster, with a stand-in wrapper, and reads the
// cluster back through QueueArgs and ParseQueue: while the node is drained
// the job waits with Slurm's reason, which Decide shows; resumed, the job
// runs the supervisor in the task directory with the secrets on stdin (the
// file gone) and SLURM_JOB_ID set; an administrator's scancel then ends
// it, which Decide calls a crash (the wrapper had started).
func TestOnARealCluster(t *testing.T) {
	c := slurmtest.Start(t)
	dir := filepath.Join(c.Dir, "work", "web", "S01")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	// The stand-in supervisor reports ready, records what it got, and
	// runs until the test's release file appears (or 2 minutes).
	wrapper := filepath.Join(c.Dir, "work", "wrapper")
	stub := "#!/bin/sh\n" +
		"echo '[]' >&3\n" +
		"cat > got-stdin\n" +
		"echo \"$SLURM_JOB_ID\" > got-job\n" +
		"[ -e " + quote(dir+"/"+FileSecrets) + " ] && echo present > got-secrets-file\n" +
		"i=0; while [ ! -e release ] && [ $i -lt 1200 ]; do sleep 0.1; i=$((i+1)); done\n"
	if err := os.WriteFile(wrapper, []byte(stub), 0o700); err != nil {
		t.Fatal(err)
	}
	j := Job{Home: "test1", Project: "web", Task: "S01", Attempt: 1, Dir: dir, Wrapper: wrapper}
	const secret = `[{"dir":"x","env":{"TOKEN":"s3cret"}}]`
	if err := os.WriteFile(filepath.Join(dir, FileSecrets), []byte(secret), 0o600); err != nil {
		t.Fatal(err)
	}

	c.Drain("maintenance window")
	id := submit(t, c, j)
	v := waitVerdict(t, c, j, Observation{}, func(v Verdict) bool { return v.Action == Watch && v.Reason != "Slurm job "+id+" PENDING" })
	t.Logf("drained: %s", v.Reason)
	if !strings.HasPrefix(v.Reason, "Slurm job "+id+" PENDING: ") {
		t.Errorf("drained: reason %q, want Slurm's pending reason", v.Reason)
	}

	c.Resume()
	waitFile(t, filepath.Join(dir, "got-job"))
	if got, _ := os.ReadFile(filepath.Join(dir, "got-stdin")); string(got) != secret {
		t.Errorf("the supervisor's stdin = %q, want the secrets file", got)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "got-job")); strings.TrimSpace(string(got)) != id {
		t.Errorf("SLURM_JOB_ID = %q, want %s", got, id)
	}
	if _, err := os.Stat(filepath.Join(dir, "got-secrets-file")); err == nil {
		t.Error("the secrets file was still there when the supervisor ran")
	}
	if _, err := os.Stat(filepath.Join(dir, FileSecrets)); err == nil {
		t.Error("the secrets file is still there")
	}
	waitVerdict(t, c, j, Observation{Started: true}, func(v Verdict) bool { return v.Action == Watch && v.Reason == "" })

	c.Run("scancel", id)
	v = waitVerdict(t, c, j, Observation{Started: true}, func(v Verdict) bool { return v.Action != Watch })
	t.Logf("cancelled: %s", v.Reason)
	if v.Action != Crash || !strings.Contains(v.Reason, "CANCELLED") {
		t.Errorf("after scancel: %+v, want a crash that says CANCELLED", v)
	}
}

// submit runs sbatch as SbatchArgs and Script make it; it returns the id.
func submit(t *testing.T, c *slurmtest.Cluster, j Job) string {
	t.Helper()
	args, err := SbatchArgs(Cluster{Partition: slurmtest.Partition}, j)
	if err != nil {
		t.Fatal(err)
	}
	script, err := Script(j)
	if err != nil {
		t.Fatal(err)
	}
	out := run(t, c, args, script)
	id, err := ParseSubmit(out)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func run(t *testing.T, c *slurmtest.Cluster, args []string, stdin string) []byte {
	t.Helper()
	cmd := exec.Command(c.Bin(args[0]), args[1:]...)
	cmd.Env, cmd.Stdin = c.Env(), strings.NewReader(stdin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return out
}

// waitVerdict queries the cluster (the stand-in never writes a final
// status) until Decide's verdict on j's job, with no grace, satisfies ok.
func waitVerdict(t *testing.T, c *slurmtest.Cluster, j Job, o Observation, ok func(Verdict) bool) Verdict {
	t.Helper()
	var v Verdict
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		jobs, err := ParseQueue(run(t, c, QueueArgs(j.Home), ""))
		if err != nil {
			t.Fatal(err)
		}
		o.QueryOK, o.Job = true, nil
		if q, found := Find(jobs, j.Project, j.Task, j.Attempt); found {
			o.Job = &q
		}
		v = Decide(o, time.Now(), 0)
		if ok(v) {
			return v
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("the verdict stayed %+v", v)
	return v
}

func waitFile(t *testing.T, path string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(path); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s did not appear", path)
}
