package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestSandboxPathsThroughDispatch: a `sandbox: on` local node whose
// sandbox_paths opens ~/tools read-only, through the real binary: the
// task reads ~/tools by its path and through its private HOME, cannot
// write it, and the node user's ~/.ssh stays hidden; a sandbox_paths of
// / is refused by validate with exit 2, its line and the fix.
func TestSandboxPathsThroughDispatch(t *testing.T) {
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Fatalf("this test needs bubblewrap (make test installs it): %v", err)
	}
	nodeHome, err := os.MkdirTemp("/var/tmp", "dispatch-sandbox-paths-home-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(nodeHome) })
	writeFile(t, filepath.Join(nodeHome, "tools", "v"), "toolchain-1.2\n")
	writeFile(t, filepath.Join(nodeHome, ".ssh", "id_test"), "SECRET-KEY\n")
	script := "h='" + nodeHome + "'\ncat $h/tools/v > via-path.txt; cat ~/tools/v > via-home.txt\n" +
		"(echo x > $h/tools/w) 2>/dev/null && echo wrote > wrote.txt\ncat $h/.ssh/id_test > stolen.txt 2>/dev/null\necho done > done.txt\n"
	home, work := opsHome(t, map[string]map[string]string{"p": {"S01-tools.md": script}})
	nodesYAML := filepath.Join(home, "nodes.yaml")
	orig := readFile(t, nodesYAML)
	writeFile(t, nodesYAML, strings.Replace(orig, "    work_dir: "+work+"\n",
		"    work_dir: "+work+"\n    sandbox: on\n    sandbox_paths: {ro: [~/tools]}\n", 1))
	if r := runDispatch(t, []string{"HOME=" + nodeHome}, "--home", home, "start", "p"); r.code != 0 {
		t.Fatalf("start: %s", r)
	}
	out := filepath.Join(home, "runs", "p", "S01", "output")
	for f, want := range map[string]string{"via-path.txt": "toolchain-1.2\n", "via-home.txt": "toolchain-1.2\n", "done.txt": "done\n"} {
		if got := readFile(t, filepath.Join(out, f)); got != want {
			t.Errorf("output/%s: %q, want %q", f, got, want)
		}
	}
	for _, f := range []string{"wrote.txt", "stolen.txt"} {
		if data, _ := os.ReadFile(filepath.Join(out, f)); len(data) > 0 {
			t.Errorf("output/%s: %q: the task wrote a read-only path or read the hidden home", f, data)
		}
	}
	if _, err := os.Lstat(filepath.Join(nodeHome, "tools", "w")); err == nil {
		t.Error("the task wrote into a read-only sandbox path")
	}

	bad := strings.Replace(orig, "    work_dir: "+work+"\n", "    work_dir: "+work+"\n    sandbox: on\n    sandbox_paths:\n      rw: [/]\n", 1)
	writeFile(t, nodesYAML, bad)
	line := 0
	for i, l := range strings.Split(bad, "\n") {
		if strings.Contains(l, "rw: [/]") {
			line = i + 1
		}
	}
	r := runDispatch(t, []string{"HOME=" + nodeHome}, "--home", home, "validate", "p")
	msg := r.stderr + r.stdout
	if r.code != 2 || !strings.Contains(msg, "nodes.yaml:"+strconv.Itoa(line)) || !strings.Contains(msg, "would open the whole file system") ||
		!strings.Contains(msg, "list the directories the tasks need") {
		t.Fatalf("validate with sandbox_paths rw: [/]: want exit 2 naming line %d, the problem and the fix: %s", line, r)
	}
}
