package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/internal/sshdtest"
)

// quickstart returns the commands of the README's local Quickstart, as
// written, one per line.
func quickstart(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "## Quickstart (local node)\n\n")
	if !ok {
		t.Fatal("README has no local Quickstart")
	}
	var cmds []string
	for _, line := range strings.Split(rest, "\n") {
		if !strings.HasPrefix(line, "    ") {
			if len(cmds) > 0 {
				break
			}
			continue
		}
		cmds = append(cmds, strings.TrimPrefix(line, "    "))
	}
	return cmds
}

// TestReadmeQuickstartLocal runs the README's local Quickstart word for
// word on a machine without any agent CLI (PATH holds the system's tools
// only, as a fresh Debian user's does: no ~/.local/bin), in a fresh HOME.
// `make install` is the binary the tests built, put where it installs it,
// ~/.local/bin; /path/to/dispatch is this checkout.
func TestReadmeQuickstartLocal(t *testing.T) {
	cmds := quickstart(t)
	if len(cmds) < 5 || !strings.HasPrefix(cmds[0], "make install") {
		t.Fatalf("unexpected Quickstart: %q", cmds)
	}
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	bin := t.TempDir() // the Go toolchain only
	installed := filepath.Join(home, ".local", "bin")
	if err := os.MkdirAll(installed, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(dispatchBin, filepath.Join(installed, "dispatch")); err != nil {
		t.Fatal(err)
	}
	script := "set -e\n" + strings.ReplaceAll(strings.Join(cmds[1:], "\n"), "/path/to/dispatch", repo) + "\n"
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", script)
	cmd.Dir = home
	// The test binary builds the node's wrapper on demand (a `make build`
	// binary embeds it): it gets the Go toolchain, and nothing else.
	cmd.Env = append([]string{"HOME=" + home, "PATH=" + bin + ":/usr/bin:/bin", "TERM=dumb"}, goEnv(t, bin)...)
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the Quickstart failed: %v\n%s", err, out)
	}
	for _, want := range []string{"hello — phase done, passed", "**PASSED**"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the Quickstart's output lacks %q:\n%s", want, out)
		}
	}
	if b, err := os.ReadFile(filepath.Join(home, "work", "runs", "hello", "S01", "output", "hello.txt")); err != nil || string(b) != "hello\n" {
		t.Errorf("runs/hello/S01/output/hello.txt = %q, %v", b, err)
	}
}

// TestStartRefusesAToolNoNodeHas: the Quickstart's project with the
// integration phase on, on a machine without claude: validate and start
// exit 2 before anything runs, naming the task, the tool, the node and the
// fix, and the home is left as it was.
func TestStartRefusesAToolNoNodeHas(t *testing.T) {
	home, _ := opsHome(t, nil)
	dir := filepath.Join(home, "specs", "hello")
	writeFile(t, filepath.Join(dir, "project.yaml"), "tool: shell\n")
	writeFile(t, filepath.Join(dir, "S01-hello.md"), "echo hello > hello.txt\n")
	bin := t.TempDir()
	env := append([]string{"PATH=" + bin + ":/usr/bin:/bin"}, goEnv(t, bin)...)
	before := tree(t, home)
	for _, args := range [][]string{{"validate", "hello"}, {"start", "hello"}} {
		r := runDispatch(t, env, append([]string{"--home", home}, args...)...)
		if r.code != 2 {
			t.Fatalf("%s: %s; want exit 2", args[0], r)
		}
		for _, want := range []string{"the generated integration task S99", "tool claude", "no claude in its PATH", "local", "integration: false"} {
			if !strings.Contains(r.stderr, want) {
				t.Errorf("%s: stderr lacks %q:\n%s", args[0], want, r.stderr)
			}
		}
	}
	assertTreeUnchanged(t, home, before)
	// With the phase off the same project runs.
	writeFile(t, filepath.Join(dir, "project.yaml"), "tool: shell\nintegration: false\n")
	if r := runDispatch(t, env, "--home", home, "start", "hello"); r.code != 0 {
		t.Fatalf("start with integration: false: %s", r)
	}
}

// TestValidateListsThePhaseTasks: validate shows the phase tasks that will
// be generated, and an author's S99/V01 with their phase's type.
func TestValidateListsThePhaseTasks(t *testing.T) {
	home, _ := opsHome(t, nil)
	dir := filepath.Join(home, "specs", "p")
	writeFile(t, filepath.Join(home, "nodes.yaml"), strings.Replace(readFile(t, filepath.Join(home, "nodes.yaml")), "    slots: 4\n", "    slots: 4\n    tool: sh\n", 1)+
		"tools:\n  sh: { command: [/bin/sh, \"{spec}\"] }\n")
	writeFile(t, filepath.Join(dir, "project.yaml"), "tool: shell\n")
	writeFile(t, filepath.Join(dir, "S01-a.md"), "echo a\n")
	writeFile(t, filepath.Join(dir, "S99-mine.md"), "echo integrate\n")
	bin := t.TempDir()
	r := runDispatch(t, append([]string{"PATH=" + bin + ":/usr/bin:/bin"}, goEnv(t, bin)...), "--home", home, "validate", "p")
	if r.code != 0 {
		t.Fatalf("validate: %s", r)
	}
	for _, want := range []string{"S99  integration", "V01  verification", "(generated verification task)", "F01  fix", "local (sh)"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("validate output lacks %q:\n%s", want, r.stdout)
		}
	}
}

// goEnv lets a command whose PATH is bin and the system's directories
// build with this test's toolchain and caches, offline: it links go into
// bin and returns the Go variables to set.
func goEnv(t *testing.T, bin string) []string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(goBin, filepath.Join(bin, "go")); err != nil {
		t.Fatal(err)
	}
	var env []string
	for _, k := range []string{"GOCACHE", "GOMODCACHE", "GOPATH", "GOROOT"} {
		out, err := exec.Command(goBin, "env", k).Output()
		if err != nil {
			t.Fatal(err)
		}
		env = append(env, k+"="+strings.TrimSpace(string(out)))
	}
	return append(env, "GOFLAGS=-mod=mod", "GOPROXY=off")
}

// TestDemo runs specs/demo the way `make demo` does (its nodes.yaml, a
// fresh home) on a machine without any agent CLI: it passes.
func TestDemo(t *testing.T) {
	home := t.TempDir()
	copyDir(t, "../../specs/demo", filepath.Join(home, "specs", "demo"))
	writeFile(t, filepath.Join(home, "nodes.yaml"), "controller:\n  poll_interval: 1s\n  retry_backoff: 2s\nnodes:\n  - name: local\n    ssh: null\n    slots: 3\n    work_dir: "+filepath.Join(home, "work")+"\n")
	bin := t.TempDir()
	env := append([]string{"PATH=" + bin + ":/usr/bin:/bin"}, goEnv(t, bin)...)
	if r := runDispatch(t, env, "--home", home, "start", "demo"); r.code != 0 {
		t.Fatalf("make demo's start: %s", r)
	}
	if _, err := os.Stat(filepath.Join(home, "runs", "demo", "final", "INTEGRATION.md")); err != nil {
		t.Fatalf("no final tree: %v", err)
	}
}

// TestShellNodeGetsNoGeneratedPrompt: a node with `tool: shell` would be
// given the generated S99/V01/F01, whose specs are prompts for an agent:
// validate and start refuse it, exit 2, naming the phase task, the node
// and the fix, before anything runs; with the phase off it runs.
func TestShellNodeGetsNoGeneratedPrompt(t *testing.T) {
	home, _ := opsHome(t, nil)
	cfg := filepath.Join(home, "nodes.yaml")
	writeFile(t, cfg, strings.Replace(readFile(t, cfg), "    slots: 4\n", "    slots: 4\n    tool: shell\n", 1))
	dir := filepath.Join(home, "specs", "hello")
	writeFile(t, filepath.Join(dir, "S01-hello.md"), "echo hello > hello.txt\n")
	before := tree(t, home)
	for _, args := range [][]string{{"validate", "hello"}, {"start", "hello"}} {
		r := runDispatch(t, nil, append([]string{"--home", home}, args...)...)
		if r.code != 2 {
			t.Fatalf("%s: %s; want exit 2", args[0], r)
		}
		for _, want := range []string{"the generated integration task S99 could run on local with tool shell", "a prompt for an agent",
			"the generated verification task V01", "the generated fix task F01", "set `tool:` on local to an agent", "integration: false"} {
			if !strings.Contains(r.stderr, want) {
				t.Errorf("%s: stderr lacks %q:\n%s", args[0], want, r.stderr)
			}
		}
	}
	assertTreeUnchanged(t, home, before)
	writeFile(t, filepath.Join(dir, "project.yaml"), "integration: false\n")
	if r := runDispatch(t, nil, "--home", home, "start", "hello"); r.code != 0 {
		t.Fatalf("start with integration: false: %s", r)
	}
}

// sshQuickstart returns the README's "Quickstart with two SSH nodes": the
// ~/.ssh/config block of step 1, the nodes.yaml of step 2, and the command
// lines of the later steps, as written.
func sshQuickstart(t *testing.T) (sshConfig, nodesYAML string, cmds []string) {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "## Quickstart with two SSH nodes")
	if !ok {
		t.Fatal("README has no SSH Quickstart")
	}
	if i := strings.Index(rest, "\n## "); i >= 0 {
		rest = rest[:i]
	}
	var blocks [][]string
	var cur []string
	for _, line := range strings.Split(rest, "\n") {
		if code, ok := strings.CutPrefix(line, "       "); ok {
			cur = append(cur, code)
			continue
		}
		if len(cur) > 0 {
			blocks = append(blocks, cur)
			cur = nil
		}
	}
	for _, bl := range blocks {
		text := strings.Join(bl, "\n") + "\n"
		switch {
		case strings.HasPrefix(bl[0], "Host "):
			sshConfig = text
		case bl[0] == "nodes:":
			nodesYAML = text
		default:
			cmds = append(cmds, bl...)
		}
	}
	if sshConfig == "" || nodesYAML == "" || len(cmds) == 0 {
		t.Fatalf("unexpected SSH Quickstart: config %q, nodes.yaml %q, commands %q", sshConfig, nodesYAML, cmds)
	}
	return sshConfig, nodesYAML, cmds
}

// TestReadmeQuickstartSSH runs the README's SSH Quickstart word for word
// after its local one, in the same home, with box1 and box2 two real sshd
// on loopback: the aliases of step 1 point at them (box1's key is in
// known_hosts already, as after an `ssh box1`; box2's is recorded by
// `nodes trust box2 --yes`), the nodes.yaml of step 2 is used as it is
// (so each node's work_dir is the default), and the commands of steps 3-5
// run as written. The project of step 5 runs on both nodes, each task on
// the node it names, and status marks `local`, no longer configured.
func TestReadmeQuickstartSSH(t *testing.T) {
	sshdtest.Require(t)
	sshConfig, nodesYAML, cmds := sshQuickstart(t)
	c := sshdtest.NewClient(t)
	var boxes []*sshdtest.Server
	for _, name := range []string{"box1", "box2"} {
		if !strings.Contains(sshConfig, "Host "+name+"\n") {
			t.Fatalf("step 1 has no alias %s:\n%s", name, sshConfig)
		}
		s := c.StartServer(t, name)
		c.AddAlias(t, name, s)
		boxes = append(boxes, s)
	}
	c.Trust(t, boxes[0])

	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	if err := os.Symlink(dispatchBin, filepath.Join(bin, "dispatch")); err != nil {
		t.Fatal(err)
	}
	env := append([]string{"HOME=" + c.Home, "PATH=" + bin + ":/usr/bin:/bin", "TERM=dumb", "SSH_AUTH_SOCK="}, goEnv(t, bin)...)
	sh := func(dir, script string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "/bin/sh", "-c", "set -e\n"+script+"\n")
		cmd.Dir, cmd.Env, cmd.WaitDelay = dir, env, 5*time.Second
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%v\n--- script:\n%s\n--- output:\n%s", err, script, out)
		}
		return string(out)
	}
	local := quickstart(t)
	sh(c.Home, strings.ReplaceAll(strings.Join(local[1:], "\n"), "/path/to/dispatch", repo))

	home := filepath.Join(c.Home, "work")
	writeFile(t, filepath.Join(home, "nodes.yaml"), nodesYAML)
	out := sh(home, strings.Join(cmds, "\n"))

	st, _ := getStatus(t, home, "spread")
	byNode := map[string]int{}
	for _, tk := range st.Tasks {
		if tk.Status != "completed" {
			t.Errorf("%s = %s (%s)", tk.ID, tk.Status, tk.Error)
		}
		byNode[tk.Node]++
		if got := strings.TrimSpace(readFile(t, filepath.Join(home, "runs", "spread", tk.ID, "output", "node.txt"))); got != tk.Node {
			t.Errorf("%s ran on %q by its own account, status says %q", tk.ID, got, tk.Node)
		}
	}
	if len(st.Tasks) == 0 || byNode["box1"] == 0 || byNode["box2"] == 0 || len(byNode) != 2 {
		t.Errorf("tasks per node = %v, want both box1 and box2 and no other", byNode)
	}
	for _, s := range boxes {
		if _, err := os.Stat(filepath.Join(s.Home, ".dispatch", "work", "spread")); err != nil {
			t.Errorf("%s: no workspaces in the default work_dir: %v", s.Name, err)
		}
	}
	if !strings.Contains(out, "local (not in nodes.yaml)") {
		t.Errorf("status hello does not mark local as no longer configured:\n%s", out)
	}
}

// TestValidateShowsWhatPhaseTasksWaitFor: the plan's DEPENDS ON column of
// the phase tasks (generated or the author's S99) says what each waits
// for, not "-".
func TestValidateShowsWhatPhaseTasksWaitFor(t *testing.T) {
	home, _ := opsHome(t, nil)
	dir := filepath.Join(home, "specs", "p")
	writeFile(t, filepath.Join(home, "nodes.yaml"), strings.Replace(readFile(t, filepath.Join(home, "nodes.yaml")), "    slots: 4\n", "    slots: 4\n    tool: sh\n", 1)+
		"tools:\n  sh: { command: [/bin/sh, \"{spec}\"] }\n")
	writeFile(t, filepath.Join(dir, "project.yaml"), "tool: shell\n")
	writeFile(t, filepath.Join(dir, "S01-a.md"), "echo a\n")
	writeFile(t, filepath.Join(dir, "S02-b.md"), "---\ndepends_on: [S01]\n---\necho b\n")
	writeFile(t, filepath.Join(dir, "S99-mine.md"), "echo integrate\n")
	bin := t.TempDir()
	r := runDispatch(t, append([]string{"PATH=" + bin + ":/usr/bin:/bin"}, goEnv(t, bin)...), "--home", home, "validate", "p")
	if r.code != 0 {
		t.Fatalf("validate: %s", r)
	}
	rows := map[string]string{}
	for _, line := range strings.Split(r.stdout, "\n") {
		if f := strings.Fields(line); len(f) > 3 {
			rows[f[0]] = line
		}
	}
	for _, want := range [][2]string{{"S99", " S01,S02 "}, {"V01", " S99 "}, {"F01", " V01 (a fail verdict) "}} {
		if !strings.Contains(rows[want[0]], want[1]) {
			t.Errorf("validate's row of %s does not say it waits for %s:\n%s", want[0], want[1], r.stdout)
		}
	}
}
