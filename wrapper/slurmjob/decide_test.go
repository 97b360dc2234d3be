package slurmjob

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestParseQueue: each line is id|state|comment|reason; Slurm's "None"
// is no reason, a reason may hold anything but a newline, a comment not
// dispatch's gives attempt 0, and a line not in the format fails the
// whole answer.
func TestParseQueue(t *testing.T) {
	out := "12|PENDING|web/S01/2|ReqNodeNotAvail, UnavailableNodes:n1|odd\n" +
		"13|RUNNING|web/S02/1|None\n" +
		"14|CANCELLED|hand written|None\n" +
		"15|PENDING|web/S0 3/1|Priority\n\n"
	got, err := ParseQueue([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	want := []QueueJob{
		{ID: "12", State: "PENDING", Reason: "ReqNodeNotAvail, UnavailableNodes:n1|odd", Project: "web", Task: "S01", Attempt: 2},
		{ID: "13", State: "RUNNING", Project: "web", Task: "S02", Attempt: 1},
		{ID: "14", State: "CANCELLED"},
		{ID: "15", State: "PENDING", Reason: "Priority"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("jobs =\n%+v\nwant\n%+v", got, want)
	}
	for _, bad := range []string{"12|PENDING|web/S01/2\n", "x12|PENDING|a/b/1|None\n", "|PENDING|a/b/1|None\n", "12||a/b/1|None\n", "squeue: error: cannot connect\n"} {
		if _, err := ParseQueue([]byte(bad)); err == nil {
			t.Errorf("ParseQueue(%q) took it", bad)
		}
	}
	for _, c := range []string{"a/b/01", "a/b/0", "a/b/-1", "a/b", "a/b/1/2", "/b/1"} {
		if p, task, n := parseComment(c); n != 0 {
			t.Errorf("parseComment(%q) = %s %s %d, want none", c, p, task, n)
		}
	}
}

// TestQueueArgs: one query for every job of the home, every state.
func TestQueueArgs(t *testing.T) {
	want := []string{"squeue", "--noheader", "--me", "--states=all", "--name=dispatch-h1", "--format=%i|%T|%k|%r"}
	if got := QueueArgs("h1"); !reflect.DeepEqual(got, want) {
		t.Errorf("QueueArgs = %q, want %q", got, want)
	}
}

// TestDecide: what one attempt's job state means.
func TestDecide(t *testing.T) {
	now := time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC)
	const grace = time.Minute
	job := func(state, reason string) *QueueJob { return &QueueJob{ID: "7", State: state, Reason: reason} }
	tests := []struct {
		name   string
		o      Observation
		action Action
		reason string // contained in Verdict.Reason
		since  time.Time
	}{
		{"final wins over a failed squeue", Observation{Final: true}, Settle, "", time.Time{}},
		{"final wins over a cancel", Observation{QueryOK: true, Final: true, Job: job("CANCELLED", "")}, Settle, "", time.Time{}},
		{"squeue failed", Observation{Started: true, Since: now.Add(-time.Hour)}, Unknown, "squeue failed", now.Add(-time.Hour)},
		{"pending shows the reason", Observation{QueryOK: true, Job: job("PENDING", "ReqNodeNotAvail, UnavailableNodes:n1")}, Watch,
			"Slurm job 7 PENDING: ReqNodeNotAvail, UnavailableNodes:n1", time.Time{}},
		{"pending without a reason", Observation{QueryOK: true, Job: job("PENDING", "")}, Watch, "Slurm job 7 PENDING", time.Time{}},
		{"running", Observation{QueryOK: true, Started: true, Job: job("RUNNING", ""), Since: now.Add(-time.Hour)}, Watch, "", time.Time{}},
		{"running, wrapper not yet started: no reason, so it can be hung", Observation{QueryOK: true, Job: job("RUNNING", "")}, Watch, "", time.Time{}},
		{"gone: grace starts", Observation{QueryOK: true, Started: true}, Watch, "", now},
		{"gone within grace", Observation{QueryOK: true, Started: true, Since: now.Add(-30 * time.Second)}, Watch, "", now.Add(-30 * time.Second)},
		{"gone after grace", Observation{QueryOK: true, Started: true, Since: now.Add(-grace)}, Lost, "left the Slurm queue", now.Add(-grace)},
		{"gone before start after grace", Observation{QueryOK: true, Since: now.Add(-grace)}, Lost, "left the Slurm queue", now.Add(-grace)},
		{"cancelled before start: grace", Observation{QueryOK: true, Job: job("CANCELLED", "")}, Watch, "", now},
		{"cancelled before start", Observation{QueryOK: true, Job: job("CANCELLED", ""), Since: now.Add(-2 * grace)}, Again, "ended CANCELLED before the wrapper started", now.Add(-2 * grace)},
		{"node failure before start", Observation{QueryOK: true, Job: job("NODE_FAIL", ""), Since: now.Add(-grace)}, Again, "NODE_FAIL", now.Add(-grace)},
		{"preempted before start", Observation{QueryOK: true, Job: job("PREEMPTED", ""), Since: now.Add(-grace)}, Again, "PREEMPTED", now.Add(-grace)},
		{"cancelled after start", Observation{QueryOK: true, Started: true, Job: job("CANCELLED", ""), Since: now.Add(-grace)}, Crash, "ended CANCELLED without the wrapper's final status", now.Add(-grace)},
		{"preempted after start", Observation{QueryOK: true, Started: true, Job: job("PREEMPTED", ""), Since: now.Add(-grace)}, Crash, "PREEMPTED", now.Add(-grace)},
		{"time limit", Observation{QueryOK: true, Started: true, Job: job("TIMEOUT", "TimeLimit"), Since: now.Add(-grace)}, Crash, "ended TIMEOUT (its --time limit) (TimeLimit)", now.Add(-grace)},
		{"failed before start", Observation{QueryOK: true, Job: job("FAILED", "NonZeroExitCode"), Since: now.Add(-grace)}, Crash, "before the wrapper started (see slurm.out", now.Add(-grace)},
		{"completed without final", Observation{QueryOK: true, Started: true, Job: job("COMPLETED", ""), Since: now.Add(-grace)}, Crash, "COMPLETED without", now.Add(-grace)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v := Decide(tc.o, now, grace)
			if v.Action != tc.action || !strings.Contains(v.Reason, tc.reason) || !v.Since.Equal(tc.since) {
				t.Errorf("Decide = %+v, want %s %q since %v", v, tc.action, tc.reason, tc.since)
			}
			if tc.reason == "" && tc.action == Watch && v.Reason != "" {
				t.Errorf("reason %q, want none", v.Reason)
			}
		})
	}
}

// TestAfterSubmitError: after sbatch failed, the attempt's job is adopted
// when the query finds it (the newest of several), submitted again when it
// does not, and nothing is submitted while squeue fails too.
func TestAfterSubmitError(t *testing.T) {
	jobs := []QueueJob{
		{ID: "9", Project: "web", Task: "S01", Attempt: 1},
		{ID: "10", Project: "web", Task: "S01", Attempt: 2},
		{ID: "100", Project: "web", Task: "S01", Attempt: 2},
		{ID: "11", Project: "web", Task: "S02", Attempt: 2},
	}
	if s, _ := AfterSubmitError(false, jobs, "web", "S01", 2); s != Hold {
		t.Errorf("squeue failed: %s, want %s", s, Hold)
	}
	if s, j := AfterSubmitError(true, jobs, "web", "S01", 2); s != Adopt || j.ID != "100" {
		t.Errorf("submitted: %s %s, want %s 100", s, j.ID, Adopt)
	}
	if s, _ := AfterSubmitError(true, jobs, "web", "S03", 1); s != SubmitAgain {
		t.Errorf("not submitted: %s, want %s", s, SubmitAgain)
	}
}

// TestDecideProbe: the file with the nonce proves work_dir shared; a job
// seen ended twice without it proves the opposite, saying how it ended
// when that was not a success; a waiting job or a failed squeue waits.
func TestDecideProbe(t *testing.T) {
	job := func(state, reason string) *QueueJob { return &QueueJob{ID: "5", State: state, Reason: reason} }
	tests := []struct {
		name     string
		p        Probe
		done, ok bool
		ended    bool
		msg      string
	}{
		{"file", Probe{File: "n1 5 c01\n"}, true, true, false, "work_dir is shared: probe job 5 wrote it on c01"},
		{"file of another check", Probe{File: "n0 5 c01\n", QueryOK: true, Job: job("RUNNING", "")}, false, false, false, "Slurm job 5 RUNNING"},
		{"pending", Probe{QueryOK: true, Job: job("PENDING", "Resources")}, false, false, false, "Slurm job 5 PENDING: Resources"},
		{"squeue failed", Probe{}, false, false, false, "squeue failed"},
		{"ended once", Probe{QueryOK: true, Job: job("COMPLETED", "")}, false, false, true, "looking once more"},
		{"gone once", Probe{QueryOK: true}, false, false, true, "looking once more"},
		{"not shared", Probe{QueryOK: true, Job: job("COMPLETED", ""), EndedBefore: true}, true, false, false, "must be on a filesystem the login host and the compute nodes share"},
		{"gone, not shared", Probe{QueryOK: true, EndedBefore: true}, true, false, false, "must be on a filesystem"},
		{"failed", Probe{QueryOK: true, Job: job("FAILED", "NonZeroExitCode"), EndedBefore: true}, true, false, false, "ended FAILED (NonZeroExitCode) without writing its file"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.p.Nonce = "n1"
			r := DecideProbe(tc.p)
			if r.Done != tc.done || r.OK != tc.ok || r.Ended != tc.ended || !strings.Contains(r.Msg, tc.msg) {
				t.Errorf("DecideProbe = %+v, want done %v ok %v ended %v %q", r, tc.done, tc.ok, tc.ended, tc.msg)
			}
		})
	}
}

// TestProbeScript runs the probe's script: it writes the nonce, the job
// id and the host in one file in work_dir, nothing else.
func TestProbeScript(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command("sh", "-c", ProbeScript(dir, "n1"))
	cmd.Env = append(os.Environ(), "SLURM_JOB_ID=77")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	got, err := os.ReadFile(filepath.Join(dir, ProbeFile("n1")))
	host, _ := os.Hostname()
	if err != nil || DecideProbe(Probe{Nonce: "n1", File: string(got)}).Msg != "work_dir is shared: probe job 77 wrote it on "+host {
		t.Errorf("probe file %q, %v", got, err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("work_dir holds %d files, want the probe's alone", len(entries))
	}
	if _, err := ProbeArgs(Cluster{}, "h", "relative", "n1"); err == nil {
		t.Error("ProbeArgs took a relative work_dir")
	}
}

// TestUnasked: an unsuccessful final status dispatch did not ask for
// waits for the job's end, then is said as Slurm's end of the job.
func TestUnasked(t *testing.T) {
	job := func(state, reason string) *QueueJob { return &QueueJob{ID: "7", State: state, Reason: reason} }
	for _, tc := range []struct {
		name   string
		job    *QueueJob
		killed bool
		waited time.Duration
		hold   bool
		want   string // the reason's start
	}{
		{"time limit", job("TIMEOUT", "TimeLimit"), false, 0, false, "Slurm job 7 ended TIMEOUT (its --time limit) (TimeLimit): the supervisor was signalled by Slurm"},
		{"an admin's scancel, the tool's exit 143", job("CANCELLED", ""), false, 0, false, "Slurm job 7 ended CANCELLED: the supervisor"},
		{"still completing: hold", job("COMPLETING", ""), true, time.Second, true, ""},
		{"completing past grace, killed", job("COMPLETING", ""), true, time.Minute, false, "Slurm job 7 was ended by Slurm, not by dispatch (its --time limit"},
		{"not listed, killed", nil, true, 0, false, "Slurm job 7 was ended by Slurm, not by dispatch"},
		{"the job failed: the wrapper's word", job("FAILED", "NonZeroExitCode"), false, 0, false, ""},
		{"not listed, a failure of its own", nil, false, 0, false, ""},
	} {
		hold, got := Unasked(tc.job, "7", tc.killed, tc.waited, 10*time.Second)
		if hold != tc.hold || !strings.HasPrefix(got, tc.want) || (tc.want == "") != (got == "") {
			t.Errorf("%s: hold %v, %q; want hold %v, a reason starting %q", tc.name, hold, got, tc.hold, tc.want)
		}
	}
}
