package main

import (
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// TestNetworkNoneThroughDispatch: `network: none` in a spec's front
// matter, on a local node with `sandbox: on`, through the real binary:
// the task cannot connect to a listener the test opens on the host's
// 127.0.0.1 (the sandbox's loopback is its own) and the project passes.
// The same task with `network: open` connects (the check is real), and
// validate refuses `network: none` on a node with `sandbox: off` (exit 2).
func TestNetworkNoneThroughDispatch(t *testing.T) {
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Fatalf("this test needs bubblewrap (make test installs it): %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var accepted atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	script := fmt.Sprintf("if bash -c 'exec 3<>/dev/tcp/127.0.0.1/%d' 2>err.txt; then echo connected > net.txt; else echo refused > net.txt; fi\n", port)
	run := func(network, sandbox string) (home string, r result) {
		t.Helper()
		home, work := opsHome(t, map[string]map[string]string{"p": {"S01-net.md": "---\nnetwork: " + network + "\n---\n" + script}})
		nodesYAML := filepath.Join(home, "nodes.yaml")
		writeFile(t, nodesYAML, strings.Replace(readFile(t, nodesYAML), "    work_dir: "+work+"\n",
			"    work_dir: "+work+"\n    sandbox: "+sandbox+"\n", 1))
		return home, runDispatch(t, nil, "--home", home, "start", "p")
	}

	home, r := run("none", "on")
	if r.code != 0 {
		t.Fatalf("start of a network: none task on a sandbox: on node: %s", r)
	}
	out := filepath.Join(home, "runs", "p", "S01", "output")
	if got := readFile(t, filepath.Join(out, "net.txt")); got != "refused\n" {
		t.Errorf("the network: none task connected to the host's 127.0.0.1:%d: %q (%s)", port, got, readFile(t, filepath.Join(out, "err.txt")))
	}
	if n := accepted.Load(); n != 0 {
		t.Errorf("the listener accepted %d connections from the network: none task", n)
	}

	// With the network open, the same task connects: the check is real.
	home, r = run("open", "on")
	if r.code != 0 {
		t.Fatalf("start of a network: open task: %s", r)
	}
	if got := readFile(t, filepath.Join(home, "runs", "p", "S01", "output", "net.txt")); got != "connected\n" {
		t.Errorf("the network: open task did not connect: %q; the test proves nothing", got)
	}

	// network: none cannot run where the sandbox is off: validate says so.
	home, work := opsHome(t, map[string]map[string]string{"p": {"S01-net.md": "---\nnetwork: none\n---\n" + script}})
	nodesYAML := filepath.Join(home, "nodes.yaml")
	writeFile(t, nodesYAML, strings.Replace(readFile(t, nodesYAML), "    work_dir: "+work+"\n", "    work_dir: "+work+"\n    sandbox: off\n", 1))
	if r := runDispatch(t, nil, "--home", home, "validate", "p"); r.code != 2 || !strings.Contains(r.stderr+r.stdout, "network: none") {
		t.Fatalf("validate of a network: none task on a sandbox: off node: want exit 2 naming network: none: %s", r)
	}
}
