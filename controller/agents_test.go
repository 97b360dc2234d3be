package controller

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dispatch-tool/dispatch/control"
	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/home"
	"github.com/dispatch-tool/dispatch/plan"
	"github.com/dispatch-tool/dispatch/readmodel"
	"github.com/dispatch-tool/dispatch/spec"
)

func TestMissingModeVariableKeepsTasksOffTheNode(t *testing.T) {
	yaml := `
nodes:
  - name: a
    slots: 2
    api_mode: m
    work_dir: WORK/a
  - name: b
    slots: 1
    work_dir: WORK/b
api_modes:
  m:
    env:
      TOKEN: ${DISPATCH_TEST_VARIABLE_NOBODY_SETS}
`
	h := newHarness(t, yaml, shellProject(map[string]string{
		"S01-x.md": "echo \"${TOKEN:-unset}\" > token.txt\n",
		"S02-y.md": "echo y\n",
	}))
	h.tickUntil("project to finish", func() bool {
		p, _ := h.st.Project(context.Background(), "p")
		return p.State == domain.ProjectDone
	})
	for _, id := range []string{"S01", "S02"} {
		if tk := h.task(id); tk.Node != "b" || tk.Status != domain.Completed {
			t.Errorf("%s %s on %s, want completed on b", id, tk.Status, tk.Node)
		}
	}
	nodes, _ := h.st.Nodes(context.Background())
	for _, n := range nodes {
		if n.Name == "a" && !strings.Contains(n.LastError, "DISPATCH_TEST_VARIABLE_NOBODY_SETS") {
			t.Errorf("node a error %q does not name the missing variable", n.LastError)
		}
	}
	// A task only that node could run is an error at validate/start.
	p, err := spec.Load(filepath.Join(h.home, "specs"), "p")
	if err != nil {
		t.Fatal(err)
	}
	p.Tasks[0].Node = "a"
	_, err = plan.Plan(h.cfg, p, nil, control.StartOptions{})
	var pe *plan.Error
	if !errors.As(err, &pe) || !strings.Contains(err.Error(), "DISPATCH_TEST_VARIABLE_NOBODY_SETS") || !strings.Contains(err.Error(), "S01") {
		t.Fatalf("Plan = %v, want an error naming the task and the variable", err)
	}
}

func TestMaxConcurrencyHoldsAcrossNodes(t *testing.T) {
	yaml := `
nodes:
  - name: a
    slots: 2
    api_mode: m
    work_dir: WORK/a
  - name: b
    slots: 2
    api_mode: m
    work_dir: WORK/b
api_modes:
  m:
    max_concurrency: 1
`
	specs := shellProject(nil)
	for _, id := range []string{"S01", "S02", "S03"} {
		specs[id+"-x.md"] = "sleep 0.3\n"
	}
	h := newHarness(t, yaml, specs)
	peak := 0
	h.tickUntil("project to finish", func() bool {
		tasks, _ := h.st.Tasks(context.Background(), "p")
		n := 0
		for _, tk := range tasks {
			if tk.Status == domain.Running || tk.Status == domain.Claimed {
				n++
			}
		}
		peak = max(peak, n)
		p, _ := h.st.Project(context.Background(), "p")
		return p.State == domain.ProjectDone
	})
	if peak != 1 {
		t.Fatalf("%d tasks ran at once under max_concurrency 1", peak)
	}
}

func TestPlanRefusesATaskNoNodeCanTake(t *testing.T) {
	yaml := `
nodes:
  - name: a
    work_dir: WORK/a
    tags: [glm]
routes:
  verification: glm
`
	h := newHarness(t, yaml, shellProject(map[string]string{"S01-x.md": "echo\n"}))
	for _, tc := range []struct{ name, front, want string }{
		{"tag", "tags: [gpu]", "lacks tag gpu"},
		{"pin", "node: b", `node "b" is not in`},
		{"route", "type: verification\ntags: [none]", "lacks tag none"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(h.home, "specs", "p", "S02-y.md")
			if err := os.WriteFile(file, []byte("---\n"+tc.front+"\n---\necho y\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			p, err := spec.Load(filepath.Join(h.home, "specs"), "p")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := plan.Plan(h.cfg, p, nil, control.StartOptions{}); err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "S02") {
				t.Fatalf("Plan = %v, want an error with %q", err, tc.want)
			}
		})
	}
}

func TestBaseTreeAndMerge(t *testing.T) {
	specs := map[string]string{
		"project.yaml":      "tool: shell\nbase: repo\nverification: false\n",
		"repo/README.md":    "# The repo\n",
		"repo/src/main.txt": "main\n",
		"S01-readme.md":     "echo 'more from S01' >> README.md\n",
		"S02-add.md":        "echo new > src/added.txt\ncat README.md > seen-readme.txt\n",
		"S03-none.md":       "true\n",
		"S99-own.md":        "# Own integration\nls -R . > tree.txt\n",
	}
	yaml := `
nodes:
  - name: local
    slots: 2
    work_dir: WORK
`
	h := newHarness(t, yaml, specs)
	h.tickUntil("project to finish", func() bool {
		p, _ := h.st.Project(context.Background(), "p")
		return p.State == domain.ProjectDone
	})
	p, _ := h.st.Project(context.Background(), "p")
	if p.Result != domain.ResultPassed {
		t.Fatalf("result %s: %s", p.Result, h.dump())
	}
	runs := home.RunsDir(h.home, "p")
	// Each task started from the base tree.
	if b, _ := os.ReadFile(filepath.Join(runs, "S02", "output", "seen-readme.txt")); string(b) != "# The repo\n" {
		t.Errorf("S02 saw README.md = %q", b)
	}
	// Only S01 changed README.md: no conflict, its version is merged.
	if b, _ := os.ReadFile(filepath.Join(runs, "merged", "README.md")); string(b) != "# The repo\nmore from S01\n" {
		t.Errorf("merged README.md = %q", b)
	}
	cs, _ := h.st.Conflicts(context.Background(), "p")
	if len(cs) != 0 {
		t.Errorf("conflicts %+v", cs)
	}
	// The author's S99 ran on the merged tree; with verification off its
	// output is the final tree.
	for _, f := range []string{"README.md", "src/main.txt", "src/added.txt", "tree.txt"} {
		if _, err := os.Stat(filepath.Join(runs, "final", f)); err != nil {
			t.Errorf("final/%s: %v", f, err)
		}
	}
	if tk := h.task("S99"); tk.Title != "Own integration" || tk.Type != "integration" {
		t.Errorf("S99 = %q type %s", tk.Title, tk.Type)
	}
}

func TestReadVerdict(t *testing.T) {
	dir := t.TempDir()
	done := domain.Task{ID: "V01", Status: domain.Completed}
	cases := []struct {
		name, content string
		task          domain.Task
		pass          bool
		issue         string
	}{
		{"pass", `{"pass": true, "issues": []}`, done, true, ""},
		{"fail", `{"pass": false, "issues": ["a", "b"]}`, done, false, "a"},
		{"missing", "", done, false, "verdict.json is missing"},
		{"malformed", `{"pass": tru`, done, false, "verdict.json is malformed"},
		{"no pass", `{"issues": []}`, done, false, `no boolean "pass"`},
		{"string pass", `{"pass": "yes"}`, done, false, "malformed"},
		{"verifier failed", `{"pass": true}`, domain.Task{ID: "V01", Status: domain.Failed, ErrorClass: "exit", Error: "exit status 1"}, false, "did not complete"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, tc.name+".json")
			if tc.content != "" {
				os.WriteFile(path, []byte(tc.content), 0o644)
			}
			v := readVerdict(tc.task, fileVerdict(path))
			if v.Pass != tc.pass || (tc.issue != "" && (len(v.Issues) == 0 || !strings.Contains(v.Issues[0], tc.issue))) {
				t.Fatalf("verdict %+v, want pass=%v with issue %q", v, tc.pass, tc.issue)
			}
		})
	}
}

func TestFixRoundsRunOutAndTheProjectFails(t *testing.T) {
	fail := "echo '{\"pass\": false, \"issues\": [\"still broken\"]}' > verdict.json\n"
	specs := map[string]string{
		"project.yaml":      "tool: shell\nmax_fix_rounds: 1\n",
		"S01-x.md":          "echo x > x.txt\n",
		"S99-i.md":          "echo integrated > INTEGRATION.md\n",
		"V01-v.md":          fail,
		"F01-f.md":          "echo tried > FIX.md\n",
		"V02-v.md":          fail,
		"SHARED_CONTEXT.md": "## unused\nnothing\n",
	}
	h := newHarness(t, "", specs)
	h.tickUntil("project to finish", func() bool {
		p, _ := h.st.Project(context.Background(), "p")
		return p.State == domain.ProjectDone
	})
	p, _ := h.st.Project(context.Background(), "p")
	if p.Result != domain.ResultFailed || p.Phase != domain.PhaseDone {
		t.Fatalf("result %s phase %s", p.Result, p.Phase)
	}
	vs, _ := h.st.Verdicts(context.Background(), "p")
	if len(vs) != 2 || vs[1].Pass || vs[1].Issues[0] != "still broken" {
		t.Fatalf("verdicts %+v", vs)
	}
	if _, err := h.st.Task(context.Background(), "p", "F02"); err == nil {
		t.Fatal("a second fix round ran with max_fix_rounds 1")
	}
	// The final tree is the last one verified: F01's output.
	if _, err := os.Stat(filepath.Join(home.RunsDir(h.home, "p"), "final", "FIX.md")); err != nil {
		t.Fatalf("final/FIX.md: %v", err)
	}
	r, _ := readmodel.BuildReport(context.Background(), h.st, h.cfg, h.home, "p", h.clock.Now())
	if md := r.Markdown(); !strings.Contains(md, "still broken") || !strings.HasPrefix(md, "# dispatch report: p\n\n**FAILED**") {
		t.Fatalf("report:\n%s", md)
	}
}

func TestIntegrationSwitches(t *testing.T) {
	specs := map[string]string{
		"project.yaml": "tool: shell\nverification: false\n",
		"S01-ok.md":    "echo ok > ok.txt\n",
		"S02-bad.md":   "---\nmax_retries: 0\n---\nexit 1\n",
		"S99-i.md":     "echo integrated > INTEGRATION.md\n",
	}
	for _, tc := range []struct {
		name     string
		opts     control.StartOptions
		wantS99  bool
		wantNote string
	}{
		{"a failed task skips the phase", control.StartOptions{}, false, "integration skipped"},
		{"--integrate-partial runs it anyway", control.StartOptions{IntegratePartial: true}, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, "", specs)
			p, _ := spec.Load(filepath.Join(h.home, "specs"), "p")
			if _, err := plan.AddProject(context.Background(), h.st, h.cfg, h.home, p, tc.opts); err != nil {
				t.Fatal(err)
			}
			h.tickUntil("project to finish", func() bool {
				p, _ := h.st.Project(context.Background(), "p")
				return p.State == domain.ProjectDone
			})
			_, err := h.st.Task(context.Background(), "p", "S99")
			if (err == nil) != tc.wantS99 {
				t.Fatalf("S99 exists = %v, want %v", err == nil, tc.wantS99)
			}
			p2, _ := h.st.Project(context.Background(), "p")
			if p2.Result != domain.ResultFailed {
				t.Fatalf("result %s with a failed task", p2.Result)
			}
			if tc.wantNote != "" {
				found := false
				for _, e := range h.events("phase") {
					found = found || strings.Contains(e.Message, tc.wantNote)
				}
				if !found {
					t.Fatalf("no event saying %q", tc.wantNote)
				}
			}
		})
	}
	t.Run("--no-integrate", func(t *testing.T) {
		ok := map[string]string{"project.yaml": "tool: shell\n", "S01-ok.md": "echo ok\n", "S99-i.md": "echo i\n"}
		h := newHarness(t, "", ok)
		p, _ := spec.Load(filepath.Join(h.home, "specs"), "p")
		if _, err := plan.AddProject(context.Background(), h.st, h.cfg, h.home, p, control.StartOptions{NoIntegrate: true}); err != nil {
			t.Fatal(err)
		}
		h.tickUntil("project to finish", func() bool {
			p, _ := h.st.Project(context.Background(), "p")
			return p.State == domain.ProjectDone
		})
		if _, err := h.st.Task(context.Background(), "p", "S99"); err == nil {
			t.Fatal("S99 ran with --no-integrate")
		}
		if p, _ := h.st.Project(context.Background(), "p"); p.Result != domain.ResultPassed {
			t.Fatalf("result %s", p.Result)
		}
	})
}

func TestRetryOfAnAuthorTaskRunsThePhaseAgain(t *testing.T) {
	specs := map[string]string{
		"project.yaml": "tool: shell\nverification: false\n",
		"S01-x.md":     "echo one > x.txt\n",
		"S99-i.md":     "cat x.txt > integrated.txt\n",
	}
	h := newHarness(t, "", specs)
	done := func() bool {
		p, _ := h.st.Project(context.Background(), "p")
		return p.State == domain.ProjectDone
	}
	h.tickUntil("project to finish", done)
	os.WriteFile(filepath.Join(h.home, "specs", "p", "S01-x.md"), []byte("echo two > x.txt\n"), 0o644)
	msg, err := h.ctl.Retry(context.Background(), "p", []string{"S01"}, false)
	if err != nil || !strings.Contains(msg, "starts over") || !strings.Contains(msg, "changed spec") {
		t.Fatalf("Retry = %q, %v", msg, err)
	}
	if _, err := h.ctl.Retry(context.Background(), "p", []string{"S77"}, false); err == nil {
		t.Fatal("retry of an unknown task succeeded")
	}
	h.tickUntil("project to finish again", done)
	b, _ := os.ReadFile(filepath.Join(home.RunsDir(h.home, "p"), "final", "integrated.txt"))
	if string(b) != "two\n" {
		t.Fatalf("final tree after the retry: %q", b)
	}
	if tk := h.task("S01"); tk.Attempt != 2 {
		t.Fatalf("S01 attempt %d", tk.Attempt)
	}
}
