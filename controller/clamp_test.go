package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/readmodel"
	"github.com/dispatch-tool/dispatch/wire"
)

// TestForgedNumbersFromANodeAreClamped: a node (or a task that rewrote its
// status.json) answers a rate limit with a reset centuries away, negative
// and overflowing token counts and an absurd cost. The api_mode pauses for
// at most a day, nothing stored is negative, the totals saturate and the
// JSON report still encodes.
func TestForgedNumbersFromANodeAreClamped(t *testing.T) {
	yaml := `
controller:
  retry_backoff: 1s
  max_retries: 2
nodes:
  - name: local
    slots: 2
    api_mode: shared
    work_dir: WORK
api_modes:
  shared: {}
tools:
  claude: { command: [/bin/sh, "{spec}"] }
`
	// A stand-in named claude: the figures of an agent CLI are read, and
	// must be clamped (a shell's count for nothing at all).
	h := newHarness(t, yaml, map[string]string{"project.yaml": "tool: claude\nintegration: false\n",
		"S01-a.md": "sleep 30\n", "S02-b.md": "sleep 30\n"})
	h.tickUntil("both tasks to run", func() bool {
		return h.task("S01").Status == domain.Running && h.task("S02").Status == domain.Running
	})
	n := h.ctl.nodes["local"]
	real := n.installed()
	defer func() { n.inst.Store(real); killAll(t, h) }()

	forged := func(id string) wire.TaskStatus {
		return wire.TaskStatus{Project: "p", Task: id, Dir: taskDir(real, "p", id), Status: &wire.Status{
			Task: id, Attempt: 1, Status: wire.StatusFailed, ErrorClass: wire.ClassRateLimit,
			Error: "rate limited", ExitCode: 1, RetryAfterSeconds: 9e9,
			TokensIn: -5, TokensOut: math.MaxInt64, CostUSD: 1e308}}
	}
	reply, err := json.Marshal(wire.NodeStatus{WrapperVersion: real.Version, Time: "2026-03-01T12:00:00.000Z",
		Facts: wire.Facts{OS: real.OS, Arch: real.Arch, MemAvailableBytes: -1, DiskFreeBytes: 1 << 40, Load1: -2},
		Tasks: []wire.TaskStatus{forged("S01"), forged("S02")}})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "reply.json"), reply, 0o644); err != nil {
		t.Fatal(err)
	}
	fake := filepath.Join(dir, "wrapper")
	script := fmt.Sprintf("#!/bin/sh\ncase \"$1\" in status) cat '%s';; *) exit 1;; esac\n", filepath.Join(dir, "reply.json"))
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	inst := *real
	inst.Path = fake
	n.inst.Store(&inst)
	h.tick()

	ctx := context.Background()
	pauses, err := h.st.Pauses(ctx)
	if err != nil || len(pauses) != 1 {
		t.Fatalf("pauses = %+v, %v; want one", pauses, err)
	}
	if limit := h.clock.Now().Add(24 * time.Hour); pauses[0].Until.After(limit) {
		t.Fatalf("api_mode paused until %s, more than a day from now (%s)", pauses[0].Until, h.clock.Now())
	}
	for _, id := range []string{"S01", "S02"} {
		runs, _ := h.st.Attempts(ctx, "p", id)
		if len(runs) == 0 || runs[0].TokensIn < 0 || runs[0].CostUSD > wire.MaxCostUSD || math.IsNaN(runs[0].CostUSD) {
			t.Fatalf("%s runs = %+v; want clamped figures", id, runs)
		}
	}
	r, err := readmodel.BuildReport(ctx, h.st, h.cfg, h.home, "p", h.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	if r.Totals.TokensOut != math.MaxInt64 || r.Totals.TokensIn != 0 || math.IsInf(r.Totals.CostUSD, 0) {
		t.Fatalf("totals = %+v; want tokens_out saturated, tokens_in 0, a finite cost", r.Totals)
	}
	if _, err := json.Marshal(r); err != nil {
		t.Fatalf("report --format json: %v", err)
	}
}
