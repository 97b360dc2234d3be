package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestPipelineInputs: specs/pipeline (download → process ×2 → merge, shell
// tasks, the sandbox as by default) through the real binary: the download
// gets its files:, each process reads the download in $DISPATCH_INPUTS and
// cannot write into it, the merge sees both processes' directories, and
// the download's collected output is unchanged.
func TestPipelineInputs(t *testing.T) {
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Fatalf("this test needs bubblewrap (make test installs it): %v", err)
	}
	specs := map[string]string{}
	src := filepath.Join("..", "..", "specs", "pipeline")
	filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			rel, _ := filepath.Rel(src, p)
			b, _ := os.ReadFile(p)
			specs[rel] = string(b)
		}
		return err
	})
	home, _ := opsHome(t, map[string]map[string]string{"pipeline": specs})
	// The node user's home, outside /tmp, as the sandbox tests do.
	nodeHome, err := os.MkdirTemp("/var/tmp", "dispatch-pipeline-home-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(nodeHome) })
	env := []string{"HOME=" + nodeHome}
	if r := runDispatch(t, env, "--home", home, "start", "pipeline"); r.code != 0 {
		t.Fatalf("start: %s", r)
	}
	runs := filepath.Join(home, "runs", "pipeline")
	if got := readFile(t, filepath.Join(runs, "S01", "output", "dataset.txt")); got != "ALPHA\nBETA\nGAMMA\nDELTA\n" {
		t.Errorf("the download's collected output changed: %q", got)
	}
	for _, id := range []string{"S02.1", "S02.2"} {
		if _, err := os.Stat(filepath.Join(runs, id, "output", "inputs-writable.txt")); err == nil {
			t.Errorf("%s wrote into its inputs", id)
		}
	}
	if got := readFile(t, filepath.Join(runs, "S03", "output", "merged.txt")); got != "ALPHA\nBETA\nDELTA\nGAMMA\n" {
		t.Errorf("merged.txt = %q, want both parts", got)
	}
	if got := readFile(t, filepath.Join(runs, "S03", "output", "seen.txt")); got != "S02.1\nS02.2\n" {
		t.Errorf("the merge saw %q in $DISPATCH_INPUTS, want one directory per process", got)
	}
	st := runDispatch(t, env, "--home", home, "status", "pipeline", "--json")
	var sv struct {
		Tasks []struct {
			ID      string `json:"id"`
			Sandbox string `json:"sandbox"`
		} `json:"tasks"`
	}
	if err := json.Unmarshal([]byte(st.stdout), &sv); err != nil || len(sv.Tasks) != 4 {
		t.Fatalf("status --json: %v: %s", err, st)
	}
	for _, tk := range sv.Tasks {
		if tk.Sandbox != "bwrap" {
			t.Errorf("%s ran with sandbox %q, want bwrap (the default where bwrap works)", tk.ID, tk.Sandbox)
		}
	}
}

// TestPipelineOnTwoSSHNodes: the seed's pipeline (download → process ×2 →
// merge, sandboxed as by default) on two sshd nodes: the download on one,
// the processes and the merge on the other. Each process gets the
// download from the controller, the merge gets the processes' outputs
// copied on its node; under the sandbox none can write into its inputs,
// and every task sees what its dependencies left.
func TestPipelineOnTwoSSHNodes(t *testing.T) {
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Fatalf("this test needs bubblewrap (make test installs it): %v", err)
	}
	h := newSSHHome(t)
	s1, _, work1 := sshNodeOutsideTmp(t, h.client, "pipe1")
	s2, _, work2 := sshNodeOutsideTmp(t, h.client, "pipe2")
	writeFile(t, filepath.Join(h.home, "nodes.yaml"), fmt.Sprintf(`controller:
  poll_interval: 300ms
  ssh_connect_timeout: 2s
nodes:
  - name: pipe1
    ssh: %s@127.0.0.1:%d
    slots: 2
    work_dir: %s
  - name: pipe2
    ssh: %s@127.0.0.1:%d
    slots: 2
    work_dir: %s
`, h.client.User, s1.Port, work1, h.client.User, s2.Port, work2))
	src := filepath.Join("..", "..", "specs", "pipeline")
	pins := map[string]string{"S01-download.md": "pipe1", "S02-process.md": "pipe2", "S03-merge.md": "pipe2"}
	filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			rel, _ := filepath.Rel(src, p)
			body := readFile(t, p)
			if node, ok := pins[rel]; ok {
				body = strings.Replace(body, "---\n", "---\nnode: "+node+"\n", 1)
			}
			if rel == "S03-merge.md" {
				body += "if echo x >> \"$DISPATCH_INPUTS/S02.1/part1.txt\" 2>/dev/null; then echo wrote > inputs-writable.txt; fi\n"
			}
			writeFile(t, filepath.Join(h.home, "specs", "pipeline", rel), body)
		}
		return err
	})
	if r := h.run(t, "start", "pipeline"); r.code != 0 {
		t.Fatalf("start: %s", r)
	}
	runs := filepath.Join(h.home, "runs", "pipeline")
	if got := readFile(t, filepath.Join(runs, "S01", "output", "dataset.txt")); got != "ALPHA\nBETA\nGAMMA\nDELTA\n" {
		t.Errorf("the download's collected output changed: %q", got)
	}
	for _, id := range []string{"S02.1", "S02.2", "S03"} {
		if _, err := os.Stat(filepath.Join(runs, id, "output", "inputs-writable.txt")); err == nil {
			t.Errorf("%s wrote into its inputs under the sandbox", id)
		}
	}
	if got := readFile(t, filepath.Join(runs, "S03", "output", "merged.txt")); got != "ALPHA\nBETA\nDELTA\nGAMMA\n" {
		t.Errorf("merged.txt = %q, want both parts", got)
	}
	if got := readFile(t, filepath.Join(runs, "S03", "output", "seen.txt")); got != "S02.1\nS02.2\n" {
		t.Errorf("the merge saw %q in $DISPATCH_INPUTS, want one directory per process", got)
	}
	if got := readFile(t, filepath.Join(work2, "pipeline", "tasks", "S02.1", "output", "part1.txt")); got != "ALPHA\nGAMMA\n" {
		t.Errorf("S02.1's output on its node = %q: the merge changed it", got)
	}
	st := h.run(t, "status", "pipeline", "--json")
	var sv struct {
		Tasks []struct{ ID, Node, Sandbox string } `json:"tasks"`
	}
	if err := json.Unmarshal([]byte(st.stdout), &sv); err != nil || len(sv.Tasks) != 4 {
		t.Fatalf("status --json: %v: %s", err, st)
	}
	nodeOf := map[string]string{"S01": "pipe1", "S02.1": "pipe2", "S02.2": "pipe2", "S03": "pipe2"}
	for _, tk := range sv.Tasks {
		if tk.Sandbox != "bwrap" || tk.Node != nodeOf[tk.ID] {
			t.Errorf("%s ran on %s with sandbox %q, want its pinned node under bwrap", tk.ID, tk.Node, tk.Sandbox)
		}
	}
	ev := h.run(t, "events", "pipeline", "--json")
	for _, want := range []string{`S01 sent from the controller`, `S02.1 copied on the node from its attempt 1`, `S02.2 copied on the node from its attempt 1`} {
		if !strings.Contains(ev.stdout, want) {
			t.Errorf("no inputs event says %q:\n%s", want, ev.stdout)
		}
	}
}
