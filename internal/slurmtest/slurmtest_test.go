package slurmtest

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestFind(t *testing.T) {
	all := func(name string) (string, error) { return "/bin/" + name, nil }
	none := func(string) (string, error) { return "", errors.New("not found") }
	noSbatch := func(name string) (string, error) {
		if name == "sbatch" {
			return "", errors.New("not found")
		}
		return "/bin/" + name, nil
	}
	for _, tc := range []struct {
		name    string
		euid    int
		look    func(string) (string, error)
		sbin    bool // every program in the sbin directory
		wantErr string
	}{
		{"root with everything", 0, all, false, ""},
		{"not root", 1000, all, false, "needs root"},
		{"one client missing", 0, noSbatch, false, "sbatch not found"},
		{"nothing", 0, none, false, "munged, slurmctld, slurmd, sbatch"},
		{"daemons off PATH, in sbin", 0, none, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sbin := t.TempDir()
			if tc.sbin {
				for _, name := range append(append([]string{}, daemons...), clients...) {
					if err := os.WriteFile(filepath.Join(sbin, name), nil, 0o755); err != nil {
						t.Fatal(err)
					}
				}
			}
			bins, err := find(tc.euid, tc.look, sbin)
			if tc.wantErr == "" {
				if err != nil || bins["slurmctld"] == "" || bins["squeue"] == "" {
					t.Fatalf("find = %v, %v", bins, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("find error = %v, want it to say %q", err, tc.wantErr)
			}
		})
	}
}

func TestConfNamesItsPortsAndDir(t *testing.T) {
	c := conf("/d", "host1", "CPUs=2 RealMemory=100", []int{7001, 7002})
	for _, want := range []string{
		"SlurmctldHost=host1(127.0.0.1)", "SlurmctldPort=7001", "SlurmdPort=7002",
		"AuthInfo=socket=/d/munge/socket", "StateSaveLocation=/d/state",
		"NodeName=host1 NodeAddr=127.0.0.1 CPUs=2 RealMemory=100",
		"PartitionName=debug Nodes=host1 Default=YES",
	} {
		if !strings.Contains(c, want+"\n") && !strings.Contains(c, want+" ") {
			t.Errorf("slurm.conf lacks %q:\n%s", want, c)
		}
	}
}

// TestClusterRunsAJob runs a job on a real cluster, drains the node (a
// pending job says why), resumes it, and takes the controller away and
// back (squeue fails, then the job is still known).
func TestClusterRunsAJob(t *testing.T) {
	c := Start(t)
	out := filepath.Join(c.Dir, "job.out")
	id := strings.TrimSpace(c.Run("sbatch", "--parsable", "-J", "probe", "-o", out,
		"--wrap", "echo ran $SLURM_JOB_ID"))
	waitFile(t, out, "ran "+id)

	c.Drain("disk full")
	if st, _ := c.NodeState(); !strings.HasPrefix(st, "drain") {
		t.Fatalf("node state after drain = %q", st)
	}
	out2 := filepath.Join(c.Dir, "job2.out")
	id2 := strings.TrimSpace(c.Run("sbatch", "--parsable", "-J", "waits", "-o", out2, "--wrap", "echo ran"))
	waitJob(t, c, id2, "PENDING")
	c.Resume()
	waitFile(t, out2, "ran")

	c.StopController()
	if _, err := c.try("squeue", "-h"); err == nil {
		t.Fatal("squeue answered with slurmctld stopped")
	}
	c.StartController()
	if _, err := c.try("squeue", "-h"); err != nil {
		t.Fatalf("squeue after restart: %v", err)
	}
}

// TestTwoClustersSideBySide: two tests' clusters do not share anything.
func TestTwoClustersSideBySide(t *testing.T) {
	a, b := Start(t), Start(t)
	if a.Conf == b.Conf {
		t.Fatal("two clusters share slurm.conf")
	}
	out := filepath.Join(b.Dir, "b.out")
	b.Run("sbatch", "-J", "onb", "-o", out, "--wrap", "echo b")
	waitFile(t, out, "b")
	for _, j := range a.Jobs() {
		if strings.Contains(j, "onb") {
			t.Fatalf("cluster a lists b's job: %v", a.Jobs())
		}
	}
}

func waitFile(t *testing.T, path, want string) {
	t.Helper()
	err := waitFor(60*time.Second, func() error {
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if !strings.Contains(string(b), want) {
			return errors.New(string(b))
		}
		return nil
	})
	if err != nil {
		t.Fatalf("%s does not say %q: %v", path, want, err)
	}
}

func waitJob(t *testing.T, c *Cluster, id, state string) {
	t.Helper()
	var last []string
	err := waitFor(30*time.Second, func() error {
		last = c.Jobs()
		for _, j := range last {
			if strings.HasPrefix(j, id+"|") && strings.Contains(j, "|"+state+"|") {
				return nil
			}
		}
		return errors.New("not yet")
	})
	if err != nil {
		t.Fatalf("job %s never %s: %v", id, state, last)
	}
}
