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

	"github.com/dispatch-tool/dispatch/internal/sshdtest"
	"github.com/dispatch-tool/dispatch/store"
)

func TestOfflineDue(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	const poll = 10 * time.Second
	for _, tc := range []struct {
		name      string
		last, now time.Duration // after t0, when all were found offline
		poll      time.Duration
		want      bool
	}{
		{"within the first poll", 0, 5 * time.Second, poll, false},
		{"one poll after", 0, poll, poll, true},
		{"one poll after the first reminder", poll, 2 * poll, poll, true},
		{"the silence doubles", 2 * poll, 3 * poll, poll, false},
		{"after twice as long", 2 * poll, 4 * poll, poll, true},
		{"never longer than a minute", 10 * time.Minute, 11 * time.Minute, poll, true},
		{"not sooner than a minute then", 10 * time.Minute, 10*time.Minute + 59*time.Second, poll, false},
		{"a poll over a minute: at each pull", 0, 5 * time.Minute, 5 * time.Minute, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := offlineDue(t0, t0.Add(tc.last), t0.Add(tc.now), tc.poll); got != tc.want {
				t.Errorf("offlineDue(last +%s, now +%s, poll %s) = %v, want %v", tc.last, tc.now, tc.poll, got, tc.want)
			}
		})
	}
}

func TestAllOffline(t *testing.T) {
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	after := start.Add(time.Second)
	off := func(name string) store.Node {
		return store.Node{Name: name, State: store.NodeOffline, UpdatedAt: after, LastError: "refused"}
	}
	on := store.Node{Name: "b", State: store.NodeOnline, UpdatedAt: after}
	stale := off("b")
	stale.UpdatedAt = start.Add(-time.Hour)
	both := map[string]bool{"a": true, "b": true}
	for _, tc := range []struct {
		name string
		ns   []store.Node
		used map[string]bool
		want []string
	}{
		{"all offline", []store.Node{off("b"), off("a")}, both, []string{"a", "b"}},
		{"one online", []store.Node{off("a"), on}, both, nil},
		{"one not found yet", []store.Node{off("a")}, both, nil},
		{"one recorded before this start", []store.Node{off("a"), stale}, both, nil},
		{"an unused node online", []store.Node{off("a"), on}, map[string]bool{"a": true}, []string{"a"}},
		{"no node", nil, both, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, n := range allOffline(tc.ns, tc.used, start) {
				got = append(got, n.Name)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("allOffline = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestStartWithNoNodeReachableSaysSoAgain: with every node on a closed
// loopback port, start says why it could not check them for the tool,
// node by node, and then, again and again while they stay unreachable,
// that no node is reachable, each with its error, what it does and how to
// stop it (issue 39: one line, then 14 minutes of silence).
func TestStartWithNoNodeReachableSaysSoAgain(t *testing.T) {
	h := newSSHHome(t)
	c := h.client
	box1, box2 := sshdtest.FreePort(t), sshdtest.FreePort(t) // nothing listens there
	writeFile(t, filepath.Join(h.home, "nodes.yaml"), fmt.Sprintf(`controller:
  poll_interval: 200ms
  ssh_connect_timeout: 2s
nodes:
  - name: box1
    ssh: %[1]s@127.0.0.1:%[2]d
    work_dir: /nonexistent
  - name: box2
    ssh: %[1]s@127.0.0.1:%[3]d
    work_dir: /nonexistent
`, c.User, box1, box2))
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

	const reminder = "no node is reachable (for "
	pollUntil(t, cmdTimeout, "start to say three times that no node is reachable", func() bool {
		return strings.Count(stdout.String(), reminder) >= 3
	})
	out := stdout.String()
	for _, want := range []string{
		"dispatch tries each again every 200ms and starts the tasks once one answers (Ctrl-C stops it",
		"  box1 (offline since ", "  box2 (offline since ",
		"): unreachable: connect: connection refused (ssh ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("start's output lacks %q:\n%s", want, out)
		}
	}
	note := stderr.String()
	for _, want := range []string{"could not check box1 (unreachable: connect: connection refused", "; box2 (unreachable: connect: connection refused"} {
		if !strings.Contains(note, want) {
			t.Errorf("start's note on the tool check lacks %q:\n%s", want, note)
		}
	}
}
