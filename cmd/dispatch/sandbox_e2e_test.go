package main

import (
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
