package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

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
    limits: {memory: 256MiB}  # else each job asks for the whole node's memory
    slurm: %s
`, work, slurm))
	dir := filepath.Join(home, "specs", "dag")
	writeFile(t, filepath.Join(dir, "project.yaml"), "tool: shell\nintegration: false\n")
	writeFile(t, filepath.Join(dir, "S01-first.md"), "# First\necho \"$SLURM_JOB_ID\" > job.txt\n")
	writeFile(t, filepath.Join(dir, "S02-second.md"), "---\ndepends_on: [S01]\n---\n# Second\ncat \"$DISPATCH_INPUTS/S01/job.txt\" > from-s01.txt\n")
	writeFile(t, filepath.Join(dir, "S03-third.md"), "---\ndepends_on: [S01]\n---\n# Third\necho \"$SLURM_JOB_ID\" > job.txt\n")
	return home, work, []string{"SLURM_CONF=" + c.Conf}
}

// slurmProject writes project name of shell tasks into home: files maps
// a spec's file name to its text; project.yaml, unless files has one, is
// a shell project without integration.
func slurmProject(t *testing.T, home, name string, files map[string]string) {
	t.Helper()
	dir := filepath.Join(home, "specs", name)
	if _, ok := files["project.yaml"]; !ok {
		writeFile(t, filepath.Join(dir, "project.yaml"), "tool: shell\nintegration: false\n")
	}
	for file, text := range files {
		writeFile(t, filepath.Join(dir, file), text)
	}
}

// runDAG runs project dag of slurmHome to its end: its three tasks
// complete, and the cluster ran one job each, none twice.
func runDAG(t *testing.T, c *slurmtest.Cluster, home string, env []string) {
	t.Helper()
	if r := runDispatch(t, env, "--home", home, "start", "dag"); r.code != 0 {
		t.Fatalf("start dag: %s", r)
	}
	if s, _ := getStatus(t, home, "dag"); s.Counts["completed"] != 3 || s.Phase != "done" {
		t.Errorf("dag: counts %v, phase %q; want 3 completed, done", s.Counts, s.Phase)
	}
	if jobs := strings.Fields(c.Run("squeue", "-h", "--states=all", "-o", "%i|%k|%T")); len(jobs) != 3 {
		t.Errorf("the cluster ran %d jobs, want 3 (none twice): %v", len(jobs), jobs)
	}
}

// squeueShim puts an squeue on PATH (in the returned environment) that
// runs the cluster's and keeps each of its answers: answers returns them,
// one per call, in order. The test's own queries (c.Run) bypass it.
func squeueShim(t *testing.T, c *slurmtest.Cluster, env []string) (shimmed []string, answers func() []string) {
	t.Helper()
	shims, log := t.TempDir(), filepath.Join(t.TempDir(), "answers")
	writeFile(t, filepath.Join(shims, "squeue"), "#!/bin/sh\nout=$("+c.Bin("squeue")+" \"$@\")\nrc=$?\n"+
		"printf '%s\\n' \"$out\"\nprintf '%s\\n--\\n' \"$out\" >> "+log+"\nexit $rc\n")
	if err := os.Chmod(filepath.Join(shims, "squeue"), 0o755); err != nil {
		t.Fatal(err)
	}
	return append(env, "PATH="+shims+":"+os.Getenv("PATH")), func() []string {
		b, err := os.ReadFile(log)
		if err != nil {
			return nil
		}
		all := strings.Split(string(b), "--\n")
		return all[:len(all)-1] // the last is what follows the last separator
	}
}

// TestSlurmRunsADAG runs a project of three shell tasks, S02 and S03 after
// S01, on a Slurm node: each attempt is one batch job (SLURM_JOB_ID
// reaches the task, a different one each), S02 gets S01's output, and the
// project passes; no secrets file is left in any task directory.
func TestSlurmRunsADAG(t *testing.T) {
	c := slurmtest.Start(t)
	home, work, env := slurmHome(t, c, "{partition: "+slurmtest.Partition+"}")
	runDAG(t, c, home, env)
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
	if st, _ := filepath.Glob(filepath.Join(work, "dag", "tasks", "*", "status.json")); len(st) != 3 {
		t.Errorf("supervisors' status files: %v, want one per task (the glob must see the task directories)", st)
	}
	if left, _ := filepath.Glob(filepath.Join(work, "dag", "tasks", "*", slurmjob.FileSecrets)); len(left) > 0 {
		t.Errorf("secrets files left: %v", left)
	}
}

// waitUntil polls cond every 100 ms for up to a minute.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within a minute", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// slurmJobOf is the id and state of the job of project/task/attempt.
func slurmJobOf(t *testing.T, c *slurmtest.Cluster, comment string) (id, state string) {
	t.Helper()
	for _, line := range strings.Fields(c.Run("squeue", "-h", "--states=all", "-o", "%i|%k|%T")) {
		if f := strings.Split(line, "|"); len(f) == 3 && f[1] == comment {
			id, state = f[0], f[2]
		}
	}
	return id, state
}

// TestSlurmCancelAndAdminScancel: `dispatch cancel` of a running task
// cancels its job (scancel; the task is canceled and its job ends), and an
// administrator's scancel of another task's running job fails that
// attempt (no retry left) instead of leaving it running forever.
func TestSlurmCancelAndAdminScancel(t *testing.T) {
	c := slurmtest.Start(t)
	home, work, env := slurmHome(t, c, "{partition: "+slurmtest.Partition+"}")
	hold := fmt.Sprintf("---\nmax_retries: 0\n---\n# Hold\nwhile [ ! -e %s ]; do sleep 0.1; done\n", filepath.Join(t.TempDir(), "release"))
	slurmProject(t, home, "hold", map[string]string{"S01-hold.md": hold, "S02-hold.md": hold})
	finished := startBackground(t, env, "--home", home, "start", "hold")
	for _, id := range []string{"S01", "S02"} {
		waitUntil(t, id+" running under its supervisor", func() bool {
			_, _, _, st := nodeStatusJSON(t, work, "hold", id)
			return st == "running"
		})
	}
	if r := runDispatch(t, env, "--home", home, "cancel", "hold", "S01"); r.code != 0 {
		t.Fatalf("cancel: %s", r)
	}
	waitUntil(t, "S01's job cancelled", func() bool {
		_, state := slurmJobOf(t, c, "hold/S01/1")
		return state == "CANCELLED"
	})
	id2, _ := slurmJobOf(t, c, "hold/S02/1")
	c.Run("scancel", id2)
	r := finished()
	s, _ := getStatus(t, home, "hold")
	t1, t2 := s.task(t, "S01"), s.task(t, "S02")
	t.Logf("S02 after the admin's scancel: %s %s %q", t2.Status, t2.ErrorClass, t2.Error)
	if t1.Status != "canceled" || t2.Status != "failed" || t2.ErrorClass != "crash" || !strings.Contains(t2.Error, "CANCELLED") || r.code == 0 {
		t.Errorf("S01 %s, S02 %s (%s), start exit %d: want canceled, failed (a crash saying CANCELLED), non-zero\n%s", t1.Status, t2.Status, t2.ErrorClass, r.code, r)
	}
}

// TestSlurmDrainedNodeSaysWhy: while the cluster's node is drained, the
// task's job waits and `dispatch status` shows Slurm's reason; resumed,
// the project runs to the end.
func TestSlurmDrainedNodeSaysWhy(t *testing.T) {
	c := slurmtest.Start(t)
	home, _, env := slurmHome(t, c, "{partition: "+slurmtest.Partition+"}")
	c.Drain("disk swap")
	finished := startBackground(t, env, "--home", home, "start", "dag")
	var text string
	waitUntil(t, "status showing the pending reason", func() bool {
		text = runDispatch(t, env, "--home", home, "status", "dag").stdout
		return strings.Contains(text, "PENDING: ReqNodeNotAvail")
	})
	if !strings.Contains(text, "waiting: Slurm job ") {
		t.Errorf("status does not say the task waits:\n%s", text)
	}
	t.Logf("status while drained:\n%s", text)
	if strings.Contains(text, "status.json missing") {
		t.Errorf("status blames status.json for a job that waits:\n%s", text)
	}
	// The JSON, the dashboard's and MCP's source, says it too: the task
	// waits (not runs) and why, and its job's id.
	waiting := slurmTaskJSON(t, home, "status", "S01")
	if !strings.Contains(waiting["waiting"], "PENDING: ReqNodeNotAvail") || waiting["slurm_job"] == "" {
		t.Errorf("status --json of S01 while drained: %v; want waiting with the reason and slurm_job", waiting)
	}
	c.Resume()
	if r := finished(); r.code != 0 {
		t.Fatalf("start dag: %s", r)
	}
	if s, _ := getStatus(t, home, "dag"); s.Counts["completed"] != 3 {
		t.Errorf("counts %v, want 3 completed", s.Counts)
	}
	done := slurmTaskJSON(t, home, "status", "S01")
	if done["waiting"] != "" || done["slurm_job"] != waiting["slurm_job"] {
		t.Errorf("status --json of S01 done: %v; want no waiting, slurm_job %s", done, waiting["slurm_job"])
	}
	if id, _ := slurmJobOf(t, c, "dag/S01/1"); id != waiting["slurm_job"] {
		t.Errorf("S01's job is %s in squeue, %s in status", id, waiting["slurm_job"])
	}
	if a := slurmTaskJSON(t, home, "report", "S01"); a["slurm_job"] != waiting["slurm_job"] {
		t.Errorf("report --json of S01's attempt: %v; want slurm_job %s", a, waiting["slurm_job"])
	}
}

// slurmTaskJSON is the waiting and slurm_job of task id of project dag in
// `dispatch status --json` (what == "status") or of its last attempt in
// `dispatch report --json` (what == "report").
func slurmTaskJSON(t *testing.T, home, what, id string) map[string]string {
	t.Helper()
	flag := map[string][]string{"status": {"--json"}, "report": {"--format", "json"}}[what]
	r := runDispatch(t, nil, append([]string{"--home", home, what, "dag"}, flag...)...)
	if r.code != 0 {
		t.Fatalf("%s --json: %s", what, r)
	}
	type fields struct {
		ID       string `json:"id"`
		Waiting  string `json:"waiting"`
		SlurmJob string `json:"slurm_job"`
		Attempts []struct {
			SlurmJob string `json:"slurm_job"`
		} `json:"attempts"`
	}
	var v struct {
		Tasks []fields `json:"tasks"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
		t.Fatalf("%s --json: %v\n%s", what, err, r.stdout)
	}
	for _, f := range v.Tasks {
		switch {
		case f.ID != id:
		case what == "report" && len(f.Attempts) > 0:
			return map[string]string{"slurm_job": f.Attempts[len(f.Attempts)-1].SlurmJob}
		case what == "status":
			return map[string]string{"waiting": f.Waiting, "slurm_job": f.SlurmJob}
		}
	}
	t.Fatalf("%s --json: no task %s with attempts\n%s", what, id, r.stdout)
	return nil
}

// TestSlurmSqueueFailingIsUnknown: while slurmctld is down, squeue fails:
// the node's error says so, and the running task is not failed (unknown is
// not failed), even once its tool has ended; with slurmctld back, the task
// completes.
func TestSlurmSqueueFailingIsUnknown(t *testing.T) {
	c := slurmtest.Start(t)
	home, work, env := slurmHome(t, c, "{partition: "+slurmtest.Partition+"}")
	release := filepath.Join(t.TempDir(), "release")
	slurmProject(t, home, "hold", map[string]string{"project.yaml": "tool: shell\nintegration: false\nsandbox: off\n",
		"S01-hold.md": fmt.Sprintf("---\nmax_retries: 0\n---\n# Hold\nwhile [ ! -e %s ]; do sleep 0.1; done\n", release)})
	finished := startBackground(t, env, "--home", home, "start", "hold")
	waitUntil(t, "S01 running under its supervisor", func() bool {
		_, _, _, st := nodeStatusJSON(t, work, "hold", "S01")
		return st == "running"
	})
	c.StopController()
	var text string
	waitUntil(t, "status naming the failed squeue", func() bool {
		text = runDispatch(t, env, "--home", home, "status", "hold").stdout
		return strings.Contains(text, "squeue")
	})
	writeFile(t, release, "")
	waitUntil(t, "S01's tool ended", func() bool {
		_, _, _, st := nodeStatusJSON(t, work, "hold", "S01")
		return st == "completed"
	})
	if tk := taskState(t, home, "hold", "S01"); tk.Status != "running" {
		t.Errorf("with squeue failing, S01 is %s, want still running (unknown)", tk.Status)
	}
	t.Logf("status while squeue fails:\n%s", text)
	c.StartController()
	if r := finished(); r.code != 0 {
		t.Fatalf("start hold: %s", r)
	}
	if s, _ := getStatus(t, home, "hold"); s.task(t, "S01").Status != "completed" {
		t.Errorf("S01 %s, want completed", s.task(t, "S01").Status)
	}
}

// TestSlurmControllerRestartWithJobsQueued: the controller is killed while
// its first job waits in the queue (the node drained); a new `start` finds
// the job by name and comment instead of submitting it again, and the DAG
// ends with one job per task.
func TestSlurmControllerRestartWithJobsQueued(t *testing.T) {
	c := slurmtest.Start(t)
	home, _, env := slurmHome(t, c, "{partition: "+slurmtest.Partition+"}")
	c.Drain("controller restart test")
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	cmd, _, _ := dispatchCmd(ctx, env, "--home", home, "start", "dag")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "S01's job queued", func() bool {
		id, state := slurmJobOf(t, c, "dag/S01/1")
		return id != "" && state == "PENDING"
	})
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	c.Resume()
	runDAG(t, c, home, env)
}

// TestSlurmAdminScancelBeforeStartRunsAgain: an administrator cancels a
// task's job while it waits in the queue: the attempt is lost, not
// failed, and the task runs again without using a retry (it has none)
// and completes.
func TestSlurmAdminScancelBeforeStartRunsAgain(t *testing.T) {
	c := slurmtest.Start(t)
	home, _, env := slurmHome(t, c, "{partition: "+slurmtest.Partition+"}")
	slurmProject(t, home, "once", map[string]string{"S01-once.md": "---\nmax_retries: 0\n---\n# Once\necho done > done.txt\n"})
	c.Drain("admin cancels")
	finished := startBackground(t, env, "--home", home, "start", "once")
	var id string
	waitUntil(t, "S01's job queued", func() bool {
		var state string
		id, state = slurmJobOf(t, c, "once/S01/1")
		return id != "" && state == "PENDING"
	})
	c.Run("scancel", id)
	waitUntil(t, "attempt 2 submitted", func() bool {
		id2, _ := slurmJobOf(t, c, "once/S01/2")
		return id2 != ""
	})
	c.Resume()
	if r := finished(); r.code != 0 {
		t.Fatalf("start once: %s", r)
	}
	s, _ := getStatus(t, home, "once")
	if tk := s.task(t, "S01"); tk.Status != "completed" || tk.Attempt != 2 {
		t.Errorf("S01 %s at attempt %d, want completed at attempt 2", tk.Status, tk.Attempt)
	}
}

// TestSlurmSbatchFailingAfterSubmitting: an sbatch that submits the job
// and then fails (as one whose answer timed out) leaves the launch in
// doubt; the next status finds the job by its name and comment and adopts
// it: the DAG ends with one job per task, none submitted twice.
func TestSlurmSbatchFailingAfterSubmitting(t *testing.T) {
	c := slurmtest.Start(t)
	home, _, env := slurmHome(t, c, "{partition: "+slurmtest.Partition+"}")
	shims := t.TempDir()
	writeFile(t, filepath.Join(shims, "sbatch"), "#!/bin/sh\n"+c.Bin("sbatch")+" \"$@\" >/dev/null || exit 1\n"+
		"echo 'sbatch: error: Socket timed out on send/recv operation' >&2\nexit 1\n")
	if err := os.Chmod(filepath.Join(shims, "sbatch"), 0o755); err != nil {
		t.Fatal(err)
	}
	env = append(env, "PATH="+shims+":"+os.Getenv("PATH"))
	runDAG(t, c, home, env)
}

// TestSlurmMaxPending: with the cluster's node drained, a node of 4 slots
// and max_pending: 1 submits one job of the three runnable tasks and no
// more while it waits: each of the controller's squeue answers (kept by a
// shim on PATH, one a poll), over ten polls after the first that lists a
// job, lists one job pending at most; resumed, the three complete.
func TestSlurmMaxPending(t *testing.T) {
	c := slurmtest.Start(t)
	home, _, env := slurmHome(t, c, "{partition: "+slurmtest.Partition+", max_pending: 1}")
	w := "# W\necho ok > ok.txt\n"
	slurmProject(t, home, "wide", map[string]string{"S01-w.md": w, "S02-w.md": w, "S03-w.md": w})
	env, answers := squeueShim(t, c, env)
	c.Drain("max pending")
	finished := startBackground(t, env, "--home", home, "start", "wide")
	pending := func(answer string) int { return strings.Count(answer, "|PENDING|") }
	const polls = 10
	var seen []string
	waitUntil(t, fmt.Sprintf("%d squeue answers after the first that lists a job", polls), func() bool {
		seen = answers()
		first := slices.IndexFunc(seen, func(a string) bool { return pending(a) > 0 })
		return first >= 0 && len(seen) > first+polls
	})
	for i, a := range seen {
		if n := pending(a); n > 1 {
			t.Fatalf("squeue answer %d of %d lists %d jobs pending, want at most max_pending (1):\n%s", i+1, len(seen), n, a)
		}
	}
	c.Resume()
	if r := finished(); r.code != 0 {
		t.Fatalf("start wide: %s", r)
	}
	if s, _ := getStatus(t, home, "wide"); s.Counts["completed"] != 3 {
		t.Errorf("counts %v, want 3 completed", s.Counts)
	}
}

// TestSlurmJobTimeLimit: a task that outlives its job's time limit
// (slurm.time: 1m, Slurm's least) is ended by Slurm and fails as an
// ordinary crash, its retries used; it is not run again behind the
// user's back. Slurm enforces limits every 30 s: over a minute of test.
func TestSlurmJobTimeLimit(t *testing.T) {
	c := slurmtest.Start(t)
	home, _, env := slurmHome(t, c, "{partition: "+slurmtest.Partition+", time: 1m}")
	slurmProject(t, home, "long", map[string]string{"S01-long.md": "---\nmax_retries: 0\n---\n# Long\nsleep 600\n"})
	start := time.Now()
	r := runDispatch(t, env, "--home", home, "start", "long")
	s, _ := getStatus(t, home, "long")
	t1 := s.task(t, "S01")
	t.Logf("after %s: S01 %s %s %q; start exit %d", time.Since(start).Round(time.Second), t1.Status, t1.ErrorClass, t1.Error, r.code)
	if t1.Status != "failed" || t1.ErrorClass != "crash" || !strings.Contains(t1.Error, "Slurm") || t1.Attempt != 1 || r.code == 0 {
		t.Errorf("S01 %s (%s, attempt %d), start exit %d: want failed, crash saying Slurm ended it, attempt 1, non-zero\n%s", t1.Status, t1.ErrorClass, t1.Attempt, r.code, r)
	}
	if _, state := slurmJobOf(t, c, "long/S01/1"); state != "TIMEOUT" {
		t.Errorf("S01's job ended %s, want TIMEOUT (its --time)", state)
	}
}

// TestSlurmManyTasksOneQueryPerTick: 200 tasks on a Slurm node of 20
// slots complete, one job each, and squeue (a counting shim on PATH) is
// called once per poll, never per task: the calls stay within the polls
// the run's time allows (200 ms each; twice that and a few for slack),
// where a query per task would make 200 and more in the first tick alone.
func TestSlurmManyTasksOneQueryPerTick(t *testing.T) {
	if testing.Short() {
		t.Skip("200 Slurm jobs: not in -short")
	}
	c := slurmtest.Start(t)
	home, _, env := slurmHome(t, c, "{partition: "+slurmtest.Partition+"}")
	cfg := filepath.Join(home, "nodes.yaml")
	writeFile(t, cfg, strings.Replace(readFile(t, cfg), "slots: 4", "slots: 20", 1))
	specs := map[string]string{}
	for i := 1; i <= 200; i++ {
		specs[fmt.Sprintf("S%03d-m.md", i)] = "# M\necho ok > ok.txt\n"
	}
	slurmProject(t, home, "many", specs)
	env, answers := squeueShim(t, c, env)
	start := time.Now()
	if r := startBackground(t, env, "--home", home, "start", "many")(); r.code != 0 {
		t.Fatalf("start many: %s", r)
	}
	took := time.Since(start)
	if s, _ := getStatus(t, home, "many"); s.Counts["completed"] != 200 {
		t.Errorf("counts %v, want 200 completed", s.Counts)
	}
	n := len(answers())
	polls := int(took / (200 * time.Millisecond))
	t.Logf("200 tasks in %s: %d squeue calls, %d polls of 200 ms", took.Round(time.Second), n, polls)
	if n == 0 || n > 2*polls+10 {
		t.Errorf("%d squeue calls in %s (%d polls): want one per poll at most (the slack: twice and 10)", n, took, polls)
	}
}
