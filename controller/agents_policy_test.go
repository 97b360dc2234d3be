package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/controller/executor"
	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/nodes"
)

func TestPickMode(t *testing.T) {
	cfg := &nodes.Config{APIModes: map[string]nodes.APIMode{
		"zai":  {Fallback: []string{"zai2", "zai3"}},
		"zai2": {MaxConcurrency: 1},
		"zai3": {},
		"solo": {},
	}}
	both := nodes.Node{Name: "n", APIMode: "zai", APIModes: []string{"zai2", "zai3"}}
	tests := []struct {
		name   string
		node   nodes.Node
		paused []string
		use    map[string]int
		want   string
		ok     bool
	}{
		{"own mode", both, nil, nil, "zai", true},
		{"first fallback", both, []string{"zai"}, nil, "zai2", true},
		{"fallback full", both, []string{"zai"}, map[string]int{"zai2": 1}, "zai3", true},
		{"fallback paused", both, []string{"zai", "zai2"}, nil, "zai3", true},
		{"all paused", both, []string{"zai", "zai2", "zai3"}, nil, "", false},
		{"node may not use the fallback", nodes.Node{Name: "n", APIMode: "zai", APIModes: []string{"zai3"}}, []string{"zai", "zai3"}, nil, "", false},
		{"node without api_modes", nodes.Node{Name: "n", APIMode: "zai"}, []string{"zai"}, nil, "", false},
		{"no fallback", nodes.Node{Name: "n", APIMode: "solo", APIModes: []string{"zai"}}, []string{"solo"}, nil, "", false},
		{"own mode full", nodes.Node{Name: "n", APIMode: "zai2"}, nil, map[string]int{"zai2": 1}, "zai2", false},
		{"no mode", nodes.Node{Name: "n"}, nil, nil, "", true},
		{"no mode paused", nodes.Node{Name: "n"}, []string{"node:n"}, nil, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			paused := map[string]bool{}
			for _, p := range tt.paused {
				paused[p] = true
			}
			got, ok := pickMode(cfg, tt.node, paused, tt.use)
			if ok != tt.ok || (ok && got != tt.want) {
				t.Errorf("pickMode = %q, %v; want %q, %v", got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestStallTimeoutResolution(t *testing.T) {
	tests := []struct {
		name          string
		task, project time.Duration
		node          time.Duration
		want          time.Duration
	}{
		{"default", 0, 0, 0, domain.DefaultStallTimeout},
		{"node", 0, 0, 3 * time.Minute, 3 * time.Minute},
		{"project over node", 0, 5 * time.Minute, 3 * time.Minute, 5 * time.Minute},
		{"task over all", time.Minute, 5 * time.Minute, 3 * time.Minute, time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := stallTimeout(domain.Task{Stall: tt.task}, domain.ProjectOptions{Stall: tt.project}, nodes.Node{Stall: tt.node})
			if got != tt.want {
				t.Errorf("stallTimeout = %s, want %s", got, tt.want)
			}
		})
	}
}

// TestRateLimitPausesTheMode: a rate limit whose reset the tool did not
// print (codex with an API key) still pauses the api_mode the attempt ran
// under, for the backoff but at least a minute, and the retry does not use
// max_retries. The tool is named claude (a shell stands in for it): only
// an agent CLI's rate limit pauses a mode (issue 32).
func TestRateLimitPausesTheMode(t *testing.T) {
	yaml := `
controller:
  retry_backoff: 10s
  max_retries: 0
nodes:
  - name: local
    slots: 1
    api_mode: shared
    work_dir: WORK
api_modes:
  shared: {}
tools:
  claude: { command: [/bin/sh, "{spec}"] }
`
	h := newHarness(t, yaml, map[string]string{"project.yaml": "tool: claude\nintegration: false\n", "S01-a.md": `if [ "$DISPATCH_ATTEMPT" = 1 ]; then echo "exceeded retry limit, last status: 429 Too Many Requests"; exit 1; fi
echo done > out.txt
`})
	h.tickUntil("the rate limit", func() bool { return h.task("S01").RateLimitRetries == 1 })
	ctx := context.Background()
	pauses, err := h.st.Pauses(ctx)
	if err != nil || len(pauses) != 1 || pauses[0].APIMode != "shared" {
		t.Fatalf("pauses = %+v, %v; want shared paused", pauses, err)
	}
	left := pauses[0].Until.Sub(h.clock.Now())
	if left < 59*time.Second || left > 61*time.Second || !strings.Contains(pauses[0].Reason, "named no reset") {
		t.Fatalf("paused for %s (%q); want a minute (more than the 10s backoff)", left, pauses[0].Reason)
	}
	if tk := h.task("S01"); tk.Status != domain.Pending || tk.RetriesUsed != 0 {
		t.Fatalf("S01: %s, retries used %d; want pending, 0", tk.Status, tk.RetriesUsed)
	}
	h.tick()
	if tk := h.task("S01"); tk.Status != domain.Pending {
		t.Fatalf("S01 launched under a paused mode: %s", tk.Status)
	}
	h.clock.Advance(30 * time.Second)
	h.tick()
	if tk := h.task("S01"); tk.Status != domain.Pending {
		t.Fatalf("S01 launched under a paused mode: %s", tk.Status)
	}
	h.clock.Advance(31 * time.Second)
	h.tickUntil("the retry to complete", func() bool { return h.task("S01").Status == domain.Completed })
}

func TestLaunchBatchesAreCutBySize(t *testing.T) {
	yaml := `
nodes:
  - name: local
    slots: 6
    work_dir: WORK
`
	big := strings.Repeat("# a spec of 7 MiB\n", (7<<20)/18)
	specs := map[string]string{}
	for _, id := range []string{"S01", "S02", "S03", "S04", "S05", "S06"} {
		specs[id+"-x.md"] = "true\n" + big
	}
	h := newHarness(t, yaml, shellProject(specs))
	var docs []int
	testHookBeforeLaunch = func(_, _ string, doc []byte) { docs = append(docs, len(doc)) }
	defer func() { testHookBeforeLaunch = nil }()
	h.tickUntil("all six to run", func() bool {
		for _, id := range []string{"S01", "S02", "S03", "S04", "S05", "S06"} {
			if st := h.task(id).Status; st != domain.Running && st != domain.Completed {
				return false
			}
		}
		return true
	})
	if len(docs) < 2 {
		t.Fatalf("launch documents of %v bytes; want the 42 MiB of specs cut into several", docs)
	}
	for _, n := range docs {
		if n > executor.MaxLaunchDoc {
			t.Errorf("a launch document of %d bytes", n)
		}
	}
}
