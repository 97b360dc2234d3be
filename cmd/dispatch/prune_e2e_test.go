package main

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/internal/crashpoint"
)

// pruneHome is a local-node home with project app run four times: S01
// never changes (every run reuses run 1's result), S02 changes each run.
func pruneHome(t *testing.T, retention string) (home, work, ledger string) {
	t.Helper()
	ledger = t.TempDir()
	s01 := fmt.Sprintf("echo ran >> %s/S01\necho one > one.txt\n", ledger)
	home, work = opsHome(t, map[string]map[string]string{"app": {"S01-one.md": s01, "S02-two.md": "echo two-1 > two.txt\n"}})
	unsandboxed(t, home, "S01 counts its runs in a ledger outside its workspace")
	for i := 1; i <= 4; i++ {
		writeFile(t, filepath.Join(home, "specs", "app", "S02-two.md"), fmt.Sprintf("echo two-%d > two.txt\n", i))
		if r := runDispatch(t, nil, "--home", home, "start", "app"); r.code != 0 {
			t.Fatalf("run %d: %s", i, r)
		}
	}
	writeFile(t, filepath.Join(home, "specs", "app", "project.yaml"), "tool: shell\nintegration: false\nretention: "+retention+"\n")
	return home, work, ledger
}

// listedRuns is `dispatch runs app --json`'s run numbers.
func listedRuns(t *testing.T, home string) []int {
	t.Helper()
	r := runDispatch(t, nil, "--home", home, "runs", "app", "--json")
	var v struct {
		Runs []struct {
			Run int `json:"run"`
		} `json:"runs"`
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &v) != nil {
		t.Fatalf("runs --json: %s", r)
	}
	var out []int
	for _, x := range v.Runs {
		out = append(out, x.Run)
	}
	return out
}

// treeOf lists every path under dirs with its size, for comparing.
func treeOf(t *testing.T, dirs ...string) string {
	t.Helper()
	var lines []string
	for _, d := range dirs {
		filepath.WalkDir(d, func(p string, e fs.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			fi, _ := e.Info()
			if strings.HasSuffix(p, ".db-wal") || strings.HasSuffix(p, ".db-shm") || strings.HasSuffix(p, ".db") || strings.HasSuffix(p, "dispatch.log") {
				return nil
			}
			lines = append(lines, fmt.Sprintf("%s %d", p, fi.Size()))
			return nil
		})
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// pruneNumbers is the per-run lines of a prune's output.
var pruneLine = regexp.MustCompile(`(?m)^app run \d+.*$`)

// TestPruneRealRuns: retention {runs: 2} over four real runs on the local
// node prunes runs 1 and 2 (archives, rows, attempt directories on the
// node), keeps what the kept runs reuse, and --dry-run changes nothing and
// says the same. A new run still reuses S01 from run 1.
func TestPruneRealRuns(t *testing.T) {
	home, work, ledger := pruneHome(t, "{runs: 2}")
	runs := filepath.Join(home, "runs", "app")
	for _, p := range []string{filepath.Join(runs, "run-1"), filepath.Join(runs, "run-2"), filepath.Join(work, "app", "tasks", "S02", "attempts", "1"),
		filepath.Join(work, "app", "tasks", "S02", "attempts", "2")} {
		if !exists(p) {
			t.Fatalf("%s missing before the prune", p)
		}
	}
	before := treeOf(t, home, work)
	dry := runDispatch(t, nil, "--home", home, "prune", "app", "--dry-run")
	if dry.code != 0 || !strings.Contains(dry.stdout, "would prune 2 run(s) of app (retention: runs 2, days 0)") {
		t.Fatalf("prune --dry-run: %s", dry)
	}
	if after := treeOf(t, home, work); after != before {
		t.Fatalf("--dry-run changed files:\n%s\n---\n%s", before, after)
	}
	if got := listedRuns(t, home); fmt.Sprint(got) != "[1 2 3 4]" {
		t.Fatalf("runs after --dry-run = %v", got)
	}
	r := runDispatch(t, nil, "--home", home, "prune", "app")
	if r.code != 0 || !strings.Contains(r.stdout, "pruned 2 run(s) of app") {
		t.Fatalf("prune: %s", r)
	}
	if a, b := pruneLine.FindAllString(dry.stdout, -1), pruneLine.FindAllString(r.stdout, -1); fmt.Sprint(a) != fmt.Sprint(b) || len(a) != 2 {
		t.Errorf("--dry-run said\n%v\nthe prune\n%v", a, b)
	}
	if got := listedRuns(t, home); fmt.Sprint(got) != "[3 4]" {
		t.Errorf("runs after the prune = %v, want [3 4]", got)
	}
	for _, p := range []string{filepath.Join(runs, "run-1"), filepath.Join(runs, "run-2"), filepath.Join(work, "app", "tasks", "S02", "attempts", "1"),
		filepath.Join(work, "app", "tasks", "S02", "attempts", "2")} {
		if exists(p) {
			t.Errorf("%s is still there", p)
		}
	}
	// What the kept runs use stays: run 3's archive, S02's attempt 3, S01's
	// result of run 1.
	for _, p := range []string{filepath.Join(runs, "run-3"), filepath.Join(work, "app", "tasks", "S02", "attempts", "3"),
		filepath.Join(work, "app", "tasks", "S01", "status.json"), filepath.Join(runs, "S01", "output", "one.txt")} {
		if !exists(p) {
			t.Errorf("%s was removed", p)
		}
	}
	if r := runDispatch(t, nil, "--home", home, "status", "app", "--run", "1"); r.code == 0 || !strings.Contains(r.stderr, "pruned") {
		t.Errorf("status --run 1 of a pruned run: %s", r)
	}
	if r := runDispatch(t, nil, "--home", home, "prune", "app"); r.code != 0 || !strings.Contains(r.stdout, "app: nothing to prune") {
		t.Errorf("a second prune: %s", r)
	}
	assertReuseAfterPrune(t, home, ledger)
}

// assertReuseAfterPrune: a new run still reuses S01's result of run 1.
func assertReuseAfterPrune(t *testing.T, home, ledger string) {
	t.Helper()
	writeFile(t, filepath.Join(home, "specs", "app", "S02-two.md"), "echo two-9 > two.txt\n")
	r := runDispatch(t, nil, "--home", home, "start", "app")
	if r.code != 0 || !strings.Contains(r.stdout, "1 task(s) to run, 1 reused") {
		t.Fatalf("a run after the prune: %s", r)
	}
	if b, _ := os.ReadFile(filepath.Join(ledger, "S01")); strings.Count(string(b), "ran") != 1 {
		t.Errorf("S01 ran %d times, want once (reused ever since)", strings.Count(string(b), "ran"))
	}
	if r := runDispatch(t, nil, "--home", home, "logs", "app", "S01"); r.code != 0 {
		t.Errorf("logs of the reused S01: %s", r)
	}
}

// TestPruneKilledMidway: a prune killed after removing the first run's
// files, before its rows, is finished by the next one.
func TestPruneKilledMidway(t *testing.T) {
	home, work, ledger := pruneHome(t, "{runs: 1}")
	r := runDispatch(t, []string{crashpoint.Env + "=" + crashpoint.MidPrune}, "--home", home, "prune", "app")
	if r.code != -1 {
		t.Fatalf("with %s=%s the prune should have been killed: %s", crashpoint.Env, crashpoint.MidPrune, r)
	}
	if exists(filepath.Join(home, "runs", "app", "run-1")) || !exists(filepath.Join(home, "runs", "app", "run-2")) {
		t.Fatalf("the killed prune should have removed run 1's archive and no other")
	}
	// Runs being pruned are not listed.
	if got := listedRuns(t, home); fmt.Sprint(got) != "[4]" {
		t.Errorf("runs after the killed prune = %v, want [4]", got)
	}
	r = runDispatch(t, nil, "--home", home, "prune", "app")
	if r.code != 0 || !strings.Contains(r.stdout, "app run 1 (an earlier prune began it)") || !strings.Contains(r.stdout, "pruned 3 run(s) of app") {
		t.Fatalf("the next prune: %s", r)
	}
	for n := 1; n <= 3; n++ {
		if p := filepath.Join(home, "runs", "app", fmt.Sprintf("run-%d", n)); exists(p) {
			t.Errorf("%s is still there", p)
		}
		if p := filepath.Join(work, "app", "tasks", "S02", "attempts", fmt.Sprint(n)); exists(p) {
			t.Errorf("%s is still there", p)
		}
	}
	assertReuseAfterPrune(t, home, ledger)
}

// TestPruneDoesNotFollowATasksAttemptsLink: a task whose second attempt
// replaced its task directory's attempts/ with a symbolic link to a
// directory of the operator's does not make the prune of its run remove
// <that directory>/1 on the node: the link goes, what it points at stays.
func TestPruneDoesNotFollowATasksAttemptsLink(t *testing.T) {
	ledger, victim := t.TempDir(), t.TempDir()
	writeFile(t, filepath.Join(victim, "1", "precious.txt"), "keep me\n")
	s01 := fmt.Sprintf("if [ ! -e %[1]s/failed ]; then touch %[1]s/failed; exit 1; fi\nrm -rf ../attempts; ln -s %[2]s ../attempts\necho one > one.txt\n", ledger, victim)
	home, work := opsHome(t, map[string]map[string]string{"app": {"S01-one.md": s01, "S02-two.md": "echo two-1 > two.txt\n"}})
	unsandboxed(t, home, "S01 writes outside its output/, as a task without a sandbox can")
	for i := 1; i <= 2; i++ {
		writeFile(t, filepath.Join(home, "specs", "app", "S02-two.md"), fmt.Sprintf("echo two-%d > two.txt\n", i))
		if r := runDispatch(t, nil, "--home", home, "start", "app"); r.code != 0 {
			t.Fatalf("run %d: %s", i, r)
		}
	}
	link := filepath.Join(work, "app", "tasks", "S01", "attempts")
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&fs.ModeSymlink == 0 {
		t.Fatalf("S01 did not leave its link: %v %v", fi, err)
	}
	if !exists(filepath.Join(victim, "1", "precious.txt")) {
		t.Fatalf("%s is gone before the prune", victim)
	}
	writeFile(t, filepath.Join(home, "specs", "app", "project.yaml"), "tool: shell\nintegration: false\nretention: {runs: 1}\n")
	r := runDispatch(t, nil, "--home", home, "prune", "app")
	if r.code != 0 || !strings.Contains(r.stdout, "pruned 1 run(s) of app") {
		t.Fatalf("prune: %s", r)
	}
	if !exists(filepath.Join(victim, "1", "precious.txt")) {
		t.Errorf("the prune removed %s/1, where the task's link pointed", victim)
	}
}

// TestPruneKeepsTheRunAScheduleAwaits: serve stopped while its scheduled
// run 1 ran; the operator finished it by hand, ran again and pruned
// (retention: runs 1). Run 1, whose end the schedule has not read yet,
// stays: serve, started again, reads its result, and its schedule goes on
// (it used to fail its check every second for good: run 1 was pruned).
func TestPruneKeepsTheRunAScheduleAwaits(t *testing.T) {
	gate := filepath.Join(t.TempDir(), "go")
	home, _ := opsHome(t, map[string]map[string]string{"app": {"S01-a.md": fmt.Sprintf("while [ ! -e %s ]; do sleep 0.05; done\necho ok > a.txt\n", gate)}})
	unsandboxed(t, home, "S01 waits for a file the test writes outside its workspace")
	writeFile(t, filepath.Join(home, "specs", "app", "project.yaml"), "tool: shell\nintegration: false\nretention: {runs: 1}\nschedule:\n  at: 2026-01-01T00:00\n")
	serve := func() {
		t.Helper()
		if r := runDispatch(t, nil, "--home", home, "serve", "--detach"); r.code != 0 {
			t.Fatalf("serve --detach: %s", r)
		}
	}
	stop := func() { runDispatch(t, nil, "--home", home, "serve", "--stop") }
	t.Cleanup(stop)
	serve()
	deadline := time.Now().Add(30 * time.Second)
	for v := readSchedules(t, home); len(v.Schedules) != 1 || v.Schedules[0].LastRun != 1; v = readSchedules(t, home) {
		if time.Now().After(deadline) {
			t.Fatalf("no scheduled run: %+v", v)
		}
		time.Sleep(100 * time.Millisecond)
	}
	stop()
	writeFile(t, gate, "")
	for i := 1; i <= 2; i++ {
		if r := runDispatch(t, nil, "--home", home, "start", "app"); r.code != 0 {
			t.Fatalf("start %d: %s", i, r)
		}
	}
	if r := runDispatch(t, nil, "--home", home, "prune", "app"); r.code != 0 || !strings.Contains(r.stdout, "app: nothing to prune") {
		t.Errorf("the prune while the schedule awaits run 1: %s", r)
	}
	serve()
	deadline = time.Now().Add(30 * time.Second)
	for v := readSchedules(t, home); len(v.Schedules) != 1 || v.Schedules[0].LastResult != "passed"; v = readSchedules(t, home) {
		if time.Now().After(deadline) {
			t.Fatalf("the schedule never read run 1's result: %+v\nlog:\n%s", v, readFile(t, filepath.Join(home, "dispatch.log")))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if log := readFile(t, filepath.Join(home, "dispatch.log")); strings.Contains(log, "schedule check failed") {
		t.Errorf("the schedule check failed:\n%s", log)
	}
	stop()
	if r := runDispatch(t, nil, "--home", home, "prune", "app"); r.code != 0 || !strings.Contains(r.stdout, "pruned 1 run(s) of app") {
		t.Errorf("the prune once the schedule read run 1: %s", r)
	}
}
