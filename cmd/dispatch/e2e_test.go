package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"github.com/dispatch-tool/dispatch/home"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// newLocalHome returns a dispatch home holding testdata/e2e and a nodes.yaml
// with one local node whose work_dir is the returned work directory (not yet
// created).
func newLocalHome(t *testing.T) (home, work string) {
	t.Helper()
	home = copyFixture(t, "e2e")
	work = filepath.Join(t.TempDir(), "work")
	writeFile(t, filepath.Join(home, "nodes.yaml"), fmt.Sprintf(`controller:
  poll_interval: 200ms
  retry_backoff: 100ms
  retry_backoff_max: 1s
nodes:
  - name: local
    ssh: null
    slots: 2
    work_dir: %s
`, work))
	return home, work
}

// statusJSON is `dispatch status <project> --json`.
type statusJSON struct {
	Project string         `json:"project"`
	Counts  map[string]int `json:"counts"`
	Phase   string         `json:"phase"`
	Tasks   []taskJSON     `json:"tasks"`
	Nodes   []struct {
		Name              string `json:"name"`
		State             string `json:"state"`
		Slots             int    `json:"slots"`
		Running           int    `json:"running"`
		MemAvailableBytes int64  `json:"mem_available_bytes"`
		LastSeen          string `json:"last_seen"`
	} `json:"nodes"`
}

type taskJSON struct {
	ID              string  `json:"id"`
	Title           string  `json:"title"`
	Type            string  `json:"type"`
	Status          string  `json:"status"`
	Node            string  `json:"node"`
	Attempt         int     `json:"attempt"`
	ExitCode        int     `json:"exit_code"`
	ErrorClass      string  `json:"error_class"`
	Error           string  `json:"error"`
	StartedAt       string  `json:"started_at"`
	CompletedAt     string  `json:"completed_at"`
	DurationSeconds float64 `json:"duration_seconds"`
}

func (s statusJSON) task(t *testing.T, id string) taskJSON {
	t.Helper()
	for _, tk := range s.Tasks {
		if tk.ID == id {
			return tk
		}
	}
	t.Fatalf("status of %s has no task %s", s.Project, id)
	return taskJSON{}
}

func (s statusJSON) attempts() map[string]int {
	out := map[string]int{}
	for _, tk := range s.Tasks {
		out[tk.ID] = tk.Attempt
	}
	return out
}

// reportJSON is the part of `dispatch report --format json` the tests read.
type reportJSON struct {
	Project string `json:"project"`
	Phase   string `json:"phase"`
	Result  string `json:"result"`
	Totals  struct {
		Tasks       int     `json:"tasks"`
		Completed   int     `json:"completed"`
		Failed      int     `json:"failed"`
		Attempts    int     `json:"attempts"`
		TokensIn    int64   `json:"tokens_in"`
		TokensOut   int64   `json:"tokens_out"`
		CostUSD     float64 `json:"cost_usd"`
		WallSeconds float64 `json:"wall_seconds"`
	} `json:"totals"`
	Tasks []struct {
		taskJSON
		Attempts []struct {
			Attempt    int    `json:"attempt"`
			Node       string `json:"node"`
			Status     string `json:"status"`
			ExitCode   int    `json:"exit_code"`
			ErrorClass string `json:"error_class"`
		} `json:"attempts"`
		Outputs []struct {
			Path   string `json:"path"`
			Size   int64  `json:"size"`
			SHA256 string `json:"sha256"`
		} `json:"outputs"`
	} `json:"tasks"`
	Conflicts    []json.RawMessage `json:"conflicts"`
	Verification map[string]any    `json:"verification"`
	Nodes        []map[string]any  `json:"nodes"`
}

func getStatus(t *testing.T, home, project string) (statusJSON, result) {
	t.Helper()
	r := runDispatch(t, nil, "--home", home, "status", project, "--json")
	if r.code != 0 {
		t.Fatalf("status %s --json: %s", project, r)
	}
	var s statusJSON
	if err := json.Unmarshal([]byte(r.stdout), &s); err != nil {
		t.Fatalf("status %s --json: %v\n%s", project, err, r)
	}
	return s, r
}

// keys returns the sorted keys of a JSON object.
func keys(t *testing.T, raw json.RawMessage) []string {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("not a JSON object: %v\n%s", err, raw)
	}
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func assertKeys(t *testing.T, what string, raw json.RawMessage, want []string, exact bool) {
	t.Helper()
	got := keys(t, raw)
	want = slices.Sorted(slices.Values(want))
	if exact {
		if !slices.Equal(got, want) {
			t.Errorf("%s keys = %v, want exactly %v", what, got, want)
		}
		return
	}
	for _, k := range want {
		if !slices.Contains(got, k) {
			t.Errorf("%s has no key %q (keys: %v)", what, k, got)
		}
	}
}

var (
	statusKeys = []string{"project", "counts", "phase", "tasks", "nodes", "controller"}
	countKeys  = []string{"pending", "claimed", "running", "completed", "failed", "blocked", "canceled"}
	// SPEC §9's keys, §13's sandbox (how the current attempt was confined)
	// and §14's inputs (the dependencies' attempts it was given).
	statusTaskKeys = []string{"id", "title", "type", "status", "node", "attempt", "exit_code", "error_class", "error",
		"started_at", "completed_at", "duration_seconds", "sandbox", "inputs"}
	statusNodeKeys = []string{"name", "state", "slots", "running", "mem_available_bytes", "last_seen"}
	reportKeys     = []string{"project", "phase", "result", "totals", "tasks", "conflicts", "verification", "nodes"}
	totalsKeys     = []string{"tasks", "completed", "failed", "attempts", "tokens_in", "tokens_out", "cost_usd", "wall_seconds"}
)

// assertStatusShape checks the keys of SPEC §9, exactly.
func assertStatusShape(t *testing.T, out string) {
	t.Helper()
	var raw struct {
		Counts json.RawMessage   `json:"counts"`
		Tasks  []json.RawMessage `json:"tasks"`
		Nodes  []json.RawMessage `json:"nodes"`
	}
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		t.Fatal(err)
	}
	assertKeys(t, "status", json.RawMessage(out), statusKeys, true)
	assertKeys(t, "status.counts", raw.Counts, countKeys, true)
	for i, tk := range raw.Tasks {
		assertKeys(t, fmt.Sprintf("status.tasks[%d]", i), tk, statusTaskKeys, true)
	}
	if len(raw.Nodes) == 0 {
		t.Error("status.nodes is empty")
	}
	for i, n := range raw.Nodes {
		assertKeys(t, fmt.Sprintf("status.nodes[%d]", i), n, statusNodeKeys, true)
	}
}

// assertPlain checks output meant for a pipe: lines of text, no escape
// codes, no carriage returns.
func assertPlain(t *testing.T, what, out string) {
	t.Helper()
	if strings.Contains(out, "\x1b") || strings.Contains(out, "\r") {
		t.Errorf("%s has terminal control characters in piped output:\n%q", what, out)
	}
	if out != "" && !strings.HasSuffix(out, "\n") {
		t.Errorf("%s does not end with a newline:\n%q", what, out)
	}
}

func parseTime(t *testing.T, what, s string) time.Time {
	t.Helper()
	tm, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Errorf("%s = %q: %v", what, s, err)
	}
	return tm
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// outcomeLine returns the first line of a markdown report that is neither a
// heading nor blank.
func outcomeLine(md string) string {
	sc := bufio.NewScanner(strings.NewReader(md))
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" && !strings.HasPrefix(l, "#") {
			return l
		}
	}
	return ""
}

// TestStartLocal runs projects end to end on the local node: a project with
// a dependency, a task that passes on retry and one that fails for good
// (exit 1), then a project that passes (exit 0), then both again (nothing
// reruns).
func TestStartLocal(t *testing.T) {
	t.Parallel()
	home, work := newLocalHome(t)
	unsandboxed(t, home, "mixed/S03 leaves a marker outside its workspace for its retry")

	r := runDispatch(t, nil, "--home", home, "start", "mixed")
	if r.code != 1 {
		t.Fatalf("start mixed: want exit 1 (S04 fails)\n%s", r)
	}
	assertPlain(t, "start stdout", r.stdout)
	for _, want := range []string{"S03", "S04", "failed", "report: " + filepath.Join(home, "runs", "mixed", "report.md")} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("start stdout does not mention %q\n%s", want, r)
		}
	}

	t.Run("status json", func(t *testing.T) {
		s, r := getStatus(t, home, "mixed")
		assertStatusShape(t, r.stdout)
		if s.Project != "mixed" || s.Phase != "done" {
			t.Errorf("project, phase = %q, %q; want mixed, done", s.Project, s.Phase)
		}
		wantCounts := map[string]int{"pending": 0, "claimed": 0, "running": 0, "completed": 3, "failed": 1, "blocked": 1, "canceled": 0}
		for k, v := range wantCounts {
			if s.Counts[k] != v {
				t.Errorf("counts.%s = %d, want %d (counts %v)", k, s.Counts[k], v, s.Counts)
			}
		}
		want := []struct {
			id, status, class string
			attempt, exit     int
		}{
			{"S01", "completed", "", 1, 0},
			{"S02", "completed", "", 1, 0},
			{"S03", "completed", "", 2, 0},
			{"S04", "failed", "exit", 2, 3},
			{"S05", "blocked", "", 0, 0},
		}
		for _, w := range want {
			tk := s.task(t, w.id)
			if tk.Status != w.status || tk.Attempt != w.attempt || tk.ExitCode != w.exit || tk.ErrorClass != w.class {
				t.Errorf("%s: status %s attempt %d exit %d class %q; want %s attempt %d exit %d class %q",
					w.id, tk.Status, tk.Attempt, tk.ExitCode, tk.ErrorClass, w.status, w.attempt, w.exit, w.class)
			}
			if tk.Type != "implementation" || tk.Title == "" {
				t.Errorf("%s: type %q title %q", w.id, tk.Type, tk.Title)
			}
			if w.status == "blocked" {
				if tk.Node != "" || tk.StartedAt != "" {
					t.Errorf("%s never ran but has node %q started_at %q", w.id, tk.Node, tk.StartedAt)
				}
				continue
			}
			if tk.Node != "local" {
				t.Errorf("%s: node %q, want local", w.id, tk.Node)
			}
			start := parseTime(t, w.id+".started_at", tk.StartedAt)
			end := parseTime(t, w.id+".completed_at", tk.CompletedAt)
			if end.Before(start) || tk.DurationSeconds < 0 {
				t.Errorf("%s: started %s, completed %s, duration %v", w.id, tk.StartedAt, tk.CompletedAt, tk.DurationSeconds)
			}
		}
		if s4 := s.task(t, "S04"); s4.Error == "" {
			t.Error("S04 failed without an error message")
		}
		if s.task(t, "S01").Title != "Write one" {
			t.Errorf("S01 title = %q, want the spec's heading", s.task(t, "S01").Title)
		}
		// depends_on: S02 started after S01 completed.
		s1 := parseTime(t, "S01.completed_at", s.task(t, "S01").CompletedAt)
		s2 := parseTime(t, "S02.started_at", s.task(t, "S02").StartedAt)
		if s2.Before(s1) {
			t.Errorf("S02 started at %s, before S01 completed at %s", s2, s1)
		}
		if len(s.Nodes) != 1 || s.Nodes[0].Name != "local" || s.Nodes[0].Slots != 2 || s.Nodes[0].Running != 0 || s.Nodes[0].State != "online" {
			t.Errorf("nodes = %+v, want local online with 2 slots, none running", s.Nodes)
		}
	})

	t.Run("report json", func(t *testing.T) {
		r := runDispatch(t, nil, "--home", home, "report", "mixed", "--format", "json")
		if r.code != 0 {
			t.Fatalf("report --format json: %s", r)
		}
		assertKeys(t, "report", json.RawMessage(r.stdout), reportKeys, false)
		var raw struct {
			Totals       json.RawMessage   `json:"totals"`
			Tasks        []json.RawMessage `json:"tasks"`
			Verification json.RawMessage   `json:"verification"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &raw); err != nil {
			t.Fatal(err)
		}
		assertKeys(t, "report.totals", raw.Totals, totalsKeys, false)
		assertKeys(t, "report.verification", raw.Verification, []string{"rounds", "pass", "issues"}, false)
		for i, tk := range raw.Tasks {
			assertKeys(t, fmt.Sprintf("report.tasks[%d]", i), tk, append(slices.Clone(statusTaskKeys), "attempts", "outputs"), false)
		}

		var rep reportJSON
		if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
			t.Fatal(err)
		}
		if rep.Project != "mixed" || rep.Result != "failed" {
			t.Errorf("project, result = %q, %q; want mixed, failed", rep.Project, rep.Result)
		}
		tot := rep.Totals
		if tot.Tasks != 5 || tot.Completed != 3 || tot.Failed != 1 || tot.Attempts != 6 {
			t.Errorf("totals = %+v; want 5 tasks, 3 completed, 1 failed, 6 attempts", tot)
		}
		if tot.TokensIn != 0 || tot.TokensOut != 0 || tot.CostUSD != 0 || tot.WallSeconds <= 0 {
			t.Errorf("totals = %+v; want no tokens or cost (shell) and a positive wall time", tot)
		}
		if rep.Conflicts == nil {
			t.Error("conflicts is null, want a list")
		}
		if len(rep.Nodes) != 1 || rep.Nodes[0]["name"] != "local" {
			t.Errorf("nodes = %v, want local", rep.Nodes)
		}
		byID := map[string]int{}
		for i, tk := range rep.Tasks {
			byID[tk.ID] = i
		}
		s3 := rep.Tasks[byID["S03"]]
		if len(s3.Attempts) != 2 || s3.Attempts[0].Status != "failed" || s3.Attempts[0].ExitCode != 3 ||
			s3.Attempts[0].ErrorClass != "exit" || s3.Attempts[1].Status != "completed" || s3.Attempts[1].Attempt != 2 {
			t.Errorf("S03 attempts = %+v; want #1 failed (exit 3), #2 completed", s3.Attempts)
		}
		s4 := rep.Tasks[byID["S04"]]
		if len(s4.Attempts) != 2 {
			t.Errorf("S04 attempts = %+v; want 2", s4.Attempts)
		}
		for _, a := range s4.Attempts {
			if a.Status != "failed" || a.ExitCode != 3 || a.ErrorClass != "exit" || a.Node != "local" {
				t.Errorf("S04 attempt %+v; want failed on local, exit 3, class exit", a)
			}
		}
		if n := len(rep.Tasks[byID["S05"]].Attempts); n != 0 {
			t.Errorf("S05 (blocked) has %d attempts", n)
		}
		s1 := rep.Tasks[byID["S01"]]
		if len(s1.Outputs) != 1 || s1.Outputs[0].Path != "one.txt" || s1.Outputs[0].Size != 4 || s1.Outputs[0].SHA256 != sha256Hex("one\n") {
			t.Errorf("S01 outputs = %+v; want one.txt, 4 bytes, sha256 of \"one\\n\"", s1.Outputs)
		}
	})

	t.Run("collected files", func(t *testing.T) {
		runs := filepath.Join(home, "runs", "mixed")
		for rel, want := range map[string]string{
			"S01/output/one.txt":   "one\n",
			"S02/output/two.txt":   "two\n",
			"S03/output/flaky.txt": "recovered on attempt 2\n",
		} {
			if got := readFile(t, filepath.Join(runs, rel)); got != want {
				t.Errorf("runs/mixed/%s = %q, want %q", rel, got, want)
			}
		}
		for rel, want := range map[string]string{
			"S01/task.log": "log of S01 attempt 1 on local",
			"S04/task.log": "broken attempt 2",
		} {
			if got := readFile(t, filepath.Join(runs, rel)); !strings.Contains(got, want) {
				t.Errorf("runs/mixed/%s = %q, want it to contain %q", rel, got, want)
			}
		}
		if _, err := os.Stat(filepath.Join(runs, "S05")); err == nil {
			t.Error("runs/mixed/S05 exists, but S05 never ran")
		}
		// The marker is outside output/, so it was not collected.
		if _, err := os.Stat(filepath.Join(runs, "S03", "output", "marker")); err == nil {
			t.Error("the marker outside S03's output/ was collected")
		}
		if _, err := os.Stat(filepath.Join(work, "mixed", "tasks", "S03", "output", "flaky.txt")); err != nil {
			t.Errorf("S03's workspace on the node: %v", err)
		}
	})

	t.Run("report md", func(t *testing.T) {
		md := readFile(t, filepath.Join(home, "runs", "mixed", "report.md"))
		if !strings.HasPrefix(outcomeLine(md), "**FAILED**") {
			t.Errorf("report.md does not start with the outcome:\n%s", md)
		}
		for _, want := range []string{"S04", "broken attempt 2"} {
			if !strings.Contains(md, want) {
				t.Errorf("report.md does not mention %q:\n%s", want, md)
			}
		}
		r := runDispatch(t, nil, "--home", home, "report", "mixed")
		if r.code != 0 {
			t.Fatalf("report: %s", r)
		}
		assertPlain(t, "report stdout", r.stdout)
		out := filepath.Join(t.TempDir(), "report.md")
		ro := runDispatch(t, nil, "--home", home, "report", "mixed", "-o", out)
		if ro.code != 0 || ro.stdout != "" {
			t.Fatalf("report -o: want exit 0 and nothing on stdout\n%s", ro)
		}
		if got := readFile(t, out); got != r.stdout {
			t.Errorf("report -o wrote\n%s\nreport printed\n%s", got, r.stdout)
		}
	})

	t.Run("status text", func(t *testing.T) {
		r := runDispatch(t, nil, "--home", home, "status", "mixed")
		if r.code != 0 {
			t.Fatalf("status: %s", r)
		}
		assertPlain(t, "status stdout", r.stdout)
		for _, want := range []string{"S01", "S05", "blocked", "exit status 3", "local"} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("status does not mention %q\n%s", want, r)
			}
		}
	})

	t.Run("unknown project after a run", func(t *testing.T) {
		for _, cmd := range []string{"status", "report"} {
			r := runDispatch(t, nil, "--home", home, cmd, "nosuch")
			if r.code != 2 {
				t.Errorf("%s nosuch: want exit 2\n%s", cmd, r)
			}
			for _, want := range []string{`"nosuch"`, "started projects: mixed", "Try: dispatch start nosuch"} {
				if !strings.Contains(r.stderr, want) {
					t.Errorf("%s nosuch: stderr does not contain %q\n%s", cmd, want, r)
				}
			}
		}
		r := runDispatch(t, nil, "--home", home, "report", "mixed", "--format", "xml")
		if r.code != 2 || !strings.Contains(r.stderr, `unknown format "xml"`) {
			t.Errorf("report --format xml: want exit 2 naming the format\n%s", r)
		}
	})

	t.Run("passing project", func(t *testing.T) {
		r := runDispatch(t, nil, "--home", home, "start", "clean")
		if r.code != 0 {
			t.Fatalf("start clean: want exit 0\n%s", r)
		}
		assertPlain(t, "start stdout", r.stdout)
		s, _ := getStatus(t, home, "clean")
		if s.Counts["completed"] != 2 || s.Phase != "done" {
			t.Errorf("clean: counts %v, phase %q; want 2 completed, done", s.Counts, s.Phase)
		}
		if got := readFile(t, filepath.Join(home, "runs", "clean", "S02", "output", "b.txt")); got != "b\n" {
			t.Errorf("runs/clean/S02/output/b.txt = %q", got)
		}
		md := readFile(t, filepath.Join(home, "runs", "clean", "report.md"))
		if !strings.HasPrefix(outcomeLine(md), "**PASSED**") {
			t.Errorf("report.md does not start with the outcome:\n%s", md)
		}
	})

	t.Run("start again on finished projects", func(t *testing.T) {
		// A new run: a passed project with nothing changed reuses every
		// result and launches nothing; a failed one runs again only its
		// failed and blocked tasks.
		for _, tc := range []struct {
			project string
			code    int
			rerun   []string
		}{
			{"clean", 0, nil},
			{"mixed", 1, []string{"S04", "S05"}},
		} {
			before, _ := getStatus(t, home, tc.project)
			begin := time.Now()
			r := runDispatch(t, nil, "--home", home, "start", tc.project)
			took := time.Since(begin)
			if r.code != tc.code {
				t.Errorf("start %s again: want exit %d\n%s", tc.project, tc.code, r)
			}
			// A bound only against a start that waits out whole poll
			// intervals or backoffs; loose enough for a loaded machine
			// (35 s seen under make test at load 11).
			if took > 90*time.Second {
				t.Errorf("start %s again took %s", tc.project, took)
			}
			after, _ := getStatus(t, home, tc.project)
			for id, n := range before.attempts() {
				if slices.Contains(tc.rerun, id) {
					if after.attempts()[id] <= n && n > 0 {
						t.Errorf("start %s again: %s did not run again (attempts %d → %d)", tc.project, id, n, after.attempts()[id])
					}
				} else if after.attempts()[id] != n {
					t.Errorf("start %s again: %s ran again (attempts %d → %d)", tc.project, id, n, after.attempts()[id])
				}
			}
			if tc.rerun == nil && strings.Contains(r.stdout, "running on") {
				t.Errorf("start %s again launched a task:\n%s", tc.project, r)
			}
			if tc.rerun != nil && !strings.Contains(r.stdout, "  S04: failed in run 1\n  S05: blocked in run 1\n") {
				t.Errorf("start %s again does not say why its tasks run again:\n%s", tc.project, r)
			}
		}
		if _, err := os.Stat(filepath.Join(work, "clean", "tasks", "S01", "attempts")); err == nil {
			t.Error("clean/S01 was moved aside for a second attempt")
		}
	})

	t.Run("status of every project", func(t *testing.T) {
		r := runDispatch(t, nil, "--home", home, "status", "--json")
		if r.code != 0 {
			t.Fatalf("status --json: %s", r)
		}
		var all struct {
			Projects []json.RawMessage `json:"projects"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &all); err != nil {
			t.Fatal(err)
		}
		if len(all.Projects) != 2 {
			t.Fatalf("status --json lists %d projects, want 2\n%s", len(all.Projects), r)
		}
		for _, p := range all.Projects {
			assertStatusShape(t, string(p))
		}
	})
}

// TestSecondStartRefused starts a controller, then a second one on the same
// home while the first runs: the second exits 2 naming the first, which goes
// on to finish.
//
// It is not parallel, so it runs before TestStartLocal and builds the node
// wrapper into the shared cache once for both.
func TestSecondStartRefused(t *testing.T) {
	home, _ := newLocalHome(t)
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	first, stdout, stderr := dispatchCmd(ctx, nil, "--home", home, "start", "slow")
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- first.Wait() }()
	t.Cleanup(func() {
		cancel()
		<-done
	})

	lockFile := filepath.Join(home, "dispatch.lock")
	wantPid := fmt.Sprintf("pid %d", first.Process.Pid)
	var lock string
	pollUntil(t, cmdTimeout, "the first controller to take the lock", func() bool {
		b, _ := os.ReadFile(lockFile)
		lock = string(b)
		return strings.Contains(lock, wantPid)
	})

	// A second start on the same home never makes a second controller: the
	// project is handed to the running one, which serves it too.
	r := runDispatch(t, nil, "--home", home, "start", "clean")
	if r.code != 0 || !strings.Contains(r.stdout, "handed to the running controller") || !strings.Contains(r.stdout, wantPid) {
		t.Errorf("second start clean: want it handed to %s\n%s", wantPid, r)
	}
	if got := readFile(t, lockFile); got != lock {
		t.Errorf("the second start changed the lock: %q -> %q", lock, got)
	}
	if _, err := os.Stat(filepath.Join(home, "runs", "clean", "report.md")); err != nil {
		t.Errorf("clean was not run by the first controller: %v", err)
	}

	// Read-only commands work while the controller runs and see the task run.
	pollUntil(t, cmdTimeout, "status to show S01 running", func() bool {
		s, _ := getStatus(t, home, "slow")
		if st := s.task(t, "S01").Status; st == "completed" || st == "failed" {
			t.Fatalf("S01 is %s before status saw it running", st)
		}
		return s.task(t, "S01").Status == "running"
	})

	var err error
	select {
	case err = <-done:
		done <- err // for the cleanup
	case <-ctx.Done():
		t.Fatalf("the first start did not finish\n--- stdout:\n%s--- stderr:\n%s", stdout, stderr)
	}
	r = finish(t, ctx, first, err, stdout, stderr)
	if r.code != 0 {
		t.Fatalf("first start: want exit 0\n%s", r)
	}
	s, _ := getStatus(t, home, "slow")
	if tk := s.task(t, "S01"); tk.Status != "completed" || tk.Attempt != 1 {
		t.Errorf("S01: status %s attempt %d; want completed at attempt 1", tk.Status, tk.Attempt)
	}
	if got := readFile(t, filepath.Join(home, "runs", "slow", "S01", "output", "done.txt")); got != "done\n" {
		t.Errorf("done.txt = %q", got)
	}
}

// TestLockedHomeWithoutController: a process holds the home's lock but no
// controller answers on its socket: start is refused, naming the holder.
func TestLockedHomeWithoutController(t *testing.T) {
	homeDir, _ := newLocalHome(t)
	lock, err := home.AcquireLock(homeDir)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release()
	before := tree(t, homeDir)
	r := runDispatch(t, nil, "--home", homeDir, "start", "clean")
	if r.code != 2 {
		t.Fatalf("start on a locked home: %s", r)
	}
	for _, want := range []string{"another controller", fmt.Sprintf("pid %d", os.Getpid()), "dispatch.lock", "does not answer"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q: %s", want, r)
		}
	}
	assertTreeUnchanged(t, homeDir, before)
}

// TestPlanWritesNothing checks that validate and start --dry-run print the
// plan and leave the home and the node's work_dir alone.
func TestPlanWritesNothing(t *testing.T) {
	tests := []struct {
		name string
		args []string
	}{
		{"validate", []string{"validate", "mixed"}},
		{"start dry run", []string{"start", "--dry-run", "mixed"}},
		{"start dry run after the project", []string{"start", "mixed", "--dry-run"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			home, work := newLocalHome(t)
			before := tree(t, home)
			r := runDispatch(t, nil, append([]string{"--home", home}, tc.args...)...)
			if r.code != 0 {
				t.Fatalf("want exit 0\n%s", r)
			}
			assertPlain(t, "stdout", r.stdout)
			for _, want := range []string{"mixed: 5 tasks", filepath.Join(home, "nodes.yaml"), "valid",
				"S01", "S02", "S03", "S04", "S05", "local (shell)", "Write two after one"} {
				if !strings.Contains(r.stdout, want) {
					t.Errorf("plan does not mention %q\n%s", want, r)
				}
			}
			// S02 and S05 show what they wait for.
			for id, dep := range map[string]string{"S02": "S01", "S05": "S04"} {
				if !planRowHas(r.stdout, id, dep) {
					t.Errorf("plan row of %s does not name its dependency %s\n%s", id, dep, r)
				}
			}
			assertTreeUnchanged(t, home, before)
			if _, err := os.Stat(work); err == nil {
				t.Errorf("work_dir %s was created", work)
			}
		})
	}
}

func planRowHas(out, id, word string) bool {
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == id {
			return slices.Contains(f, word)
		}
	}
	return false
}
