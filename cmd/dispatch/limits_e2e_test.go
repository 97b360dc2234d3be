package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

// TestLimitsThroughDispatch: a task whose front matter says
// `limits: {memory: 64MiB}` grows far past it on a local node whose
// nodes.yaml gives every task `pids: 256`; through the real binary it
// fails with error_class oom, once (not retried), in status and the
// report alike, and its neighbour completes.
func TestLimitsThroughDispatch(t *testing.T) {
	home, work := opsHome(t, map[string]map[string]string{"p": {
		"S01-hog.md":  "---\nlimits: {memory: 64MiB}\n---\nx=$(head -c 400000000 /dev/zero | tr '\\0' a)\nsleep 20\n",
		"S02-fine.md": "echo fine > fine.txt\n",
	}})
	nodesYAML := filepath.Join(home, "nodes.yaml")
	writeFile(t, nodesYAML, strings.Replace(readFile(t, nodesYAML), "    work_dir: "+work+"\n",
		"    work_dir: "+work+"\n    limits: {pids: 256}\n", 1))
	writeFile(t, filepath.Join(home, "specs", "p", "project.yaml"), "tool: shell\nintegration: false\nmax_retries: 2\n")
	r := runDispatch(t, nil, "--home", home, "start", "p")
	if r.code == 0 {
		t.Fatalf("start of a project whose task passes its memory limit succeeded: %s", r)
	}
	if readFile(t, filepath.Join(home, "runs", "p", "S02", "output", "fine.txt")) != "fine\n" {
		t.Error("the neighbour did not complete")
	}
	st := runDispatch(t, nil, "--home", home, "status", "p", "--json")
	var sv struct {
		Tasks []struct {
			ID         string `json:"id"`
			Status     string `json:"status"`
			ErrorClass string `json:"error_class"`
		} `json:"tasks"`
	}
	if err := json.Unmarshal([]byte(st.stdout), &sv); err != nil || len(sv.Tasks) != 2 {
		t.Fatalf("status --json: %v: %s", err, st)
	}
	for _, tk := range sv.Tasks {
		want := map[string][2]string{"S01": {"failed", "oom"}, "S02": {"completed", ""}}[tk.ID]
		if tk.Status != want[0] || tk.ErrorClass != want[1] {
			t.Errorf("status --json: %s is %s (%q), want %s (%q)", tk.ID, tk.Status, tk.ErrorClass, want[0], want[1])
		}
	}
	rep := runDispatch(t, nil, "--home", home, "report", "p", "--format", "json")
	var rv struct {
		Tasks []struct {
			ID       string `json:"id"`
			Attempts []struct {
				ErrorClass string `json:"error_class"`
				Error      string `json:"error"`
			} `json:"attempts"`
		} `json:"tasks"`
	}
	if err := json.Unmarshal([]byte(rep.stdout), &rv); err != nil {
		t.Fatalf("report --format json: %v: %s", err, rep)
	}
	for _, tk := range rv.Tasks {
		if tk.ID != "S01" {
			continue
		}
		if len(tk.Attempts) != 1 || tk.Attempts[0].ErrorClass != "oom" || !strings.Contains(tk.Attempts[0].Error, "over its limit of 64.0 MiB") {
			t.Errorf("report: S01 attempts %+v, want one, oom, naming the limit (not retried)", tk.Attempts)
		}
	}
	// launch.json carried the front matter's memory and the node's pids.
	var launch struct {
		Limits map[string]float64 `json:"limits"`
	}
	if err := json.Unmarshal([]byte(readFile(t, filepath.Join(work, "p", "tasks", "S01", "launch.json"))), &launch); err != nil ||
		launch.Limits["memory_bytes"] != 64<<20 || launch.Limits["pids"] != 256 {
		t.Errorf("launch.json limits: %v, %v; want memory 64 MiB and the node's pids 256", launch.Limits, err)
	}
}
