package main

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/internal/sshdtest"
	"github.com/dispatch-tool/dispatch/readmodel"
	"github.com/dispatch-tool/dispatch/store"
)

// nodeUpdated returns when the controller last recorded node name.
func nodeUpdated(t *testing.T, home, name string) time.Time {
	t.Helper()
	st, err := store.OpenReadOnly(context.Background(), filepath.Join(home, "dispatch.db"))
	if err != nil {
		return time.Time{}
	}
	defer st.Close()
	ns, _ := st.Nodes(context.Background())
	for _, n := range ns {
		if n.Name == name {
			return n.UpdatedAt
		}
	}
	return time.Time{}
}

// TestStartShowsNodeProblems: a start whose nodes cannot be used says why,
// once per node and with the fix, instead of waiting in silence; a node
// that recovers is announced, and its work runs.
func TestStartShowsNodeProblems(t *testing.T) {
	h := newSSHHome(t)
	c := h.client
	unknown := c.StartServer(t, "unknown") // its host key is not trusted
	closed := sshdtest.FreePort(t)         // nothing listens there
	writeFile(t, filepath.Join(h.home, "nodes.yaml"), fmt.Sprintf(`controller:
  poll_interval: 200ms
  ssh_connect_timeout: 2s
nodes:
  - name: unknown
    ssh: %s@127.0.0.1:%d
    work_dir: %s
  - name: closed
    ssh: %s@127.0.0.1:%d
    work_dir: /nonexistent
`, c.User, unknown.Port, unknown.WorkDir, c.User, closed))
	spreadProject(t, h.home, "p", 1)

	ctx, cancel := context.WithTimeout(context.Background(), 2*cmdTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, dispatchBin, "--home", h.home, "start", "p")
	cmd.Env = append(slices.Clone(baseEnv), h.env...)
	var stdout, stderr lockedBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		cancel()
		<-done
	})

	pollUntil(t, cmdTimeout, "start to report both nodes", func() bool {
		out := stdout.String()
		return strings.Contains(out, "node unknown offline") && strings.Contains(out, "node closed offline")
	})
	// A few more pulls find the same problems: nothing more is printed.
	for range 3 {
		last := nodeUpdated(t, h.home, "closed")
		pollUntil(t, cmdTimeout, "another pull of the nodes", func() bool {
			u := nodeUpdated(t, h.home, "closed")
			return u.After(last)
		})
	}
	c.Trust(t, unknown)
	var err error
	select {
	case err = <-done:
		done <- err
	case <-ctx.Done():
		t.Fatalf("start did not finish after the node was trusted\n--- stdout:\n%s--- stderr:\n%s", stdout.String(), stderr.String())
	}
	out := stdout.String()
	if err != nil {
		t.Fatalf("start: %v\n--- stdout:\n%s--- stderr:\n%s", err, out, stderr.String())
	}
	lines := strings.Split(out, "\n")
	count := func(sub string) int {
		n := 0
		for _, l := range lines {
			if strings.Contains(l, sub) {
				n++
			}
		}
		return n
	}
	for _, w := range []struct {
		sub  string
		want int
	}{
		{"node unknown offline: ", 1},
		{"fix: check the fingerprint, then run `dispatch nodes trust unknown`", 1},
		{"node closed offline: ", 1},
		{"fix: check that the node is up", 1},
		{"node unknown online", 1},
		{"S01#1 completed on unknown", 1},
	} {
		if got := count(w.sub); got != w.want {
			t.Errorf("%q printed %d times, want %d\n%s", w.sub, got, w.want, out)
		}
	}
	i := slices.IndexFunc(lines, func(l string) bool { return strings.Contains(l, "node unknown offline: ") })
	if i < 0 || i+1 >= len(lines) || !strings.HasPrefix(lines[i+1], "  fix: ") {
		t.Errorf("the fix does not follow the error:\n%s", out)
	}
	// The cause comes first, what dispatch was doing after it: start,
	// nodes and status alike.
	if !strings.Contains(out, "node closed offline: unreachable: connect: connection refused (ssh ") {
		t.Errorf("start: the node's error does not lead with its cause:\n%s", out)
	}
	for _, args := range [][]string{{"nodes"}, {"status", "p"}} {
		r := runDispatch(t, h.env, append([]string{"--home", h.home}, args...)...)
		if !strings.Contains(r.stdout, "node closed unreachable: connect: connection refused (ssh ") {
			t.Errorf("%s: the node's error does not lead with its cause: %s", args[0], r)
		}
	}
}

// TestWatchShowsNodeFixes: the watch view, full screen or text, gives the
// fix of a node in trouble beside its one-line error.
func TestWatchShowsNodeFixes(t *testing.T) {
	v := &readmodel.StatusView{Project: "p", Phase: domain.PhaseImplementation,
		Nodes: []readmodel.NodeView{
			{Name: "n1", State: "offline", Slots: 1, LastError: "host key of node n1 is unknown\n  fix: run `dispatch nodes trust n1`"},
			{Name: "n2", State: "offline", Slots: 1, LastError: "dial tcp 127.0.0.1:1: connection refused"},
			{Name: "n3", State: "online", Slots: 1},
		},
		Tasks: []readmodel.TaskView{{ID: "S01", Title: "t", Status: domain.Pending}}}
	v.Counts.Add(domain.Pending)
	f := &watchFrame{at: time.Now(), views: []*readmodel.StatusView{v}, projects: map[string]domain.Project{"p": {Name: "p"}}}
	screen := renderWatch(newStyles(false), f, nil, 200, 40, "footer")
	var text strings.Builder
	printStatus(&text, newStyles(false), v, nil)
	for name, out := range map[string]string{"screen": screen, "text": text.String()} {
		for _, want := range []string{"n1: fix: run `dispatch nodes trust n1`", "n2: fix: check that the node is up"} {
			if !strings.Contains(out, want) {
				t.Errorf("%s lacks %q:\n%s", name, want, out)
			}
		}
		if strings.Contains(out, "n3: fix") {
			t.Errorf("%s gives a fix for a healthy node:\n%s", name, out)
		}
	}
}

// TestStartShowsNoStaleNodeError: a node's error recorded by an earlier
// start (a typo in its ssh:) is not shown by the next start, made after
// nodes.yaml was fixed: only what this start's controller found is.
func TestStartShowsNoStaleNodeError(t *testing.T) {
	home, work := opsHome(t, map[string]map[string]string{
		"p": {"S01-x.md": "echo p\n"},
		"q": {"S01-y.md": "echo q\n"},
	})
	nodesYAML := func(n1 string) string {
		return fmt.Sprintf(`controller:
  poll_interval: 200ms
  ssh_connect_timeout: 2s
nodes:
  - name: local
    work_dir: %s
  - name: n1
    %s
    work_dir: %s
`, work, n1, filepath.Join(work, "n1"))
	}
	writeFile(t, filepath.Join(home, "nodes.yaml"), nodesYAML(fmt.Sprintf("ssh: nobody@127.0.0.1:%d", sshdtest.FreePort(t))))
	r := runDispatch(t, nil, "--home", home, "start", "p")
	if r.code != 0 || !strings.Contains(r.stdout, "node n1 offline") {
		t.Fatalf("start p with n1 unreachable: %s", r)
	}
	writeFile(t, filepath.Join(home, "nodes.yaml"), nodesYAML("ssh: null"))
	r = runDispatch(t, nil, "--home", home, "start", "q")
	if r.code != 0 || strings.Contains(r.stdout, "node n1 offline") {
		t.Fatalf("start q after n1 was fixed shows n1's old error: %s", r)
	}
}
