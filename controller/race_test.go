package controller

import (
	"context"
	"sync"
	"testing"

	"github.com/dispatch-tool/dispatch/domain"
)

// TestNodeRuntimeHasOneOwner: a pull checks (and may re-check) a node's
// wrapper installation while kills, launches and collections started by
// earlier ticks still run on that node in the background. Run under -race,
// this fails when the installation is written and read without one owner.
func TestNodeRuntimeHasOneOwner(t *testing.T) {
	h := newHarness(t, "", shellProject(map[string]string{"S01-a.md": "sleep 30\n"}))
	h.tickUntil("S01 to run", func() bool { return h.task("S01").Status == domain.Running })
	defer killAll(t, h)
	n := h.ctl.nodes["local"]
	dir := taskDir(n.installed(), "p", "Z09")
	stale := []staleAttempt{{node: "local", project: "p", task: "Z09", dir: dir, attempt: 1}}
	ctx := context.Background()
	for range 10 {
		forgetInstall(n) // as after a broken reply: the next pull checks again
		var wg sync.WaitGroup
		wg.Add(3)
		go func() { defer wg.Done(); h.ctl.pullAll(ctx, []string{"p"}) }()
		go func() { defer wg.Done(); h.ctl.killStale(ctx, stale) }()
		go func() { defer wg.Done(); h.ctl.killAttempts(ctx, nil) }()
		wg.Wait()
	}
	if n.installed() == nil {
		t.Fatal("no installation after the pulls")
	}
}

// forgetInstall drops what the controller knows of n's wrapper.
func forgetInstall(n *nodeRuntime) { n.inst.Store(nil) }
