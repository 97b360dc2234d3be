package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/domain"
)

// fanoutSecret is the value of the controller's variable a task's env
// takes with ${FANOUT_SECRET}; it must reach the task and nowhere else.
const fanoutSecret = "s3cr3t-fanout-7f2a9c"

// fanoutHome is a home with two local nodes (n1 tagged gpu) and the
// project fan: a matrix of 3 (S01), a broadcast (S02), a task depending
// on both (S03) and one with its own retry_backoff that fails once (S04).
func fanoutHome(t *testing.T) (home, marks string) {
	t.Helper()
	home = t.TempDir()
	marks = filepath.Join(t.TempDir(), "marks")
	if err := os.MkdirAll(marks, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(home, "nodes.yaml"), fmt.Sprintf(`controller:
  poll_interval: 200ms
  retry_backoff: 100ms
  retry_backoff_max: 1s
nodes:
  - name: n1
    ssh: null
    slots: 2
    work_dir: %s
    tags: [gpu]
  - name: n2
    ssh: null
    slots: 2
    work_dir: %s
`, filepath.Join(t.TempDir(), "w1"), filepath.Join(t.TempDir(), "w2")))
	unsandboxed(t, home, "the tasks leave marks outside their workspaces")
	dir := filepath.Join(home, "specs", "fan")
	writeFile(t, filepath.Join(dir, "project.yaml"), "tool: shell\nintegration: false\n")
	writeFile(t, filepath.Join(dir, "S01-test.md"), fmt.Sprintf(`---
matrix: {pkg: [alpha, beta, gamma]}
env:
  TOKEN: ${FANOUT_SECRET}
  PLAIN: plain-value
---
# Test {{pkg}}
sleep 0.3
echo "{{pkg}} $DISPATCH_TASK $DISPATCH_NODE $PLAIN $TOKEN" > %s/{{pkg}}
`, marks))
	writeFile(t, filepath.Join(dir, "S02-each.md"), fmt.Sprintf(`---
nodes: all
---
# On every node
sleep 0.3
echo "$DISPATCH_TASK" > %s/node-$DISPATCH_NODE
`, marks))
	writeFile(t, filepath.Join(dir, "S03-after.md"), fmt.Sprintf(`---
depends_on: [S01, S02]
---
# After all of them
for f in alpha beta gamma node-n1 node-n2; do test -s %s/$f || exit 1; done
`, marks))
	writeFile(t, filepath.Join(dir, "S04-flaky.md"), fmt.Sprintf(`---
retry_backoff: 2s
max_retries: 1
nodes: {tags: [gpu]}
---
# Fails once
if [ ! -e %[1]s/s04 ]; then touch %[1]s/s04; exit 3; fi
`, marks))
	return home, marks
}

func TestFanOut(t *testing.T) {
	t.Parallel()
	home, marks := fanoutHome(t)
	env := []string{"FANOUT_SECRET=" + fanoutSecret}
	r := runDispatch(t, env, "--home", home, "start", "fan")
	if r.code != 0 {
		t.Fatalf("start fan: %s", r)
	}
	s, _ := getStatus(t, home, "fan")
	var ids []string
	for _, tk := range s.Tasks {
		ids = append(ids, tk.ID)
		if tk.Status != "completed" {
			t.Errorf("%s: %s (%s)", tk.ID, tk.Status, tk.Error)
		}
	}
	if want := []string{"S01.1", "S01.2", "S01.3", "S02@n1", "S02@n2", "S03", "S04@n1"}; !slices.Equal(ids, want) {
		t.Fatalf("status --json tasks = %v, want %v", ids, want)
	}
	for i, pkg := range []string{"alpha", "beta", "gamma"} {
		id := fmt.Sprintf("S01.%d", i+1)
		if got := s.task(t, id).Title; got != "Test "+pkg {
			t.Errorf("%s title %q", id, got)
		}
		// {{pkg}} substituted in what ran; env and DISPATCH_NODE reached it.
		got := strings.TrimSpace(readFile(t, filepath.Join(marks, pkg)))
		node := s.task(t, id).Node
		if want := fmt.Sprintf("%s %s %s plain-value %s", pkg, id, node, fanoutSecret); got != want {
			t.Errorf("%s wrote %q, want %q", id, got, want)
		}
	}
	for _, n := range []string{"n1", "n2"} {
		if tk := s.task(t, "S02@"+n); tk.Node != n {
			t.Errorf("S02@%s ran on %s", n, tk.Node)
		}
		if got := strings.TrimSpace(readFile(t, filepath.Join(marks, "node-"+n))); got != "S02@"+n {
			t.Errorf("node-%s: %q", n, got)
		}
	}
	// S03 waited for every task of S01 and S02.
	s3 := parseTime(t, "S03.started_at", s.task(t, "S03").StartedAt)
	for _, id := range ids[:5] {
		if done := parseTime(t, id+".completed_at", s.task(t, id).CompletedAt); s3.Before(done) {
			t.Errorf("S03 started at %s, before %s completed at %s", s3, id, done)
		}
	}
	checkFanOutReport(t, home)
	checkSecretKept(t, home, r)

	// An edited broadcast spec is noticed on its tasks, and one is retried
	// with the new spec.
	spec := filepath.Join(home, "specs", "fan", "S02-each.md")
	writeFile(t, spec, readFile(t, spec)+"true\n")
	if st := runDispatch(t, nil, "--home", home, "status", "fan"); !strings.Contains(st.stdout, "S02@n1 changed since it ran") {
		t.Errorf("status does not say S02@n1's spec changed:\n%s", st)
	}
	rt := runDispatch(t, env, "--home", home, "retry", "fan", "S02@n1")
	if rt.code != 0 || !strings.Contains(rt.stdout, "S02@n1 takes its changed spec") {
		t.Errorf("retry fan S02@n1: %s", rt)
	}
}

// checkFanOutReport: S04's retry waited its own retry_backoff (2s, above
// the controller's 1s cap), and report.md lists the matrix under S01.
func checkFanOutReport(t *testing.T, home string) {
	t.Helper()
	r := runDispatch(t, nil, "--home", home, "report", "fan", "--format", "json")
	if r.code != 0 {
		t.Fatalf("report: %s", r)
	}
	var rep struct {
		Tasks []struct {
			ID       string `json:"id"`
			Parent   string `json:"parent"`
			Attempts []struct {
				StartedAt   string `json:"started_at"`
				CompletedAt string `json:"completed_at"`
				ExitCode    int    `json:"exit_code"`
			} `json:"attempts"`
		} `json:"tasks"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatal(err)
	}
	for _, tk := range rep.Tasks {
		if want := domain.SpecID(tk.ID); tk.ID != want && tk.Parent != want {
			t.Errorf("%s: parent %q, want %s", tk.ID, tk.Parent, want)
		}
		if tk.ID != "S04@n1" {
			continue
		}
		if len(tk.Attempts) != 2 || tk.Attempts[0].ExitCode != 3 {
			t.Fatalf("S04@n1 attempts: %+v", tk.Attempts)
		}
		failed := parseTime(t, "attempt 1 completed_at", tk.Attempts[0].CompletedAt)
		again := parseTime(t, "attempt 2 started_at", tk.Attempts[1].StartedAt)
		if gap := again.Sub(failed); gap < 2*time.Second {
			t.Errorf("S04's retry started %s after its failure, before its retry_backoff of 2s", gap)
		}
	}
	md := readFile(t, filepath.Join(home, "runs", "fan", "report.md"))
	for _, want := range []string{"| S01 | 3 tasks: 3 completed |", "| ↳ S01.1 | Test alpha |", "| S02 | 2 tasks: 2 completed |", "| ↳ S02@n2 |"} {
		if !strings.Contains(md, want) {
			t.Errorf("report.md lacks %q:\n%s", want, md)
		}
	}
	if lg := runDispatch(t, nil, "--home", home, "logs", "fan", "S02@n1"); lg.code != 0 {
		t.Errorf("logs fan S02@n1: %s", lg)
	}
	st := runDispatch(t, nil, "--home", home, "status", "fan")
	if i, j := strings.Index(st.stdout, "S01.3"), strings.Index(st.stdout, "S02@n1"); i < 0 || j < i {
		t.Errorf("status does not show S01.3 before S02@n1:\n%s", st)
	}
}

// checkSecretKept: the value of ${FANOUT_SECRET} is in no file of the home
// (the database and its WAL, dispatch.log, the runs) and in nothing
// dispatch printed.
func checkSecretKept(t *testing.T, home string, start result) {
	t.Helper()
	for _, out := range []string{start.stdout, start.stderr} {
		if strings.Contains(out, fanoutSecret) {
			t.Errorf("dispatch start printed the secret:\n%s", start)
		}
	}
	for _, args := range [][]string{{"status", "fan", "--json"}, {"report", "fan", "--format", "json"}, {"events", "fan"}} {
		r := runDispatch(t, nil, append([]string{"--home", home}, args...)...)
		if strings.Contains(r.stdout+r.stderr, fanoutSecret) {
			t.Errorf("%v shows the secret", args)
		}
	}
	seen := 0
	err := filepath.WalkDir(home, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if strings.HasPrefix(d.Name(), "dispatch.db") || d.Name() == "dispatch.log" {
			seen++
		}
		if bytes.Contains(b, []byte(fanoutSecret)) {
			t.Errorf("%s holds the secret", path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen < 2 {
		t.Errorf("found %d of the database and log files in %s", seen, home)
	}
}

// TestFanOutBadInput: a bad matrix, a broadcast no node can take and an
// env variable the controller lacks stop start with exit 2, the file and
// line, and a fix.
func TestFanOutBadInput(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, spec string
		env        []string
		want       []string
	}{
		{"unknown placeholder", "---\nmatrix: {pkg: [a]}\n---\necho {{pgk}}\n", nil,
			[]string{"S01-x.md:4", "unknown {{pgk}}", "did you mean {{pkg}}?"}},
		{"no eligible node", "---\nnodes: {tags: [tpu]}\n---\ntrue\n", nil,
			[]string{"S01-x.md:2", "no node is eligible for S01", "n1 [gpu], n2"}},
		{"env variable not set", "---\nenv:\n  TOKEN: ${FANOUT_UNSET}\n---\ntrue\n", nil,
			[]string{"S01-x.md", "env TOKEN: environment variable FANOUT_UNSET is not set", "export it"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			home, _ := fanoutHome(t)
			dir := filepath.Join(home, "specs", "bad")
			writeFile(t, filepath.Join(dir, "project.yaml"), "tool: shell\nintegration: false\n")
			writeFile(t, filepath.Join(dir, "S01-x.md"), tc.spec)
			r := runDispatch(t, tc.env, "--home", home, "start", "bad")
			if r.code != 2 {
				t.Fatalf("start: want exit 2\n%s", r)
			}
			for _, w := range tc.want {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("stderr lacks %q\n%s", w, r)
				}
			}
			if _, err := os.Stat(filepath.Join(home, "dispatch.db")); err == nil {
				t.Error("a refused start made the database")
			}
		})
	}
}
