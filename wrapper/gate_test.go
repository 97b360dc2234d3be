package wrapper

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/internal/gittest"
	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/gitresult"
	"github.com/dispatch-tool/dispatch/wrapper/internal/wtest"
	"github.com/dispatch-tool/dispatch/wrapper/taskfiles"
)

// gateAnswer passes when the gated copy's answer file says right, and
// prints what it found otherwise.
const gateAnswer = `test "$(cat answer)" = right || { echo "answer is $(cat answer)"; exit 1; }`

// TestGate: the gate runs after the tool ended well, on a fresh copy of
// the result (what the tool wrote into gate/ is gone), with setup run in
// that copy first; its verdict decides a task gate's attempt (class gate,
// the output's tail kept) and only reports a project gate's; a gate that
// hangs is stopped at its timeout; a command not found is said so; a tree
// gated before is not gated again. `status` reports the result from the
// supervisor's record, whatever status.json says.
func TestGate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		tool    string
		setup   string
		gate    wire.LaunchGate
		status  string
		passed  bool
		tail    string
		err     string
		missing bool
	}{
		{name: "passes", tool: "echo right > answer", gate: wire.LaunchGate{Command: gateAnswer, Decides: true},
			status: wire.StatusCompleted, passed: true},
		{name: "fails the attempt", tool: "echo wrong > answer", gate: wire.LaunchGate{Command: gateAnswer, Decides: true},
			status: wire.StatusFailed, tail: "answer is wrong", err: "exit status 1"},
		{name: "a planted gate copy is not what is gated", tool: "echo wrong > answer; mkdir -p ../gate; echo right > ../gate/answer",
			gate: wire.LaunchGate{Command: gateAnswer, Decides: true}, status: wire.StatusFailed, tail: "answer is wrong"},
		{name: "setup runs in the copy first", tool: "echo right > answer", setup: "pwd >> ../setup-dirs",
			gate:   wire.LaunchGate{Command: "grep -q '/gate$' ../setup-dirs && " + gateAnswer, Decides: true},
			status: wire.StatusCompleted, passed: true},
		{name: "reported only", tool: "echo wrong > answer", gate: wire.LaunchGate{Command: gateAnswer},
			status: wire.StatusCompleted, tail: "answer is wrong"},
		{name: "hangs", tool: "true", gate: wire.LaunchGate{Command: "echo started; sleep 60", TimeoutSeconds: 0.5, Decides: true},
			status: wire.StatusFailed, tail: "started", err: "timed out"},
		{name: "not found", tool: "true", gate: wire.LaunchGate{Command: "no-such-gate-command", Decides: true},
			status: wire.StatusFailed, err: "not found", missing: true},
		{name: "a tool that failed is not gated", tool: "echo right > answer; exit 3",
			gate: wire.LaunchGate{Command: "touch ../gated", Decides: true}, status: wire.StatusFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if tc.gate.TimeoutSeconds == 0 {
				tc.gate.TimeoutSeconds = 20
			}
			tk := newTask(t, "", wire.Launch{Command: shell(tc.tool), Setup: tc.setup, Gate: &tc.gate})
			tk.run(t, "")
			st := tk.waitFinal(t)
			if st.Status != tc.status {
				t.Fatalf("status %s (%s: %s), want %s; task.log:\n%s", st.Status, st.ErrorClass, st.Error, tc.status, tk.readFile(t, taskfiles.FileLog))
			}
			if strings.HasPrefix(tc.name, "a tool that failed") {
				if st.ErrorClass != wire.ClassExit || st.Gate != nil || fileExists(tk.path("gated")) {
					t.Fatalf("the gate ran after the tool failed: %+v", st)
				}
				return
			}
			if st.Status == wire.StatusFailed && st.ErrorClass != wire.ClassGate {
				t.Errorf("error class %q, want gate", st.ErrorClass)
			}
			// Forged afterwards: status reads the record's result.
			forged := *st
			forged.Gate = &wire.GateResult{Passed: !tc.passed, OutputTail: "forged"}
			if err := taskfiles.WriteJSONAtomic(tk.path(taskfiles.FileStatus), forged); err != nil {
				t.Fatal(err)
			}
			ts := statusOf(t, tk)
			g := ts.Status.Gate
			if g == nil {
				t.Fatalf("status reports no gate: %+v", ts.Status)
			}
			if g.Passed != tc.passed || g.Missing != tc.missing || !strings.Contains(g.OutputTail, tc.tail) ||
				!strings.Contains(g.Error, tc.err) || !strings.HasPrefix(g.Tree, "sha256:") {
				t.Errorf("gate %+v, want passed %v, missing %v, tail with %q, error with %q", g, tc.passed, tc.missing, tc.tail, tc.err)
			}
		})
	}
}

// TestGateKnownTree: a tree the same command gated before (launch.json's
// known results) takes that result and is not gated again; another tree
// is.
func TestGateKnownTree(t *testing.T) {
	t.Parallel()
	marker := filepath.Join(t.TempDir(), "gated")
	gate := wire.LaunchGate{Command: "echo ran >> " + marker + "; " + gateAnswer, TimeoutSeconds: 20, Decides: true}
	first := newTask(t, "", wire.Launch{Command: shell("echo wrong > answer"), Gate: &gate})
	first.run(t, "")
	st := first.waitFinal(t)
	known := statusOf(t, first).Status.Gate
	if st.ErrorClass != wire.ClassGate || known == nil || known.Passed {
		t.Fatalf("first attempt: %+v, gate %+v", st, known)
	}
	gate.Known = []wire.GateResult{*known}
	for _, tc := range []struct {
		answer string
		reused bool
		runs   int
	}{{"wrong", true, 1}, {"right", false, 2}} {
		tk := newTask(t, "", wire.Launch{Command: shell("echo " + tc.answer + " > answer"), Gate: &gate})
		tk.run(t, "")
		tk.waitFinal(t)
		g := statusOf(t, tk).Status.Gate
		data, _ := os.ReadFile(marker)
		if g == nil || g.Reused != tc.reused || strings.Count(string(data), "ran") != tc.runs {
			t.Errorf("answer %s: gate %+v, gated %d times; want reused %v, %d runs", tc.answer, g, strings.Count(string(data), "ran"), tc.reused, tc.runs)
		}
	}
}

// TestGateKnownTreeIsTheWholeTree: a tree is known only when all of it is
// the same: a passing tree with a link or a directory added (which the
// gate sees, and may fail on) is gated again, not taken for the one that
// passed.
func TestGateKnownTreeIsTheWholeTree(t *testing.T) {
	t.Parallel()
	check := "test ! -L link && test ! -e dir && " + gateAnswer
	gate := wire.LaunchGate{Command: check, TimeoutSeconds: 20, Decides: true}
	first := newTask(t, "", wire.Launch{Command: shell("echo right > answer"), Gate: &gate})
	first.run(t, "")
	first.waitFinal(t)
	known := statusOf(t, first).Status.Gate
	if known == nil || !known.Passed {
		t.Fatalf("first attempt's gate %+v", known)
	}
	gate.Known = []wire.GateResult{*known}
	for _, extra := range []string{"ln -s /nonexistent link", "ln -s answer link", "mkdir dir", "mkdir -p dir/sub"} {
		tk := newTask(t, "", wire.Launch{Command: shell("echo right > answer && " + extra), Gate: &gate})
		tk.run(t, "")
		st := tk.waitFinal(t)
		g := statusOf(t, tk).Status.Gate
		if g == nil || g.Reused || g.Passed || g.Tree == known.Tree || st.ErrorClass != wire.ClassGate {
			t.Errorf("%s: gate %+v, status %s (%s); want the tree gated again and failed", extra, g, st.Status, st.ErrorClass)
		}
	}
}

// TestGateLargeOutput: a gate that prints more than the tail it keeps,
// in characters JSON escapes six times over, still leaves a readable
// status.json and its result in the record.
func TestGateLargeOutput(t *testing.T) {
	t.Parallel()
	gate := wire.LaunchGate{Command: `i=0; while [ $i -lt 3000 ]; do echo "<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<< $i"; i=$((i+1)); done; exit 1`,
		TimeoutSeconds: 20, Decides: true}
	tk := newTask(t, "", wire.Launch{Command: shell("true"), Gate: &gate})
	tk.run(t, "")
	st := tk.waitFinal(t)
	ts := statusOf(t, tk)
	if ts.Status == nil || ts.Status.Gate == nil || ts.Status.Gate.Passed || !strings.Contains(ts.Status.Gate.OutputTail, "<<< 2999") || st.ErrorClass != wire.ClassGate {
		t.Fatalf("status %+v (%s); want the gate's failure with the end of its output", ts.Status, ts.StatusError)
	}
}

// TestGateGitNative: a git-native attempt's gate runs on a checkout of
// its result commit: a file the tool left ignored by git (not in the
// commit) is not there, and the tree is the commit's.
func TestGateGitNative(t *testing.T) {
	t.Parallel()
	op := gittest.New(t)
	op.Write(".gitignore", "*.cache\n")
	op.Write("answer", "wrong\n")
	base := op.Commit("base")
	root := t.TempDir()
	repo := filepath.Join(root, "demo", "repo.git")
	gitCall(t, string(op.Pack(base)), "git-receive", "--repo", repo, "--commit", base)
	gate := wire.LaunchGate{Command: `test ! -e pass.cache && ` + gateAnswer, TimeoutSeconds: 20, Decides: true}
	tk := newTask(t, root, wire.Launch{Task: "S01", Gate: &gate,
		Repo:    &wire.LaunchRepo{Dir: repo, Base: base, Branch: "dispatch/demo/S01", Message: "S01"},
		Command: shell("echo right > answer && touch pass.cache")})
	t.Cleanup(func() { os.RemoveAll(gitresult.SnapshotDirOf(wrapperBin, tk.dir)) })
	tk.run(t, "")
	st := tk.waitFinal(t)
	g := statusOf(t, tk).Status.Gate
	if st.Status != wire.StatusCompleted || !wire.IsCommitID(st.Commit) || g == nil || !g.Passed || !strings.HasPrefix(g.Tree, "git:") {
		t.Fatalf("attempt %+v, gate %+v; task.log:\n%s", st, g, tk.readFile(t, taskfiles.FileLog))
	}
	out, err := exec.Command("git", "--git-dir", gitresult.SnapshotDirOf(wrapperBin, tk.dir), "rev-parse", st.Commit+"^{tree}").Output()
	if tree := strings.TrimSpace(string(out)); err != nil || g.Tree != "git:"+tree {
		t.Errorf("gated tree %s, want the commit's git:%s", g.Tree, tree)
	}
}

// statusOf is the task as `wrapper status` reports it (the installed
// wrapper binary, whose private records the attempts wrote).
func statusOf(t *testing.T, tk *testTask) wire.TaskStatus {
	t.Helper()
	out, code := runWrapper(t, "", "status", "--root", tk.root, "--project", tk.project)
	var ns wire.NodeStatus
	if err := json.Unmarshal(out, &ns); err != nil || code != 0 {
		t.Fatalf("status: exit %d, %s", code, out)
	}
	for _, ts := range ns.Tasks {
		if ts.Task == tk.name && ts.Status != nil {
			return ts
		}
	}
	t.Fatalf("status does not list %s: %s", tk.name, out)
	return wire.TaskStatus{}
}

func fileExists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// TestGateKilled: `kill` stops an attempt whose gate runs, as it stops
// one whose tool runs: killed, and the gate's processes gone.
func TestGateKilled(t *testing.T) {
	t.Parallel()
	pidFile := filepath.Join(t.TempDir(), "gate.pid")
	gate := wire.LaunchGate{Command: "echo $$ > " + pidFile + "; exec sleep 60", TimeoutSeconds: 50, Decides: true}
	tk := newTask(t, "", wire.Launch{Command: shell("true"), Gate: &gate})
	tk.run(t, "")
	wtest.Poll(t, 15*time.Second, "the gate to start", func() bool { return fileExists(pidFile) })
	if out, code := runWrapper(t, "", "kill", "--dir", tk.dir, "--grace", "1s"); code != 0 {
		t.Fatalf("kill: exit %d: %s", code, out)
	}
	st := tk.waitFinal(t)
	if st.Status != wire.StatusKilled {
		t.Errorf("status %s (%s), want killed", st.Status, st.Error)
	}
	data, _ := os.ReadFile(pidFile)
	if pid, err := strconv.Atoi(strings.TrimSpace(string(data))); err != nil || syscall.Kill(pid, 0) == nil {
		t.Errorf("the gate's process %q is still there (%v)", data, err)
	}
}

// TestGateLargeLaunch: a launch.json that carries many known gate results
// (a few hundred KiB: more than the other control files may be) is read.
func TestGateLargeLaunch(t *testing.T) {
	t.Parallel()
	gate := wire.LaunchGate{Command: gateAnswer, TimeoutSeconds: 20, Decides: true}
	for i := range 64 {
		gate.Known = append(gate.Known, wire.GateResult{Tree: fmt.Sprintf("sha256:%064d", i), OutputTail: strings.Repeat("y", 4<<10)})
	}
	tk := newTask(t, "", wire.Launch{Command: shell("echo right > answer"), Gate: &gate})
	if fi, err := os.Stat(tk.path(taskfiles.FileLaunch)); err != nil || fi.Size() <= taskfiles.MaxControlFile {
		t.Fatalf("launch.json: %v, %v; want more than %d bytes", fi, err, taskfiles.MaxControlFile)
	}
	tk.run(t, "")
	if st := tk.waitFinal(t); st.Status != wire.StatusCompleted {
		t.Fatalf("status %+v", st)
	}
}
