//go:build linux

package wrapper

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/internal/wtest"
	"github.com/dispatch-tool/dispatch/wrapper/limits"
	"github.com/dispatch-tool/dispatch/wrapper/nodestatus"
	"github.com/dispatch-tool/dispatch/wrapper/sandbox"
	"github.com/dispatch-tool/dispatch/wrapper/taskfiles"
)

// The red-team tests of the sandbox: each runs one attack as a task next
// to a neighbour task, both under bwrap, on a node laid out as in
// production, and checks that the attack failed, the neighbour completed
// and nothing outside the attacker's workspace changed.
// DISPATCH_TEST_SANDBOX=off runs them without the sandbox, to see each
// fail.

// fakeKey is planted in the node user's ~/.ssh.
const fakeKey = "-----BEGIN OPENSSH PRIVATE KEY-----\nFAKE-KEY-FOR-THE-SANDBOX-TEST\n"

// neighbourSecret is the neighbour's api_mode secret (its environment).
const neighbourSecret = "NEIGHBOUR-SECRET-4711"

// sandboxNode is a node outside /tmp (which the sandbox replaces with the
// attempt's own): <root>/home is the node user's HOME, <root>/work the
// work_dir, the wrapper installed in <root>/work/.bin as the controller
// installs it.
type sandboxNode struct {
	root, home, work, bin string
	cred                  *syscall.Credential // the node user when not the test's
	mode                  string              // launch.json's sandbox
	env                   []string            // added to the wrapper's environment
}

// requireBwrap fails the test when bwrap does not work here: `make test`
// installs it (.ci/test-deps).
func requireBwrap(t *testing.T) {
	t.Helper()
	if r := sandbox.ProbeBwrap(t.Context()); r.Sandbox != wire.SandboxBwrap {
		t.Fatalf("the sandbox tests need bubblewrap: %s; fix: %s (make test installs it)", r.Error, r.Fix)
	}
}

// newSandboxNode lays out a node; asUser runs its wrapper as that user
// (when the test runs as root).
func newSandboxNode(t *testing.T, asUser string) *sandboxNode {
	t.Helper()
	requireBwrap(t)
	root, err := os.MkdirTemp("/var/tmp", "dispatch-sandbox-test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	n := &sandboxNode{root: root, home: filepath.Join(root, "home"), work: filepath.Join(root, "work"), mode: wire.SandboxBwrap}
	if os.Getenv("DISPATCH_TEST_SANDBOX") == "off" {
		n.mode = ""
	}
	n.bin = filepath.Join(n.work, ".bin", "dispatch-wrapper-test")
	for _, d := range []string{filepath.Join(n.home, ".ssh"), filepath.Dir(n.bin)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(n.home, ".ssh", "id_ed25519"), []byte(fakeKey), 0o600); err != nil {
		t.Fatal(err)
	}
	exe, err := os.ReadFile(wrapperBin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(n.bin, exe, 0o755); err != nil {
		t.Fatal(err)
	}
	if asUser != "" && os.Geteuid() == 0 {
		u, err := user.Lookup(asUser)
		if err != nil {
			t.Fatalf("user %s: %v", asUser, err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		n.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		err = filepath.Walk(root, func(p string, _ os.FileInfo, err error) error {
			if err != nil {
				return err
			}
			return os.Lchown(p, uid, gid)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return n
}

// sandbox.TaskDir is the directory of task id of project demo.
func (n *sandboxNode) taskDir(id string) string {
	return filepath.Join(n.work, "demo", "tasks", id)
}

// neighbourScript writes its data, waits for the attack to be over and
// completes only if nobody touched its workspace.
const neighbourScript = `echo neighbour-data > data; sleep 3; [ "$(cat data)" = neighbour-data ] && [ ! -e pwned ]`

// item is task id of project demo on the node, attempt 1, with l's
// command and settings.
func (n *sandboxNode) item(id string, l wire.Launch) wire.LaunchItem {
	l.Project, l.Task, l.Attempt, l.Node = "demo", id, 1, "local"
	l.HeartbeatSeconds, l.TimeoutSeconds, l.WorkDir = 0.2, 30, n.work
	return wire.LaunchItem{Dir: n.taskDir(id), Spec: "# " + id + "\n", Launch: l}
}

// launch starts items in one `wrapper launch` as the node user and checks
// that each one started.
func (n *sandboxNode) launch(t *testing.T, items ...wire.LaunchItem) {
	t.Helper()
	doc, err := json.Marshal(wire.LaunchBatch{Launches: items})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, n.bin, "launch")
	cmd.Stdin = bytes.NewReader(doc)
	cmd.Env = append([]string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + n.home}, n.env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: n.cred}
	out, err := cmd.Output()
	var reply wire.LaunchReply
	if err != nil || json.Unmarshal(out, &reply) != nil || len(reply.Results) != len(items) {
		t.Fatalf("launch: %v: %s", err, out)
	}
	for _, r := range reply.Results {
		if r.Run == nil {
			t.Fatalf("launch: %+v", r)
		}
	}
	// `launch` replies before the supervisor writes the first status.
	for _, it := range items {
		wtest.Poll(t, 25*time.Second, it.Dir+"'s first status", func() bool {
			st, err := taskfiles.ReadStatus(it.Dir)
			return err == nil && st.Attempt == it.Launch.Attempt
		})
	}
}

// final waits for task id's final status.
func (n *sandboxNode) final(t *testing.T, id string) *wire.Status {
	t.Helper()
	return n.finalWithin(t, id, 25*time.Second)
}

// finalWithin waits up to d for task id's final status.
func (n *sandboxNode) finalWithin(t *testing.T, id string, d time.Duration) *wire.Status {
	t.Helper()
	var st *wire.Status
	wtest.Poll(t, d, id+" to end", func() bool {
		var err error
		st, err = taskfiles.ReadStatus(n.taskDir(id))
		return err == nil && st.Final()
	})
	return st
}

// run starts the attacker's script and the neighbour in one launch and
// waits for both to end.
func (n *sandboxNode) run(t *testing.T, attack string) (att, nb *wire.Status) {
	t.Helper()
	neighbour := n.item("NEIGHBOUR", wire.Launch{Command: shell(neighbourScript), Sandbox: n.mode})
	neighbour.Env = map[string]string{"NEIGHBOUR_SECRET": neighbourSecret}
	n.launch(t, n.item("ATTACK", wire.Launch{Command: shell(attack), Sandbox: n.mode}), neighbour)
	return n.final(t, "ATTACK"), n.final(t, "NEIGHBOUR")
}

// snapshot is what the node holds outside the attacker's own task
// directory: every file's content, by path.
func (n *sandboxNode) snapshot(t *testing.T) map[string]string {
	t.Helper()
	files := map[string]string{}
	attacker := n.taskDir("ATTACK")
	err := filepath.Walk(n.root, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if sandbox.Under(p, attacker) {
			return filepath.SkipDir
		}
		// What the wrapper itself rewrites as the attempts go.
		if fi.IsDir() || strings.Contains(p, "/.ctl/") || strings.Contains(p, "/"+nodestatus.DirLive+"/") || sandbox.Under(p, n.taskDir("NEIGHBOUR")) ||
			strings.HasPrefix(filepath.Base(p), sandbox.FileProbeCache) {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		files[p] = fmt.Sprintf("%x", sha256.Sum256(data))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// checkContained checks what every attack must leave: the neighbour
// completed with its workspace as it wrote it, nothing outside the
// attacker's task directory changed, and the attack ran sandboxed.
func (n *sandboxNode) checkContained(t *testing.T, before map[string]string, att, nb *wire.Status) {
	t.Helper()
	if nb.Status != wire.StatusCompleted {
		t.Errorf("the neighbour: %+v, want completed", nb)
	}
	if data, err := os.ReadFile(filepath.Join(n.taskDir("NEIGHBOUR"), taskfiles.DirOutput, "data")); err != nil || string(data) != "neighbour-data\n" {
		t.Errorf("the neighbour's data: %q, %v; want it as it wrote it", data, err)
	}
	if _, err := os.Lstat(filepath.Join(n.taskDir("NEIGHBOUR"), taskfiles.DirOutput, "pwned")); err == nil {
		t.Error("the attacker wrote into the neighbour's workspace")
	}
	after := n.snapshot(t)
	for p, sum := range after {
		if before[p] != sum {
			t.Errorf("%s changed or appeared outside the attacker's task directory", p)
		}
	}
	for p := range before {
		if _, ok := after[p]; !ok {
			t.Errorf("%s disappeared", p)
		}
	}
	if att.Sandbox != wire.SandboxBwrap || nb.Sandbox != wire.SandboxBwrap {
		t.Errorf("status sandbox: attacker %q, neighbour %q; want bwrap", att.Sandbox, nb.Sandbox)
	}
}

// loot is what the attacker got: its output/loot.
func (n *sandboxNode) loot(t *testing.T) string {
	data, _ := os.ReadFile(filepath.Join(n.taskDir("ATTACK"), taskfiles.DirOutput, "loot"))
	return string(data)
}

// retry is a shell loop running cmd every 0.1 s for 2.5 s until it
// succeeds: the neighbour may not have written yet.
func retry(cmd string) string {
	return fmt.Sprintf(`i=0; while [ $i -lt 25 ]; do if %s; then break; fi; sleep 0.1; i=$((i+1)); done; true`, cmd)
}

func TestSandboxAttackReadSSHKey(t *testing.T) {
	t.Parallel()
	n := newSandboxNode(t, "")
	before := n.snapshot(t)
	key := filepath.Join(n.home, ".ssh", "id_ed25519")
	att, nb := n.run(t, fmt.Sprintf(`cat %s ~/.ssh/id_ed25519 > loot 2>&1; ls -la %s >> loot 2>&1; true`, key, filepath.Dir(key)))
	if strings.Contains(n.loot(t), "FAKE-KEY") {
		t.Errorf("the attacker read the node user's ~/.ssh: %q", n.loot(t))
	}
	n.checkContained(t, before, att, nb)
}

func TestSandboxAttackReadNeighbourOutput(t *testing.T) {
	t.Parallel()
	n := newSandboxNode(t, "")
	before := n.snapshot(t)
	data := filepath.Join(n.taskDir("NEIGHBOUR"), taskfiles.DirOutput, "data")
	att, nb := n.run(t, retry(fmt.Sprintf(`cat %s > loot 2>/dev/null`, data)))
	if strings.Contains(n.loot(t), "neighbour-data") {
		t.Errorf("the attacker read the neighbour's workspace: %q", n.loot(t))
	}
	n.checkContained(t, before, att, nb)
}

func TestSandboxAttackWriteNeighbourOutput(t *testing.T) {
	t.Parallel()
	n := newSandboxNode(t, "")
	before := n.snapshot(t)
	out := filepath.Join(n.taskDir("NEIGHBOUR"), taskfiles.DirOutput)
	att, nb := n.run(t, retry(fmt.Sprintf(`[ -d %[1]s ] && echo pwned > %[1]s/pwned 2>/dev/null && echo pwned > %[1]s/data`, out)))
	n.checkContained(t, before, att, nb)
}

func TestSandboxAttackReadNeighbourEnvThroughProc(t *testing.T) {
	t.Parallel()
	n := newSandboxNode(t, "")
	before := n.snapshot(t)
	att, nb := n.run(t, retry(`for p in /proc/[0-9]*; do tr '\0' '\n' < $p/environ 2>/dev/null; done | grep NEIGHBOUR_SECRET > loot`))
	if strings.Contains(n.loot(t), neighbourSecret) {
		t.Errorf("the attacker read the neighbour's environment: %q", n.loot(t))
	}
	n.checkContained(t, before, att, nb)
}

func TestSandboxAttackTouchHome(t *testing.T) {
	t.Parallel()
	n := newSandboxNode(t, "")
	before := n.snapshot(t)
	att, nb := n.run(t, fmt.Sprintf(`touch %s/x; touch ~/x; true`, n.home))
	if _, err := os.Lstat(filepath.Join(n.home, "x")); err == nil {
		t.Error("the attacker created ~/x in the node user's home")
	}
	n.checkContained(t, before, att, nb)
}

func TestSandboxAttackAppendToWrapper(t *testing.T) {
	t.Parallel()
	n := newSandboxNode(t, "")
	before := n.snapshot(t)
	// Appending to the running binary fails anyway (text file busy);
	// replacing it would not.
	att, nb := n.run(t, fmt.Sprintf(`echo '#!/bin/sh' >> %[1]s; cp %[1]s %[1]s.new && echo x >> %[1]s.new && mv -f %[1]s.new %[1]s; true`, n.bin))
	n.checkContained(t, before, att, nb)
}

// TestSandboxAttackKillAll runs its node as the unprivileged user bwtest
// when the test runs as root: without the sandbox, kill -9 -1 as root
// would kill every process of the machine.
func TestSandboxAttackKillAll(t *testing.T) {
	t.Parallel()
	asUser := ""
	if os.Geteuid() == 0 {
		if _, err := user.Lookup("bwtest"); err != nil {
			t.Fatalf("as root this test runs its node as the user bwtest (kill -9 -1 outside a sandbox kills every process of its user): %v; fix: useradd -m bwtest", err)
		}
		asUser = "bwtest"
	}
	n := newSandboxNode(t, asUser)
	before := n.snapshot(t)
	att, nb := n.run(t, `sleep 0.5; kill -9 -1; echo survived > loot`)
	if att.Status != wire.StatusCompleted && att.Signal != "SIGKILL" {
		t.Errorf("the attacker: %+v", att)
	}
	n.checkContained(t, before, att, nb)
}

func TestSandboxOrdinaryWork(t *testing.T) {
	t.Parallel()
	n := newSandboxNode(t, "")
	before := n.snapshot(t)
	const work = `set -e
python3 -c 'import sys, tempfile; open("py.txt", "w").write(sys.version[:1]); tempfile.TemporaryFile().write(b"x")'
git init -q repo && cd repo && echo hi > f && git add f
git -c user.name=t -c user.email=t@x commit -qm one && git log --oneline | wc -l > ../commits
[ "$HOME" != "" ] && touch "$HOME/.cache-ok" && echo ok > "$TMPDIR/t" && echo done > ../done`
	att, nb := n.run(t, work)
	if att.Status != wire.StatusCompleted {
		log, _ := os.ReadFile(filepath.Join(n.taskDir("ATTACK"), taskfiles.FileLog))
		t.Fatalf("ordinary work in the sandbox: %+v\n%s", att, log)
	}
	for f, want := range map[string]string{"py.txt": "3", "commits": "1\n", "done": "done\n"} {
		if got, _ := os.ReadFile(filepath.Join(n.taskDir("ATTACK"), taskfiles.DirOutput, f)); string(got) != want {
			t.Errorf("output/%s: %q, want %q", f, got, want)
		}
	}
	n.checkContained(t, before, att, nb)
}

// TestSandboxGoBuild: `go build` of a module with no dependencies works
// in the sandbox, its build cache in the attempt's private HOME (an empty
// one: the standard library is compiled there), nothing of the node
// user's home used or changed.
func TestSandboxGoBuild(t *testing.T) {
	t.Parallel()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go in the PATH")
	}
	n := newSandboxNode(t, "")
	before := n.snapshot(t)
	work := fmt.Sprintf(`set -e
mkdir tiny && cd tiny
printf 'module tiny\n\ngo 1.21\n' > go.mod
printf 'package main\n\nfunc main() { println("built") }\n' > main.go
GOTOOLCHAIN=local %s build -o ../tiny-bin .
cd .. && ./tiny-bin 2> ran.txt && GOTOOLCHAIN=local %[1]s env GOCACHE > gocache.txt`, goBin)
	attack := n.item("ATTACK", wire.Launch{Command: shell(work), Sandbox: n.mode})
	attack.Launch.TimeoutSeconds = 180
	neighbour := n.item("NEIGHBOUR", wire.Launch{Command: shell(neighbourScript), Sandbox: n.mode})
	n.launch(t, attack, neighbour)
	att, nb := n.finalWithin(t, "ATTACK", 200*time.Second), n.final(t, "NEIGHBOUR")
	if att.Status != wire.StatusCompleted {
		log, _ := os.ReadFile(filepath.Join(n.taskDir("ATTACK"), taskfiles.FileLog))
		t.Fatalf("go build in the sandbox: %+v\n%s", att, log)
	}
	out := filepath.Join(n.taskDir("ATTACK"), taskfiles.DirOutput)
	if got, _ := os.ReadFile(filepath.Join(out, "ran.txt")); string(got) != "built\n" {
		t.Errorf("the program built in the sandbox printed %q, want built", got)
	}
	gocache, _ := os.ReadFile(filepath.Join(out, "gocache.txt"))
	if want := filepath.Join(n.taskDir("ATTACK"), taskfiles.DirHome, ".cache", "go-build"); strings.TrimSpace(string(gocache)) != want {
		t.Errorf("GOCACHE in the sandbox: %q, want the private HOME's %s", gocache, want)
	}
	if _, err := os.Stat(filepath.Join(n.taskDir("ATTACK"), taskfiles.DirHome, ".cache", "go-build")); err != nil {
		t.Errorf("the build cache is not in the private HOME: %v", err)
	}
	n.checkContained(t, before, att, nb)
}

// TestSandboxAttackSymlinkToRoot: links in output/ to / and to the node
// user's ~/.ssh bring nothing from outside into what the collector packs
// (`tar` archives a link as a link, never its target). The sandbox does
// not stop the link being made; the collector is what holds here.
func TestSandboxAttackSymlinkToRoot(t *testing.T) {
	t.Parallel()
	n := newSandboxNode(t, "")
	before := n.snapshot(t)
	att, nb := n.run(t, fmt.Sprintf(`ln -s / rootlink; ln -s %s/.ssh sshkeys; ln -s %s/.ssh/id_ed25519 key; echo mine > mine`, n.home, n.home))
	n.checkContained(t, before, att, nb)
	archive := filepath.Join(n.root, "out.tar")
	cmd := exec.CommandContext(t.Context(), n.bin, "tar", "--dir", filepath.Join(n.taskDir("ATTACK"), taskfiles.DirOutput), "--out", archive)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("tar: %v: %s", err, out)
	}
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	var regular []string
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		if h.Typeflag == tar.TypeReg {
			regular = append(regular, h.Name)
			data, _ := io.ReadAll(tr)
			if strings.Contains(string(data), "FAKE-KEY") {
				t.Errorf("the archive holds the node user's key as %s", h.Name)
			}
		}
	}
	if len(regular) != 1 || regular[0] != "mine" {
		t.Errorf("files in the archive: %v, want only mine", regular)
	}
}

// A kill of a sandboxed task gives its tool the grace an unconfined one
// gets: SIGTERM reaches the tool inside the sandbox (bwrap passes no
// signal on), which cleans up before it ends; one that ignores it is
// killed when the grace is over.
func TestSandboxStopGivesGrace(t *testing.T) {
	n := newSandboxNode(t, "")
	if n.mode == "" {
		t.Skip("DISPATCH_TEST_SANDBOX=off")
	}
	const polite = `trap 'echo cleaned > cleaned; exit 0' TERM; touch started; while :; do sleep 0.1; done`
	const stubborn = `trap '' TERM; touch started; while :; do sleep 0.1; done`
	n.launch(t, n.item("POLITE", wire.Launch{Command: shell(polite), Sandbox: n.mode}),
		n.item("STUBBORN", wire.Launch{Command: shell(stubborn), Sandbox: n.mode}))
	for _, id := range []string{"POLITE", "STUBBORN"} {
		wtest.Poll(t, 20*time.Second, id+" to start", func() bool {
			_, err := os.Stat(filepath.Join(n.taskDir(id), taskfiles.DirOutput, "started"))
			return err == nil
		})
		cmd := exec.CommandContext(t.Context(), n.bin, "kill", "--dir", n.taskDir(id), "--grace", "3s")
		cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + n.home}
		if out, err := cmd.Output(); err != nil {
			t.Fatalf("kill %s: %v: %s", id, err, out)
		}
		if st := n.final(t, id); st.Status != wire.StatusKilled {
			t.Errorf("%s: status %+v, want killed", id, st)
		}
	}
	if got, _ := os.ReadFile(filepath.Join(n.taskDir("POLITE"), taskfiles.DirOutput, "cleaned")); string(got) != "cleaned\n" {
		t.Errorf("the sandboxed tool got no SIGTERM before the end: cleaned = %q", got)
	}
}

// hostTree is pid and every process below it, as the host numbers them.
func hostTree(t *testing.T, pid int) []int {
	t.Helper()
	procs, err := limits.ScanProcs()
	if err != nil {
		t.Fatal(err)
	}
	tree := []int{pid}
	for i := 0; i < len(tree); i++ {
		for _, p := range procs {
			if p.Ppid == tree[i] {
				tree = append(tree, p.Pid)
			}
		}
	}
	return tree
}

// ptraceScript waits for output/pids (the test writes it once both
// attempts run) and tries PTRACE_ATTACH and PTRACE_SEIZE on each pid,
// writing "<pid> <request> <result> <errno>" lines to loot; an attach
// that works is detached at once.
const ptraceScript = `i=0; while [ ! -s pids ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
python3 - > loot 2>&1 <<'PY'
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.restype = ctypes.c_long
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
for pid in open("pids").read().split():
    for name, req in (("attach", 16), ("seize", 0x4206)):
        r = libc.ptrace(req, int(pid), None, None)
        e = ctypes.get_errno()
        print(pid, name, r, os.strerror(e) if r else "ok", flush=True)
        if r == 0:
            libc.ptrace(17, int(pid), None, None)
PY
true`

// TestSandboxAttackPtraceNeighbour: the attacker gets the host pids of
// its neighbour's supervisor, bwrap and task, and of its own supervisor,
// and tries to ptrace each: in its own pid namespace there is no such
// process to attach to. As root without the sandbox every attach works.
func TestSandboxAttackPtraceNeighbour(t *testing.T) {
	t.Parallel()
	n := newSandboxNode(t, "")
	before := n.snapshot(t)
	neighbour := n.item("NEIGHBOUR", wire.Launch{Command: shell(neighbourScript), Sandbox: n.mode})
	n.launch(t, n.item("ATTACK", wire.Launch{Command: shell(ptraceScript), Sandbox: n.mode}), neighbour)
	running := func(id string) *wire.Status {
		var st *wire.Status
		wtest.Poll(t, 10*time.Second, id+" to run", func() bool {
			var err error
			st, err = taskfiles.ReadStatus(n.taskDir(id))
			return err == nil && st.Status == wire.StatusRunning && st.PID > 1 && st.ToolPID > 1
		})
		return st
	}
	nbRun, attRun := running("NEIGHBOUR"), running("ATTACK")
	var pids []string
	for _, p := range append(hostTree(t, nbRun.PID), attRun.PID) {
		pids = append(pids, strconv.Itoa(p))
	}
	if len(pids) < 3 {
		t.Fatalf("the neighbour's processes: %v, want its supervisor, bwrap and shell", pids)
	}
	out := filepath.Join(n.taskDir("ATTACK"), taskfiles.DirOutput)
	if err := os.WriteFile(filepath.Join(out, "pids.new"), []byte(strings.Join(pids, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(out, "pids.new"), filepath.Join(out, "pids")); err != nil {
		t.Fatal(err)
	}
	att, nb := n.final(t, "ATTACK"), n.final(t, "NEIGHBOUR")
	loot := n.loot(t)
	lines := strings.Split(strings.TrimSpace(loot), "\n")
	if len(lines) != 2*len(pids) {
		t.Fatalf("the attacker tried %d ptrace calls, want %d:\n%s", len(lines), 2*len(pids), loot)
	}
	for _, l := range lines {
		if f := strings.Fields(l); len(f) < 4 || f[2] != "-1" {
			t.Errorf("ptrace from the sandbox: %q, want -1", l)
		}
	}
	n.checkContained(t, before, att, nb)
}

// TestSandboxAttackSetuidFile: the task copies a binary into output/ and
// sets its setuid and setgid bits; run inside it changes nothing (bwrap
// binds every mount nosuid and sets no_new_privs, and as root the task
// has no capability to regain). What the controller collects carries
// neither bit: cmd:TestSetuidFileCollectedWithoutTheBit.
func TestSandboxAttackSetuidFile(t *testing.T) {
	t.Parallel()
	n := newSandboxNode(t, "")
	before := n.snapshot(t)
	att, nb := n.run(t, `cp /bin/cat suidcat && chmod u+s,g+s suidcat && ls -ln suidcat > loot
./suidcat /proc/self/status | grep -E '^(Uid|Gid|CapEff|CapPrm|NoNewPrivs):' >> loot
awk -v d="$(pwd)" '$5 == d { print "mount", $6 }' /proc/self/mountinfo >> loot`)
	loot := n.loot(t)
	if !strings.HasPrefix(loot, "-rwsr-sr-x") {
		t.Fatalf("the attacker could not make its setuid file (the test proves nothing):\n%s", loot)
	}
	fields := map[string][]string{}
	for _, l := range strings.Split(loot, "\n") {
		if f := strings.Fields(l); len(f) > 1 {
			fields[strings.TrimSuffix(f[0], ":")] = f[1:]
		}
	}
	uid, gid := strconv.Itoa(os.Getuid()), strconv.Itoa(os.Getgid())
	for key, want := range map[string][]string{
		"Uid": {uid, uid, uid, uid}, "Gid": {gid, gid, gid, gid},
		"CapEff": {"0000000000000000"}, "CapPrm": {"0000000000000000"}, "NoNewPrivs": {"1"},
	} {
		if got := fields[key]; strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("the setuid copy of cat ran with %s %v, want %v:\n%s", key, got, want, loot)
		}
	}
	if m := fields["mount"]; len(m) != 1 || !strings.Contains(","+m[0]+",", ",nosuid,") {
		t.Errorf("the task's output/ is mounted %v, want nosuid:\n%s", m, loot)
	}
	n.checkContained(t, before, att, nb)
}

// TestSandboxAgentHome runs a sandboxed attempt of a codex task (a shell
// standing in for codex) on a node whose user is logged in: the task
// reads the copy of the login in its private HOME and overwrites it; the
// node user's file is unchanged and the copy is gone after the attempt.
// A resumed attempt keeps the HOME (a file the task left stays) and gets
// the login again.
func TestSandboxAgentHome(t *testing.T) {
	t.Parallel()
	n := newSandboxNode(t, "")
	wtest.WriteTree(t, n.home, map[string]string{".codex/auth.json": "REAL-LOGIN", ".codex/config.toml": "config"})
	script := `cat ~/.codex/auth.json > seen-` + "$DISPATCH_ATTEMPT" + `; echo planted > ~/.codex/auth.json; echo mine >> ~/.codex/session`
	l := wire.Launch{Command: shell(script), Sandbox: n.mode, Agent: wire.AgentCodex}
	dir := n.taskDir("LOGIN")
	home := filepath.Join(dir, taskfiles.DirHome)
	check := func(attempt int) {
		t.Helper()
		st := n.final(t, "LOGIN")
		wlog, _ := os.ReadFile(filepath.Join(dir, taskfiles.FileWrapper))
		if st.Status != wire.StatusCompleted || st.Sandbox != wire.SandboxBwrap || st.Attempt != attempt {
			t.Fatalf("attempt %d: %+v, want completed under bwrap\n%s", attempt, st, wlog)
		}
		seen, _ := os.ReadFile(filepath.Join(dir, taskfiles.DirOutput, fmt.Sprintf("seen-%d", attempt)))
		if string(seen) != "REAL-LOGIN" {
			t.Errorf("attempt %d: the task saw %q in its auth.json, want the copy of the node user's", attempt, seen)
		}
		if data, _ := os.ReadFile(filepath.Join(n.home, ".codex", "auth.json")); string(data) != "REAL-LOGIN" {
			t.Errorf("attempt %d: the node user's auth.json: %q, want it unchanged", attempt, data)
		}
		if _, err := os.Lstat(filepath.Join(home, ".codex", "auth.json")); !os.IsNotExist(err) {
			t.Errorf("attempt %d: the task's auth.json is still there (%v)", attempt, err)
		}
		if data, _ := os.ReadFile(filepath.Join(home, ".codex", "session")); strings.Count(string(data), "mine") != attempt {
			t.Errorf("attempt %d: the task's own file in its HOME: %q, want it kept across the resume", attempt, data)
		}
	}
	n.launch(t, n.item("LOGIN", l))
	check(1)
	// The final status comes before the supervisor lets go of the lock.
	wtest.Poll(t, 25*time.Second, "the first supervisor to end", func() bool {
		alive, err := taskfiles.SupervisorAlive(dir)
		return err == nil && !alive
	})
	l.Resume = true
	item := n.item("LOGIN", l)
	item.Launch.Attempt = 2
	n.launch(t, item)
	check(2)
}

// TestSandboxFailureSaysSo: shell tasks in a real bwrap sandbox that write
// outside what they may (/etc, a directory of the node's /tmp, the node
// user's home, a setup writing into /etc, a gate writing into /usr) fail with their own error first,
// then that they ran sandboxed, what they could write (the node's
// sandbox_paths rw among them) and the fix; a task that passes, one
// that times out and an unconfined failure get no such note (issue 32
// item 9).
func TestSandboxFailureSaysSo(t *testing.T) {
	n := newSandboxNode(t, "")
	if n.mode == "" {
		t.Skip("DISPATCH_TEST_SANDBOX=off: this test is of the sandbox's note")
	}
	hostTmp, err := os.MkdirTemp("/tmp", "dispatch-sandbox-note")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(hostTmp) })
	if err := os.MkdirAll(filepath.Join(n.home, ".cache", "pip"), 0o755); err != nil {
		t.Fatal(err)
	}
	paths := &wire.SandboxPaths{RW: []string{"~/.cache/pip"}}
	tests := []struct {
		id, script string
		gate       string // the task gate's command
		setup      string
		sandbox    string
		timeout    float64
		wantStatus string
		wantFirst  string // the error's start
		note       bool
	}{
		{"ETC", "echo x > /etc/dispatch-note-test", "", "", wire.SandboxBwrap, 30, wire.StatusFailed, "exit status 2;", true},
		{"HOSTTMP", "echo x > " + hostTmp + "/x", "", "", wire.SandboxBwrap, 30, wire.StatusFailed, "exit status 2;", true},
		{"HOME", "echo x > " + n.home + "/.config/x", "", "", wire.SandboxBwrap, 30, wire.StatusFailed, "exit status 2;", true},
		{"GATE", "echo ok > ok", "echo x > /usr/dispatch-note-test", "", wire.SandboxBwrap, 30, wire.StatusFailed, "the task gate failed", true},
		{"SETUP", "true", "", "echo x > /etc/dispatch-note-test", wire.SandboxBwrap, 30, wire.StatusFailed, "setup failed: exit status 2", true},
		{"PASS", "echo x > /tmp/x && echo y > y", "", "", wire.SandboxBwrap, 30, wire.StatusCompleted, "", false},
		{"TIMEOUT", "sleep 30", "", "", wire.SandboxBwrap, 0.5, wire.StatusFailed, "timed out", false},
		{"OPEN", "exit 3", "", "", "", 30, wire.StatusFailed, "exit status 3", false},
	}
	var items []wire.LaunchItem
	for _, tc := range tests {
		l := wire.Launch{Command: shell(tc.script), Setup: tc.setup, Sandbox: tc.sandbox, SandboxPaths: paths}
		if tc.gate != "" {
			l.Gate = &wire.LaunchGate{Command: tc.gate, TimeoutSeconds: 30, Decides: true}
		}
		it := n.item(tc.id, l)
		it.Launch.TimeoutSeconds = tc.timeout
		items = append(items, it)
	}
	n.launch(t, items...)
	for _, tc := range tests {
		st := n.final(t, tc.id)
		if st.Status != tc.wantStatus || !strings.HasPrefix(st.Error, tc.wantFirst) {
			t.Errorf("%s: %s, error %q; want %s, beginning %q", tc.id, st.Status, st.Error, tc.wantStatus, tc.wantFirst)
			continue
		}
		hasNote := strings.Contains(st.Error, "ran sandboxed (bwrap) on node local")
		if hasNote != tc.note {
			t.Errorf("%s: error %q; want the sandbox's note: %v", tc.id, st.Error, tc.note)
			continue
		}
		if !tc.note {
			continue
		}
		want := []string{"; it ran sandboxed", "output/ (its workspace)", "its own /tmp", "~/.cache/pip (sandbox_paths rw)", "sandbox_paths: {rw: [path]}", "sandbox: off"}
		if tc.id == "GATE" {
			want = []string{"; its gate ran sandboxed", "the gate's copy of the result", "its own /tmp", "~/.cache/pip (sandbox_paths rw)", "sandbox_paths: {rw: [path]}", "sandbox: off"}
		}
		for _, w := range want {
			if !strings.Contains(st.Error, w) {
				t.Errorf("%s: error lacks %q: %s", tc.id, w, st.Error)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(hostTmp, "x")); err == nil {
		t.Error("the sandboxed task wrote into the node's /tmp")
	}
}
