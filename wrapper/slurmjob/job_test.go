package slurmjob

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/wire"
)

func testJob() Job {
	return Job{Home: "h1a2b3c", Project: "web", Task: "S01", Attempt: 2, Dir: "/shared/work/web/S01", Wrapper: "/shared/bin/dispatch-wrapper"}
}

// TestSbatchArgs: the command line names the home and the attempt, asks
// for the id alone and no requeue, maps limits and the cluster's keys,
// and appends extra; a job dispatch could not find again is refused.
func TestSbatchArgs(t *testing.T) {
	base := []string{"sbatch", "--parsable", "--no-requeue", "--job-name=dispatch-h1a2b3c", "--comment=web/S01/2",
		"--chdir=/shared/work/web/S01", "--output=/shared/work/web/S01/slurm.out"}
	tests := []struct {
		name    string
		cluster Cluster
		job     func(*Job)
		want    []string // after base
		err     string
	}{
		{"bare", Cluster{}, nil, nil, ""},
		{"cluster keys", Cluster{Partition: "gpu", Account: "lab", QOS: "urgent", Extra: []string{"--gres=gpu:1"}}, nil,
			[]string{"--partition=gpu", "--account=lab", "--qos=urgent", "--gres=gpu:1"}, ""},
		{"limits", Cluster{}, func(j *Job) { j.Limits = wire.Limits{MemoryBytes: 3<<30 + 1, CPU: 1.5, Pids: 100} },
			[]string{"--mem=3073M", "--cpus-per-task=2"}, ""},
		{"cluster time", Cluster{Time: 4 * time.Hour}, nil, []string{"--time=0-04:00:00"}, ""},
		{"timeout shortens it", Cluster{Time: 4 * time.Hour}, func(j *Job) { j.Timeout = 30 * time.Minute }, []string{"--time=0-00:35:00"}, ""},
		{"timeout alone", Cluster{}, func(j *Job) { j.Timeout = 47*time.Hour + 30*time.Second }, []string{"--time=1-23:06:00"}, ""},
		{"cluster time shorter", Cluster{Time: time.Hour}, func(j *Job) { j.Timeout = 2 * time.Hour }, []string{"--time=0-01:00:00"}, ""},
		{"owned extra", Cluster{Extra: []string{"--wrap=x"}}, nil, nil, "--wrap is set by dispatch"},
		{"relative dir", Cluster{}, func(j *Job) { j.Dir = "work/S01" }, nil, "must be absolute"},
		{"task with a bar", Cluster{}, func(j *Job) { j.Task = "S|01" }, nil, "not a plain name"},
		{"home with a slash", Cluster{}, func(j *Job) { j.Home = "a/b" }, nil, "not a plain name"},
		{"attempt zero", Cluster{}, func(j *Job) { j.Attempt = 0 }, nil, "not positive"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			j := testJob()
			if tc.job != nil {
				tc.job(&j)
			}
			got, err := SbatchArgs(tc.cluster, j)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if want := append(append([]string{}, base...), tc.want...); !reflect.DeepEqual(got, want) {
				t.Errorf("args =\n%q\nwant\n%q", got, want)
			}
		})
	}
}

// TestSbatchArgsOwned: every option SbatchArgs writes is one extra may
// not give (Owned), so a user's extra can never contradict it.
func TestSbatchArgsOwned(t *testing.T) {
	j := testJob()
	j.Limits, j.Timeout = wire.Limits{MemoryBytes: 1 << 30, CPU: 1}, time.Hour
	args, err := SbatchArgs(Cluster{Partition: "p", Account: "a", QOS: "q"}, j)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range args[1:] {
		name, _, _ := strings.Cut(a, "=")
		if _, ok := Owned[name]; !ok {
			t.Errorf("SbatchArgs writes %s, which Owned lacks", name)
		}
	}
}

// TestCheckExtra: whole long options pass; dispatch's own (long, short or
// abbreviated), bare words and control characters are refused.
func TestCheckExtra(t *testing.T) {
	for arg, want := range map[string]string{
		"--gres=gpu:1":         "",
		"--exclusive":          "",
		"--constraint=a100":    "",
		"--nodes=1":            "",
		"--time-min=10":        "",
		"--comment=x":          "--comment is set by dispatch",
		"--chdir=/tmp":         "--chdir is set by dispatch",
		"-t10":                 "sbatch's --time",
		"-p":                   "sbatch's --partition",
		"--part=gpu":           "abbreviation of --partition",
		"--no-req":             "abbreviation of --no-requeue",
		"gpu":                  "not a long sbatch option",
		"--":                   "not a long sbatch option",
		"-N2":                  "not a long sbatch option",
		"--gres=gpu:1\n--wrap": "control character",
	} {
		err := CheckExtra(arg)
		switch {
		case want == "" && err != nil:
			t.Errorf("CheckExtra(%q) = %v, want nil", arg, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("CheckExtra(%q) = %v, want %q", arg, err, want)
		}
	}
}

// TestFormatTime: days-hours:minutes:seconds, rounded up to a minute.
func TestFormatTime(t *testing.T) {
	for d, want := range map[time.Duration]string{
		time.Minute:                   "0-00:01:00",
		61 * time.Second:              "0-00:02:00",
		90 * time.Minute:              "0-01:30:00",
		24 * time.Hour:                "1-00:00:00",
		50*time.Hour + 59*time.Minute: "2-02:59:00",
	} {
		if got := FormatTime(d); got != want {
			t.Errorf("FormatTime(%s) = %s, want %s", d, got, want)
		}
	}
}

// TestParseSubmit: sbatch --parsable's id, with or without a cluster.
func TestParseSubmit(t *testing.T) {
	for out, want := range map[string]string{"42\n": "42", "42;cluster\n": "42", "": "", "Submitted batch job 42\n": "", "4x2": ""} {
		got, err := ParseSubmit([]byte(out))
		if got != want || (want == "") != (err != nil) {
			t.Errorf("ParseSubmit(%q) = %q, %v; want %q", out, got, err, want)
		}
	}
}

// TestScript runs the batch script with a stand-in wrapper: the
// supervisor runs in the task directory with the secrets file as stdin,
// the file is gone before it runs,
// and no secret is in the script.
func TestScript(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "it's here")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	wrapper := filepath.Join(t.TempDir(), "wrapper")
	// The stand-in checks its arguments and cwd, that the secrets file
	// is gone and copies stdin.
	stub := "#!/bin/sh\n" +
		"[ \"$*\" = supervise ] || exit 3\n" +
		"[ \"$(pwd)\" = " + quote(dir) + " ] || exit 4\n" +
		"[ -e " + quote(dir+"/"+FileSecrets) + " ] && exit 5\n" +
		"cat > got-stdin\n" +
		"echo supervisor-log >&2\n"
	if err := os.WriteFile(wrapper, []byte(stub), 0o700); err != nil {
		t.Fatal(err)
	}
	j := testJob()
	j.Dir, j.Wrapper = dir, wrapper
	script, err := Script(j)
	if err != nil {
		t.Fatal(err)
	}
	const secret = `[{"dir":"x","env":{"TOKEN":"s3cret"}}]`
	if err := os.WriteFile(filepath.Join(dir, FileSecrets), []byte(secret), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("sh", "-c", script).CombinedOutput()
	if err != nil {
		t.Fatalf("script: %v\n%s\n%s", err, out, script)
	}
	for name, want := range map[string]string{"got-stdin": secret, "wrapper.log": "supervisor-log\n"} {
		if got, err := os.ReadFile(filepath.Join(dir, name)); err != nil || string(got) != want {
			t.Errorf("%s = %q, %v; want %q", name, got, err, want)
		}
	}
	if fi, err := os.Stat(filepath.Join(dir, "wrapper.log")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("wrapper.log: %v, %v; want mode 0600", fi, err)
	}
	if strings.Contains(script, "s3cret") {
		t.Error("the script holds a secret")
	}
}
