package executor

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/slurmjob"
)

// listed is an inner executor whose Status is a fixed listing of task
// directories (the wrapper's word, a fresh copy each call).
type listed struct{ tasks func() []wire.TaskStatus }

func (l listed) Launch(context.Context, *nodes.Installed, []wire.LaunchItem) []Launched { return nil }
func (l listed) Status(context.Context, *nodes.Installed, Query) (*wire.NodeStatus, error) {
	return &wire.NodeStatus{Tasks: l.tasks()}, nil
}
func (l listed) Kill(_ context.Context, _ *nodes.Installed, ks []Kill) []Killed {
	return make([]Killed, len(ks))
}
func (l listed) Close() {}

// TestSlurmSqueueOutageIsUnknown: squeue failing for longer than
// node_offline_timeout never makes Status an error (which would put the
// node offline and lose its tasks while their jobs run on): an attempt of
// a known job, or without a final status, stays alive and waits, saying
// squeue failed, its status (even a final one) held back; a finished task
// of no job is the wrapper's word. Once squeue answers, the job decides.
func TestSlurmSqueueOutageIsUnknown(t *testing.T) {
	bin := t.TempDir()
	squeue := filepath.Join(bin, "squeue")
	write := func(script string) {
		if err := os.WriteFile(squeue, []byte("#!/bin/sh\n"+script), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	write("echo 'slurm_load_jobs error: Unable to contact slurm controller' >&2; exit 1\n")
	t.Setenv("PATH", bin+":"+os.Getenv("PATH"))
	tasks := func() []wire.TaskStatus {
		return []wire.TaskStatus{
			{Project: "p", Task: "S01", Dir: "/w/p/tasks/S01", Status: &wire.Status{Attempt: 1, Status: wire.StatusCompleted}},
			{Project: "p", Task: "S02", Dir: "/w/p/tasks/S02", StatusError: "status.json missing"},
			{Project: "p", Task: "S03", Dir: "/w/p/tasks/S03", Status: &wire.Status{Attempt: 1, Status: wire.StatusCompleted}},
		}
	}
	now := time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC)
	s := NewSlurm(nodes.Node{Name: "hpc", Slurm: &nodes.Slurm{}}, nodes.NewLocal(), listed{tasks}, func() time.Duration { return 10 * time.Second }, "/h")
	s.now = func() time.Time { return now }
	s.jobs["/w/p/tasks/S01"] = slurmJob{id: "7", attempt: 1}
	for tick := 0; tick < 3; tick++ {
		st, err := s.Status(context.Background(), &nodes.Installed{}, Query{})
		if err != nil {
			t.Fatalf("tick %d: Status = %v, want the node's answer", tick, err)
		}
		for _, ts := range st.Tasks[:2] {
			if !ts.Alive || ts.Status != nil || ts.Again != "" || !strings.Contains(ts.Waiting, "squeue failed: exit 1: slurm_load_jobs error") {
				t.Errorf("tick %d: %s = %+v, want alive, waiting on squeue, no status", tick, ts.Task, ts)
			}
		}
		if ts := st.Tasks[2]; ts.Alive || ts.Waiting != "" || ts.Status == nil {
			t.Errorf("tick %d: S03 (no job, finished) = %+v, want the wrapper's word", tick, ts)
		}
		now = now.Add(time.Hour)
	}
	write("echo '7|COMPLETED|p/S01/1|None'\n")
	st, err := s.Status(context.Background(), &nodes.Installed{}, Query{})
	if err != nil {
		t.Fatal(err)
	}
	if ts := st.Tasks[0]; ts.Waiting != "" || !ts.Status.Final() {
		t.Errorf("squeue back: S01 = %+v, want its final status", ts)
	}
}

// TestSlurmDropsUnreadSecrets: an attempt's secrets file, which only its
// job's script deletes, goes when no job will read it: sbatch refused the
// job, the job ended (here cancelled) before its wrapper started, or a
// kill left no job of the attempt. A job that started keeps nothing to
// drop; a job still queued keeps its file.
func TestSlurmDropsUnreadSecrets(t *testing.T) {
	bin, work := t.TempDir(), t.TempDir()
	script := func(name, body string) {
		if err := os.WriteFile(filepath.Join(bin, name), []byte("#!/bin/sh\n"+body), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", bin+":"+os.Getenv("PATH"))
	secrets := func(task string) string {
		dir := filepath.Join(work, "p", "tasks", task)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		f := filepath.Join(dir, slurmjob.FileSecrets)
		if err := os.WriteFile(f, []byte(`[{"env":{"KEY":"k"}}]`), 0o600); err != nil {
			t.Fatal(err)
		}
		return f
	}
	gone := func(what, f string, want bool) {
		t.Helper()
		if _, err := os.Stat(f); os.IsNotExist(err) != want {
			t.Errorf("%s: secrets file gone = %v, want %v", what, !want, want)
		}
	}
	now := time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC)
	var tasks []wire.TaskStatus
	s := NewSlurm(nodes.Node{Name: "hpc", Slurm: &nodes.Slurm{}}, nodes.NewLocal(), listed{func() []wire.TaskStatus { return append([]wire.TaskStatus(nil), tasks...) }},
		func() time.Duration { return 10 * time.Second }, "/h")
	s.now = func() time.Time { return now }
	inst := &nodes.Installed{Path: "/usr/bin/false"}

	refused := secrets("S01")
	script("sbatch", "cat >/dev/null; echo 'sbatch: error: Batch job submission failed: Invalid account' >&2; exit 1\n")
	item := wire.LaunchItem{Dir: filepath.Dir(refused), Launch: wire.Launch{Project: "p", Task: "S01", Attempt: 1}}
	if l := s.submit(context.Background(), inst, item); l.Err == nil {
		t.Fatalf("refused sbatch: %+v, want its error", l)
	}
	gone("sbatch refused", refused, true)

	cancelled, queued := secrets("S02"), secrets("S03")
	s.jobs[filepath.Dir(cancelled)] = slurmJob{id: "8", attempt: 1}
	s.jobs[filepath.Dir(queued)] = slurmJob{id: "9", attempt: 1}
	tasks = []wire.TaskStatus{{Project: "p", Task: "S02", Dir: filepath.Dir(cancelled)}, {Project: "p", Task: "S03", Dir: filepath.Dir(queued)}}
	script("squeue", "echo '8|CANCELLED|p/S02/1|None'; echo '9|PENDING|p/S03/1|Priority'\n")
	for tick := 0; tick < 2; tick++ { // the grace, then the end
		if _, err := s.Status(context.Background(), inst, Query{}); err != nil {
			t.Fatal(err)
		}
		now = now.Add(time.Minute)
	}
	gone("cancelled before its start", cancelled, true)
	gone("queued", queued, false)

	script("squeue", "exit 0\n")
	if k := s.Kill(context.Background(), inst, []Kill{{Dir: filepath.Dir(queued)}}); k[0].Err != nil {
		t.Fatal(k[0].Err)
	}
	gone("killed, no job left", queued, true)
}

// TestSlurmKillSurvivesRestart: a controller that restarts after it
// cancelled, stopped or preempted an attempt has a new executor with no
// memory of the kill; the database's word (Query.Running: the task is no
// longer claimed or running there) says dispatch ended it, so the job's
// CANCELLED end and the supervisor's "killed on request" stand as the kill
// dispatch asked for: neither read as Slurm's own end (a crash) nor held
// back while the job completes. A task the database still runs was ended
// by Slurm (an administrator's scancel), as when the database is unread.
func TestSlurmKillSurvivesRestart(t *testing.T) {
	bin := t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "squeue"), []byte("#!/bin/sh\necho '7|CANCELLED|p/S01/1|None'; echo '8|COMPLETING|p/S02/1|None'\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+":"+os.Getenv("PATH"))
	killed := func(id string) wire.TaskStatus {
		return wire.TaskStatus{Project: "p", Task: id, Dir: "/w/p/tasks/" + id, Status: &wire.Status{Attempt: 1, Status: wire.StatusKilled,
			ErrorClass: wire.ClassKilled, Error: "killed on request"}}
	}
	for _, tc := range []struct {
		name    string
		running []string
		// s01 and s02 are each task's status after Status: its class, or
		// "held" (no status, alive).
		s01, s02 string
	}{
		{name: "cancelled by dispatch, then a restart", running: []string{}, s01: wire.ClassKilled, s02: wire.ClassKilled},
		{name: "only S02 cancelled by dispatch", running: []string{"p/S01"}, s01: wire.ClassCrash, s02: wire.ClassKilled},
		{name: "scancelled by an administrator", running: []string{"p/S01", "p/S02"}, s01: wire.ClassCrash, s02: "held"},
		{name: "the database unread", running: nil, s01: wire.ClassCrash, s02: "held"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewSlurm(nodes.Node{Name: "hpc", Slurm: &nodes.Slurm{}}, nodes.NewLocal(),
				listed{func() []wire.TaskStatus { return []wire.TaskStatus{killed("S01"), killed("S02")} }},
				func() time.Duration { return 10 * time.Second }, "/h")
			st, err := s.Status(context.Background(), &nodes.Installed{}, Query{Running: tc.running})
			if err != nil {
				t.Fatal(err)
			}
			for i, want := range []string{tc.s01, tc.s02} {
				ts := st.Tasks[i]
				got := "held"
				if ts.Status != nil {
					got = ts.Status.ErrorClass
				} else if !ts.Alive {
					got = "gone"
				}
				if got != want {
					t.Errorf("%s: %s (%+v), want %s", ts.Task, got, ts.Status, want)
				}
				if got == wire.ClassCrash && !strings.Contains(ts.Status.Error, "CANCELLED") {
					t.Errorf("%s: a crash saying %q, want how Slurm ended the job", ts.Task, ts.Status.Error)
				}
			}
		})
	}
}
