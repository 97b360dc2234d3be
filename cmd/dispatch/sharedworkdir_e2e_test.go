package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// overlapProject writes n shell tasks that each mark themselves started in
// dir, wait (up to a minute) until all n are, then work for three seconds:
// every attempt runs beside every other one for a while, through many
// pulls of both nodes.
func overlapProject(t *testing.T, home, name, dir string, n int) {
	t.Helper()
	spec := filepath.Join(home, "specs", name)
	writeFile(t, filepath.Join(spec, "project.yaml"), "tool: shell\nintegration: false\n")
	for i := 1; i <= n; i++ {
		writeFile(t, filepath.Join(spec, fmt.Sprintf("S%02d-task.md", i)), fmt.Sprintf(`# Task %d
echo "$DISPATCH_NODE" > node.txt
touch %[2]s/S%02[1]d
i=0
while [ "$(ls %[2]s | wc -l)" -lt %[3]d ]; do
  i=$((i+1)); [ $i -lt 600 ] || { echo "only $(ls %[2]s | wc -l) of %[3]d tasks started"; exit 1; }
  sleep 0.1
done
sleep 3
echo task %[1]d done
`, i, dir, n))
	}
}

// eventKinds counts the kinds of a project's events.
func eventKinds(t *testing.T, h *sshHome, project string) (map[string]int, string) {
	t.Helper()
	r := h.run(t, "events", project, "--json")
	if r.code != 0 {
		t.Fatalf("events: %s", r)
	}
	kinds := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		var ev struct {
			Kind string `json:"kind"`
		}
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("events --json line %q: %v", line, err)
		}
		kinds[ev.Kind]++
	}
	return kinds, r.stdout
}

// TestTwoNodeNamesShareAWorkDir: two names for one host with one work_dir
// (the same sshd and directory), 8 tasks that all run at once for three
// seconds (unsandboxed: they meet in a directory of the test's). Each node's pull used to list the other's attempts as its own
// stale ones and kill them: 0 of 8 completed, "killed errors are not
// retried". Now every task completes on the node that ran it, first time.
func TestTwoNodeNamesShareAWorkDir(t *testing.T) {
	h := newSSHHome(t)
	c := h.client
	s := c.StartServer(t, "box")
	c.Trust(t, s)
	writeFile(t, filepath.Join(h.home, "nodes.yaml"), fmt.Sprintf(`controller:
  poll_interval: 300ms
  ssh_connect_timeout: 2s
nodes:
  - name: box1
    ssh: %[1]s@127.0.0.1:%[2]d
    slots: 4
    sandbox: off
    work_dir: %[3]s
  - name: box2
    ssh: %[1]s@127.0.0.1:%[2]d
    slots: 4
    sandbox: off
    work_dir: %[3]s
`, c.User, s.Port, s.WorkDir))
	overlapProject(t, h.home, "both", t.TempDir(), 8)

	if r := h.run(t, "start", "both"); r.code != 0 {
		t.Errorf("start: %s", r)
	}
	st, _ := getStatus(t, h.home, "both")
	byNode := map[string]int{}
	for _, tk := range st.Tasks {
		if tk.Status != "completed" || tk.Attempt != 1 {
			t.Errorf("%s: %s, attempt %d (%s)", tk.ID, tk.Status, tk.Attempt, tk.Error)
			continue
		}
		byNode[tk.Node]++
		if got := strings.TrimSpace(readFile(t, filepath.Join(h.home, "runs", "both", tk.ID, "output", "node.txt"))); got != tk.Node {
			t.Errorf("%s ran on %q by its own account, status says %q", tk.ID, got, tk.Node)
		}
	}
	if byNode["box1"] != 4 || byNode["box2"] != 4 {
		t.Errorf("tasks completed by node: %v, want 4 on each", byNode)
	}
	kinds, events := eventKinds(t, h, "both")
	if kinds["stale"]+kinds["orphan"]+kinds["killed"] > 0 {
		t.Errorf("a node took the other's attempts for its own: %v\n%s", kinds, events)
	}

	// What the controller left in the work_dir tells validate that the
	// two names share it; `nodes check` finds it too, and says how to
	// set them apart. Both still pass: the nodes' tasks do not collide.
	r := h.run(t, "validate", "both")
	if r.code != 0 {
		t.Fatalf("validate: %s", r)
	}
	checkSharedWarning(t, "validate", r.stderr, s.WorkDir)
	r = h.run(t, "nodes", "check")
	if r.code != 0 {
		t.Fatalf("nodes check: %s", r)
	}
	checkSharedWarning(t, "nodes check", r.stdout, s.WorkDir)
	r = h.run(t, "nodes", "check", "--json")
	var checked struct {
		Nodes []struct {
			Name       string   `json:"name"`
			SharedWith []string `json:"shared_with"`
		} `json:"nodes"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &checked); err != nil || len(checked.Nodes) != 2 {
		t.Fatalf("nodes check --json: %v\n%s", err, r)
	}
	for _, n := range checked.Nodes {
		if want := map[string]string{"box1": "box2", "box2": "box1"}[n.Name]; len(n.SharedWith) != 1 || n.SharedWith[0] != want {
			t.Errorf("nodes check --json: %s shared_with %v, want [%s]", n.Name, n.SharedWith, want)
		}
	}
}

// checkSharedWarning checks that out warns, for each of box1 and box2,
// that the other uses its work_dir wd, what that means and the fix.
func checkSharedWarning(t *testing.T, what, out, wd string) {
	t.Helper()
	for _, pair := range [][2]string{{"box1", "box2"}, {"box2", "box1"}} {
		want := fmt.Sprintf("warning: node %s's work_dir %s is also used by node %s of this home", pair[0], wd, pair[1])
		if !strings.Contains(out, want) {
			t.Errorf("%s does not say %q:\n%s", what, want, out)
		}
	}
	for _, want := range []string{"each node reports and kills only its own attempts", "give each node its own work_dir", "e.g. work_dir: ~/.dispatch/work-box1"} {
		if !strings.Contains(out, want) {
			t.Errorf("%s does not say %q:\n%s", what, want, out)
		}
	}
}

// TestTwoUsersShareAWorkDir: the user bwtest's node keeps its work_dir W
// (its own, 0700) with two attempts of its own running there; this home's
// node `mine`, logged in as root, is given the same W. W is another user's,
// so `mine` is refused before anything of root's runs there or anything
// there is touched, and says not to chown it; the tasks run on `spare`,
// beside bwtest's attempts, which go on and complete.
func TestTwoUsersShareAWorkDir(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("two Unix users over one work_dir: the test runs a node as the user bwtest, which only root can do")
	}
	u, err := user.Lookup("bwtest")
	if err != nil {
		t.Fatalf("as root this test runs a node as the user bwtest: %v; fix: useradd -m bwtest", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	h := newSSHHome(t)
	c := h.client
	s := c.StartServer(t, "box")
	c.Trust(t, s)
	// Under /var/tmp: bwtest cannot reach into the test's temporary
	// directories.
	w, err := os.MkdirTemp("/var/tmp", "dispatch-two-users-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(w) })
	nodesYAML := func(spare bool) {
		y := fmt.Sprintf("controller:\n  poll_interval: 300ms\n  ssh_connect_timeout: 2s\nnodes:\n"+
			"  - name: mine\n    ssh: %[1]s@127.0.0.1:%[2]d\n    sandbox: off\n    work_dir: %[3]s\n", c.User, s.Port, w)
		if spare {
			y += fmt.Sprintf("  - name: spare\n    ssh: %s@127.0.0.1:%d\n    slots: 4\n    sandbox: off\n    work_dir: %s\n", c.User, s.Port, s.WorkDir)
		}
		writeFile(t, filepath.Join(h.home, "nodes.yaml"), y)
	}
	// bwtest's node: the wrapper installed in W (by a check of W as
	// root's, then handed over), and two attempts of its node `theirs`.
	nodesYAML(false)
	if r := h.run(t, "nodes", "check"); r.code != 0 {
		t.Fatalf("nodes check: %s", r)
	}
	bins, _ := filepath.Glob(filepath.Join(w, ".bin", "dispatch-wrapper-*"))
	if len(bins) != 1 {
		t.Fatalf("wrappers in %s: %v", w, bins)
	}
	release := filepath.Join(w, "release")
	var theirs []string
	for _, id := range []string{"T1", "T2"} {
		dir := filepath.Join(w, "other", "tasks", id)
		launch := fmt.Sprintf(`{"project":"other","task":%q,"attempt":1,"node":"theirs","command":["/bin/sh","-c","while [ ! -e %s ]; do sleep 0.05; done; echo theirs"],"timeout_seconds":120,"heartbeat_seconds":0.5}`, id, release)
		writeFile(t, filepath.Join(dir, "spec.md"), "# theirs\n")
		writeFile(t, filepath.Join(dir, "launch.json"), launch)
		theirs = append(theirs, dir)
	}
	if err := filepath.Walk(w, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	}); err != nil {
		t.Fatal(err)
	}
	for _, dir := range theirs {
		cmd := exec.CommandContext(t.Context(), bins[0], "run", "--dir", dir)
		cmd.Stdin = strings.NewReader("{}")
		cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + w}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("bwtest's run of %s: %v\n%s", dir, err, out)
		}
	}
	// Whatever happens, bwtest's attempts end with the test.
	t.Cleanup(func() { os.WriteFile(release, nil, 0o644) })

	nodesYAML(true)
	overlapProject(t, h.home, "mix", t.TempDir(), 4)
	if r := h.run(t, "start", "mix"); r.code != 0 {
		t.Errorf("start: %s", r)
	}
	st, _ := getStatus(t, h.home, "mix")
	for _, tk := range st.Tasks {
		if tk.Status != "completed" || tk.Node != "spare" {
			t.Errorf("%s: %s on %s (%s)", tk.ID, tk.Status, tk.Node, tk.Error)
		}
	}
	for _, dir := range theirs {
		if got := readFile(t, filepath.Join(dir, "status.json")); !strings.Contains(got, `"status":"running"`) {
			t.Errorf("bwtest's attempt in %s while root's tasks ran: %s", dir, got)
		}
	}
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, dir := range theirs {
		pollUntil(t, 20*time.Second, "bwtest's attempt completes", func() bool {
			b, _ := os.ReadFile(filepath.Join(dir, "status.json"))
			return strings.Contains(string(b), `"status":"completed"`)
		})
	}
	r := h.run(t, "nodes", "check")
	for _, want := range []string{fmt.Sprintf("unsafe work_dir: %s belongs to uid %d", w, uid), "do not chown it", "give each node a work_dir of its own"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("nodes check does not say %q: %s", want, r)
		}
	}
}
