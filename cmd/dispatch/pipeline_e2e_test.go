package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
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
