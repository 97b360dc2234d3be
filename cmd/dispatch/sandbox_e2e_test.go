package main

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dispatch-tool/dispatch/internal/sshdtest"
)

// TestSandboxedTaskThroughDispatch: `sandbox: on` on a local node, through
// the real binary: a task that reads the node user's key by its absolute
// path finds nothing, its neighbour completes, and status and the report
// say each attempt ran under bwrap. The same project on a node with
// `sandbox: off` reads the key (the attack is real), and a project that
// says `sandbox: on` is refused by validate on that node.
func TestSandboxedTaskThroughDispatch(t *testing.T) {
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Fatalf("this test needs bubblewrap (make test installs it): %v", err)
	}
	// The node user's home, outside /tmp (which the sandbox replaces by
	// a private one): only hiding the home keeps the key from the task.
	nodeHome, err := os.MkdirTemp("/var/tmp", "dispatch-sandbox-home-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(nodeHome) })
	const secret = "SECRET-KEY-MATERIAL-42"
	writeFile(t, filepath.Join(nodeHome, ".ssh", "id_test"), secret+"\n")
	key := filepath.Join(nodeHome, ".ssh", "id_test")
	specs := map[string]map[string]string{"p": {
		"S01-steal.md": "cat '" + key + "' > stolen.txt 2>&1 || true\necho done > done.txt\n",
		"S02-fine.md":  "echo fine > fine.txt\n",
	}}
	run := func(sandbox string) (home string) {
		t.Helper()
		home, work := opsHome(t, specs)
		nodesYAML := filepath.Join(home, "nodes.yaml")
		writeFile(t, nodesYAML, strings.Replace(readFile(t, nodesYAML), "    work_dir: "+work+"\n",
			"    work_dir: "+work+"\n    sandbox: "+sandbox+"\n", 1))
		if r := runDispatch(t, []string{"HOME=" + nodeHome}, "--home", home, "start", "p"); r.code != 0 {
			t.Fatalf("start with sandbox: %s: %s", sandbox, r)
		}
		return home
	}

	home := run("on")
	out := filepath.Join(home, "runs", "p", "S01", "output")
	if got := readFile(t, filepath.Join(out, "stolen.txt")); strings.Contains(got, secret) {
		t.Fatalf("the sandboxed task read the node user's key: %q", got)
	}
	if readFile(t, filepath.Join(out, "done.txt")) != "done\n" || readFile(t, filepath.Join(home, "runs", "p", "S02", "output", "fine.txt")) != "fine\n" {
		t.Fatal("the tasks did not complete their work in the sandbox")
	}
	st := runDispatch(t, []string{"HOME=" + nodeHome}, "--home", home, "status", "p", "--json")
	var sv struct {
		Tasks []struct {
			ID      string `json:"id"`
			Sandbox string `json:"sandbox"`
		} `json:"tasks"`
	}
	if err := json.Unmarshal([]byte(st.stdout), &sv); err != nil || len(sv.Tasks) != 2 {
		t.Fatalf("status --json: %v: %s", err, st)
	}
	for _, tk := range sv.Tasks {
		if tk.Sandbox != "bwrap" {
			t.Errorf("status --json: %s sandbox = %q, want bwrap", tk.ID, tk.Sandbox)
		}
	}
	rep := runDispatch(t, []string{"HOME=" + nodeHome}, "--home", home, "report", "p", "--format", "json")
	var rv struct {
		Tasks []struct {
			ID       string `json:"id"`
			Attempts []struct {
				Sandbox string `json:"sandbox"`
			} `json:"attempts"`
		} `json:"tasks"`
	}
	if err := json.Unmarshal([]byte(rep.stdout), &rv); err != nil || len(rv.Tasks) != 2 {
		t.Fatalf("report --format json: %v: %s", err, rep)
	}
	for _, tk := range rv.Tasks {
		if len(tk.Attempts) != 1 || tk.Attempts[0].Sandbox != "bwrap" {
			t.Errorf("report: %s attempts = %+v, want one under bwrap", tk.ID, tk.Attempts)
		}
	}
	if md := readFile(t, filepath.Join(home, "runs", "p", "report.md")); !strings.Contains(md, "## Sandbox") || !strings.Contains(md, "S01#1 (bwrap)") {
		t.Errorf("report.md does not say the attempts were confined:\n%s", md)
	}

	// Unconfined, the same task reads the key: the attack above is real.
	home = run("off")
	if got := readFile(t, filepath.Join(home, "runs", "p", "S01", "output", "stolen.txt")); !strings.Contains(got, secret) {
		t.Fatalf("without the sandbox the task did not read the key and its neighbour's workspace (%q): the test proves nothing", got)
	}
	// A project that requires the sandbox is refused where it cannot be had.
	writeFile(t, filepath.Join(home, "specs", "p", "project.yaml"), "tool: shell\nintegration: false\nsandbox: on\n")
	if r := runDispatch(t, nil, "--home", home, "validate", "p"); r.code != 2 || !strings.Contains(r.stderr+r.stdout, "sandbox") {
		t.Fatalf("validate of a project that needs the sandbox on a node without it: want exit 2 naming the sandbox: %s", r)
	}
}

// TestSandboxOnAnSSHNode: the sandbox over SSH, with the task as the node
// user of a real sshd node: on a `sandbox: on` node a task that reads the
// node user's key (by its absolute path and through $HOME) and lists its
// neighbour's workspace finds nothing, the neighbour completes, and each
// attempt is recorded under bwrap; on a `sandbox: off` node the same task
// reads the key (the attack is real).
func TestSandboxOnAnSSHNode(t *testing.T) {
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Fatalf("this test needs bubblewrap (make test installs it): %v", err)
	}
	h := newSSHHome(t)
	c := h.client
	on, off := c.StartServer(t, "boxon"), c.StartServer(t, "boxoff")
	c.Trust(t, on)
	c.Trust(t, off)
	const secret = "SECRET-KEY-ON-THE-NODE-7"
	for _, s := range []*sshdtest.Server{on, off} {
		writeFile(t, filepath.Join(s.Home, ".ssh", "id_test"), secret+"\n")
	}
	writeFile(t, filepath.Join(h.home, "nodes.yaml"), fmt.Sprintf(`controller:
  poll_interval: 300ms
  ssh_connect_timeout: 2s
nodes:
  - name: boxon
    ssh: %s@127.0.0.1:%d
    slots: 2
    work_dir: %s
    sandbox: on
  - name: boxoff
    ssh: %s@127.0.0.1:%d
    slots: 2
    work_dir: %s
    sandbox: off
`, c.User, on.Port, on.WorkDir, c.User, off.Port, off.WorkDir))
	project := func(name, node, key, neighbour string) {
		dir := filepath.Join(h.home, "specs", name)
		writeFile(t, filepath.Join(dir, "project.yaml"), "tool: shell\nintegration: false\n")
		// S01 runs after S02, whose workspace then holds fine.txt.
		writeFile(t, filepath.Join(dir, "S01-steal.md"), fmt.Sprintf("---\nnode: %s\ndepends_on: [S02]\n---\n"+
			"{ cat '%s'; cat \"$HOME/.ssh/id_test\"; ls -la '%s'; } > stolen.txt 2>&1 || true\necho done > done.txt\n", node, key, neighbour))
		writeFile(t, filepath.Join(dir, "S02-fine.md"), fmt.Sprintf("---\nnode: %s\n---\necho fine > fine.txt\n", node))
	}
	project("confined", "boxon", filepath.Join(on.Home, ".ssh", "id_test"), filepath.Join(on.WorkDir, "confined", "tasks", "S02", "output"))
	project("open", "boxoff", filepath.Join(off.Home, ".ssh", "id_test"), filepath.Join(off.WorkDir, "open", "tasks", "S02", "output"))

	if r := h.run(t, "start", "confined"); r.code != 0 {
		t.Fatalf("start confined: %s", r)
	}
	out := filepath.Join(h.home, "runs", "confined")
	stolen := readFile(t, filepath.Join(out, "S01", "output", "stolen.txt"))
	if strings.Contains(stolen, secret) || strings.Contains(stolen, "fine.txt") {
		t.Fatalf("the sandboxed task on the SSH node read the key or its neighbour's workspace:\n%s", stolen)
	}
	if readFile(t, filepath.Join(out, "S01", "output", "done.txt")) != "done\n" || readFile(t, filepath.Join(out, "S02", "output", "fine.txt")) != "fine\n" {
		t.Fatal("the tasks did not complete their work in the sandbox")
	}
	st := h.run(t, "status", "confined", "--json")
	var sv struct {
		Tasks []struct {
			ID, Node, Sandbox string
		} `json:"tasks"`
	}
	if err := json.Unmarshal([]byte(st.stdout), &sv); err != nil || len(sv.Tasks) != 2 {
		t.Fatalf("status --json: %v: %s", err, st)
	}
	for _, tk := range sv.Tasks {
		if tk.Sandbox != "bwrap" || tk.Node != "boxon" {
			t.Errorf("%s ran on %s with sandbox %q; want boxon under bwrap", tk.ID, tk.Node, tk.Sandbox)
		}
	}
	if r := h.run(t, "start", "open"); r.code != 0 {
		t.Fatalf("start open: %s", r)
	}
	got := readFile(t, filepath.Join(h.home, "runs", "open", "S01", "output", "stolen.txt"))
	if !strings.Contains(got, secret) || !strings.Contains(got, "fine.txt") {
		t.Fatalf("unconfined, the task did not read the key and its neighbour's workspace (%q): the test proves nothing", got)
	}
}

// TestSetuidFileCollectedWithoutTheBit: a sandboxed task on a local node
// makes a setuid and setgid copy of a binary in output/ (alone, fetched
// file by file, and among 20 other files, fetched as one tar archive);
// the copies the controller collects into runs/ carry neither bit, so a
// node's task cannot leave a setuid program of the controller's user.
func TestSetuidFileCollectedWithoutTheBit(t *testing.T) {
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Fatalf("this test needs bubblewrap (make test installs it): %v", err)
	}
	const suid = "cp /bin/cat suidcat && chmod u+s,g+s suidcat && ls -ln suidcat > made.txt\n"
	home, work := opsHome(t, map[string]map[string]string{"p": {
		"S01-one.md":  suid,
		"S02-many.md": suid + "for i in $(seq 20); do echo $i > f$i; done\n",
	}})
	nodesYAML := filepath.Join(home, "nodes.yaml")
	writeFile(t, nodesYAML, strings.Replace(readFile(t, nodesYAML), "    work_dir: "+work+"\n",
		"    work_dir: "+work+"\n    sandbox: on\n", 1))
	if r := runDispatch(t, nil, "--home", home, "start", "p"); r.code != 0 {
		t.Fatalf("start: %s", r)
	}
	for _, id := range []string{"S01", "S02"} {
		out := filepath.Join(home, "runs", "p", id, "output")
		if made := readFile(t, filepath.Join(out, "made.txt")); !strings.HasPrefix(made, "-rwsr-sr-x") {
			t.Fatalf("%s could not make its setuid file (the test proves nothing): %q", id, made)
		}
		fi, err := os.Stat(filepath.Join(out, "suidcat"))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 || fi.Mode().Perm() != 0o755 {
			t.Errorf("%s's suidcat was collected as %v, want -rwxr-xr-x", id, fi.Mode())
		}
	}
}

// sshNodeOutsideTmp starts an sshd node whose sessions' HOME and the
// work_dir lie under /var/tmp: the sandbox replaces /tmp by the attempt's
// own, which would hide a node laid out there whatever else it does.
func sshNodeOutsideTmp(t *testing.T, c *sshdtest.Client, name string) (s *sshdtest.Server, home, work string) {
	t.Helper()
	root, err := os.MkdirTemp("/var/tmp", "dispatch-redteam-"+name+"-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	home, work = filepath.Join(root, "home"), filepath.Join(root, "work")
	for _, d := range []string{home, work} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	s = c.StartServerWith(t, name, "SetEnv HOME="+home, "Subsystem sftp internal-sftp -d "+home)
	c.Trust(t, s)
	return s, home, work
}

// treeSums is the content of every file under root, by path, but for the
// directories skip names (and the wrapper's own records, .ctl/).
func treeSums(t *testing.T, root string, skip ...string) map[string]string {
	t.Helper()
	sums := map[string]string{}
	err := filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		for _, s := range skip {
			if p == s {
				return filepath.SkipDir
			}
		}
		if fi.IsDir() && fi.Name() == ".ctl" {
			return filepath.SkipDir
		}
		if !fi.Mode().IsRegular() {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		sums[p] = fmt.Sprintf("%x", sha256.Sum256(data))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return sums
}

// TestSandboxRedTeamOnAnSSHNode runs the red-team attacks through
// `dispatch start` on a real sshd node with `sandbox: on`, each as a
// task of the node user next to a neighbour task: read ~/.ssh/* and
// ~/.aws/credentials, read the neighbour's environment through /proc,
// touch ~/x, append to (and replace) the installed wrapper, read and
// write the neighbour's output/. Every attack gets nothing, the neighbour
// completes, and nothing of the node outside the project's tasks changes.
// The same project on a `sandbox: off` node succeeds at each (the attacks
// are real). `kill -9 -1` is not among them: the sshd nodes log in as the
// user running the tests (root here), and kill -9 -1 as root outside a
// sandbox that failed would end every process of the machine; the
// wrapper's TestSandboxAttackKillAll runs it as the user bwtest.
func TestSandboxRedTeamOnAnSSHNode(t *testing.T) {
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Fatalf("this test needs bubblewrap (make test installs it): %v", err)
	}
	h := newSSHHome(t)
	c := h.client
	const (
		keySecret = "SSH-KEY-OF-THE-NODE-USER-5"
		awsSecret = "AWS-SECRET-OF-THE-NODE-USER-6"
		envSecret = "NEIGHBOUR-ENV-SECRET-7"
	)
	type node struct {
		name, home, work string
		s                *sshdtest.Server
	}
	var nodes []node
	for _, name := range []string{"redon", "redoff"} {
		s, home, work := sshNodeOutsideTmp(t, c, name)
		writeFile(t, filepath.Join(home, ".ssh", "id_ed25519"), keySecret+"\n")
		writeFile(t, filepath.Join(home, ".aws", "credentials"), "[default]\naws_secret_access_key = "+awsSecret+"\n")
		nodes = append(nodes, node{name, home, work, s})
	}
	on, off := nodes[0], nodes[1]
	writeFile(t, filepath.Join(h.home, "nodes.yaml"), fmt.Sprintf(`controller:
  poll_interval: 300ms
  ssh_connect_timeout: 2s
nodes:
  - name: redon
    ssh: %s@127.0.0.1:%d
    slots: 6
    work_dir: %s
    sandbox: on
  - name: redoff
    ssh: %s@127.0.0.1:%d
    slots: 6
    work_dir: %s
    sandbox: off
`, c.User, on.s.Port, on.work, c.User, off.s.Port, off.work))

	// retry runs cmd every 0.1 s for 4 s until it succeeds: the
	// neighbour may not have started yet.
	retry := func(cmd string) string {
		return fmt.Sprintf("i=0; while [ $i -lt 40 ]; do if %s; then break; fi; sleep 0.1; i=$((i+1)); done; true\n", cmd)
	}
	project := func(name string, n node) {
		dir := filepath.Join(h.home, "specs", name)
		writeFile(t, filepath.Join(dir, "project.yaml"), "tool: shell\nintegration: false\nmax_retries: 0\n")
		nbOut := filepath.Join(n.work, name, "tasks", "N01", "output")
		tasks := map[string]string{
			// The neighbour holds its secret in a process's environment
			// and completes only if its workspace is as it left it.
			"N01-neighbour": fmt.Sprintf("echo neighbour-data > data\nNEIGHBOUR_SECRET=%s sleep 5\n[ \"$(cat data)\" = neighbour-data ] && [ ! -e pwned ]\n", envSecret),
			"A01-keys":      fmt.Sprintf("{ cat ~/.ssh/* ~/.aws/credentials; cat %[1]s/.ssh/* %[1]s/.aws/credentials; ls -la %[1]s %[1]s/.ssh; } > loot.txt 2>&1; true\n", n.home),
			"A02-environ":   retry(`for p in /proc/[0-9]*; do tr '\0' '\n' < $p/environ 2>/dev/null; done | grep NEIGHBOUR_SECRET > loot.txt`),
			"A03-touch":     fmt.Sprintf("touch ~/x %s/x 2> loot.txt; true\n", n.home),
			"A04-wrapper": fmt.Sprintf("for f in %s/.bin/dispatch-wrapper-*; do { echo '#!/bin/sh' >> \"$f\"; } 2>&1\n"+
				"cp \"$f\" \"$f.new\" && echo x >> \"$f.new\" && mv -f \"$f.new\" \"$f\" && echo \"replaced $f\"; done > loot.txt 2>&1; true\n", n.work),
			"A05-neighbour": retry(fmt.Sprintf("[ -s %[1]s/data ] && cat %[1]s/data > loot.txt && echo pwned > %[1]s/pwned && echo pwned > %[1]s/data", nbOut)),
		}
		for id, body := range tasks {
			writeFile(t, filepath.Join(dir, id+".md"), fmt.Sprintf("---\nnode: %s\n---\n%s", n.name, body))
		}
	}
	project("confined", on)
	project("open", off)

	// A first project installs the wrapper; what the node holds then,
	// outside the attack project's tasks, must not change.
	writeFile(t, filepath.Join(h.home, "specs", "warm", "project.yaml"), "tool: shell\nintegration: false\n")
	writeFile(t, filepath.Join(h.home, "specs", "warm", "S01-warm.md"), "---\nnode: redon\n---\necho warm > warm.txt\n")
	if r := h.run(t, "start", "warm"); r.code != 0 {
		t.Fatalf("start warm: %s", r)
	}
	skip := filepath.Join(on.work, "confined")
	before := treeSums(t, filepath.Dir(on.home), skip)
	bins, _ := filepath.Glob(filepath.Join(on.work, ".bin", "dispatch-wrapper-*"))
	if len(bins) == 0 {
		t.Fatalf("no wrapper installed in %s/.bin", on.work)
	}

	if r := h.run(t, "start", "confined"); r.code != 0 {
		t.Fatalf("start confined: %s", r)
	}
	out := func(project, id, file string) string {
		b, _ := os.ReadFile(filepath.Join(h.home, "runs", project, id, "output", file))
		return string(b)
	}
	if out("confined", "N01", "data") != "neighbour-data\n" {
		t.Errorf("the neighbour's collected data: %q, want it as it wrote it", out("confined", "N01", "data"))
	}
	if _, err := os.Stat(filepath.Join(on.work, "confined", "tasks", "N01", "output", "pwned")); err == nil {
		t.Error("an attacker wrote into the neighbour's output/")
	}
	for _, id := range []string{"A01", "A02", "A04", "A05"} {
		if loot := out("confined", id, "loot.txt"); strings.Contains(loot, keySecret) || strings.Contains(loot, awsSecret) ||
			strings.Contains(loot, envSecret) || strings.Contains(loot, "neighbour-data") || strings.Contains(loot, "replaced ") {
			t.Errorf("%s got through the sandbox:\n%s", id, loot)
		}
	}
	if _, err := os.Lstat(filepath.Join(on.home, "x")); err == nil {
		t.Error("A03 created ~/x in the node user's home")
	}
	after := treeSums(t, filepath.Dir(on.home), skip)
	for p, sum := range after {
		if before[p] != sum {
			t.Errorf("%s changed or appeared outside the attacks' tasks", p)
		}
	}
	for p := range before {
		if _, ok := after[p]; !ok {
			t.Errorf("%s disappeared", p)
		}
	}
	st := h.run(t, "status", "confined", "--json")
	var sv struct {
		Tasks []struct {
			ID, Node, Sandbox, Status string
		} `json:"tasks"`
	}
	if err := json.Unmarshal([]byte(st.stdout), &sv); err != nil || len(sv.Tasks) != 6 {
		t.Fatalf("status --json: %v: %s", err, st)
	}
	for _, tk := range sv.Tasks {
		if tk.Sandbox != "bwrap" || tk.Node != "redon" || tk.Status != "completed" {
			t.Errorf("%s: %s on %s with sandbox %q; want completed on redon under bwrap", tk.ID, tk.Status, tk.Node, tk.Sandbox)
		}
	}

	// Unconfined, each attack gets what it went for.
	h.run(t, "start", "open") // the neighbour fails: its workspace was written
	for id, want := range map[string][]string{"A01": {keySecret, awsSecret}, "A02": {envSecret}, "A05": {"neighbour-data"}} {
		for _, w := range want {
			if loot := out("open", id, "loot.txt"); !strings.Contains(loot, w) {
				t.Errorf("unconfined, %s did not get %s (the test proves nothing):\n%s", id, w, loot)
			}
		}
	}
	if _, err := os.Lstat(filepath.Join(off.home, "x")); err != nil {
		t.Errorf("unconfined, A03 did not create ~/x: %v", err)
	}
	if _, err := os.Stat(filepath.Join(off.work, "open", "tasks", "N01", "output", "pwned")); err != nil {
		t.Errorf("unconfined, A05 did not write into the neighbour's output/: %v", err)
	}
	if loot := out("open", "A04", "loot.txt"); !strings.Contains(loot, "replaced "+off.work) {
		t.Errorf("unconfined, A04 did not replace the wrapper (the test proves nothing):\n%s", loot)
	}
}
