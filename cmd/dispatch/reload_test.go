package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestRunningControllerRereadsNodesYAML: a controller that runs re-reads
// nodes.yaml for each start handed to it: a node renamed while it runs
// takes the new start's tasks under its new name, while the attempt
// running under the old name keeps its node (a cancel still kills it). A
// nodes.yaml that does not load is refused (exit 2) and, on SIGHUP, logged,
// and the controller keeps the nodes it had.
func TestRunningControllerRereadsNodesYAML(t *testing.T) {
	t.Parallel()
	home, _ := opsHome(t, map[string]map[string]string{
		"first":  {"S01-a.md": "sleep 60\n"},
		"second": {"S01-a.md": "---\nnode: renamed\n---\necho $DISPATCH_NODE > node.txt\n"},
	})
	r := runDispatch(t, nil, "--home", home, "serve", "--detach")
	if r.code != 0 {
		t.Fatalf("serve --detach: %s", r)
	}
	t.Cleanup(func() { runDispatch(t, nil, "--home", home, "serve", "--stop") })
	if r := runDispatch(t, nil, "--home", home, "start", "--detach", "first"); r.code != 0 {
		t.Fatalf("start first: %s", r)
	}
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(runDispatch(t, nil, "--home", home, "status", "first").stdout, "running") {
		if time.Now().After(deadline) {
			t.Fatalf("first/S01 did not start:\n%s", readFile(t, filepath.Join(home, "dispatch.log")))
		}
		time.Sleep(100 * time.Millisecond)
	}

	// The node is renamed while first/S01 runs on it.
	nodesYAML := filepath.Join(home, "nodes.yaml")
	writeFile(t, nodesYAML, strings.Replace(readFile(t, nodesYAML), "name: local", "name: renamed", 1))
	r = runDispatch(t, nil, "--home", home, "start", "second")
	if r.code != 0 || !strings.Contains(r.stdout, "nodes.yaml reloaded: added renamed; removed local") {
		t.Fatalf("start handed over after a rename: %s\nlog:\n%s", r, readFile(t, filepath.Join(home, "dispatch.log")))
	}
	if got := readFile(t, filepath.Join(home, "runs", "second", "S01", "output", "node.txt")); got != "renamed\n" {
		t.Errorf("second/S01 ran on %q, want the node's new name", got)
	}
	// The attempt under the old name is still reached.
	if r := runDispatch(t, nil, "--home", home, "cancel", "first", "S01"); r.code != 0 || !strings.Contains(r.stdout, "killed 1 running attempt(s)") {
		t.Errorf("cancel of the attempt running on the removed node: %s\n%s\nlog:\n%s", r, runDispatch(t, nil, "--home", home, "events", "first"), readFile(t, filepath.Join(home, "dispatch.log")))
	}

	// A bad nodes.yaml is refused, and the controller keeps what it had.
	writeFile(t, nodesYAML, "nodes:\n  - name: renamed\n    slots: zero\n")
	if r := runDispatch(t, nil, "--home", home, "start", "second"); r.code != 2 || !strings.Contains(r.stderr, "slots") {
		t.Errorf("start with a bad nodes.yaml: %s", r)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(readFile(t, filepath.Join(home, "dispatch.pid"))))
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(home, "dispatch.log")
	for deadline := time.Now().Add(60 * time.Second); !strings.Contains(readFile(t, logPath), "nodes.yaml not reloaded"); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("SIGHUP with a bad nodes.yaml is not logged:\n%s", readFile(t, logPath))
		}
	}
	if _, err := os.FindProcess(pid); err != nil || syscall.Kill(pid, 0) != nil {
		t.Fatalf("the daemon did not survive SIGHUP")
	}
}
