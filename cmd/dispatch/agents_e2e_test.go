package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/internal/sshdtest"
)

// fakeAgents installs testdata/fakeagent.sh as claude, codex and gemini in a
// new directory and returns it.
func fakeAgents(t *testing.T) string {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("testdata", "fakeagent.sh"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, name := range []string{"claude", "codex", "gemini"} {
		if err := os.WriteFile(filepath.Join(dir, name), src, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestAgentsAndIntegrationPhase runs a project of agent tasks over two sshd
// nodes with fake agent CLIs: routing by type, @context, a secret that
// reaches the tool and nothing else, a rate limit that pauses its api_mode,
// a merge conflict, and the phase S99 → V01 (fails) → F01 → V02 (passes).
func TestAgentsAndIntegrationPhase(t *testing.T) {
	h := newSSHHome(t)
	c := h.client
	glm := c.StartServer(t, "glm")
	cdx := c.StartServer(t, "cdx")
	c.Trust(t, glm)
	c.Trust(t, cdx)
	bin := fakeAgents(t)
	const secret = "sk-test-SECRET-7f3a9c" // must reach the tool and appear nowhere on disk
	h.env = append(h.env, "ZAI_KEY="+secret, "FAKEBIN="+bin)
	writeFile(t, filepath.Join(h.home, "nodes.yaml"), fmt.Sprintf(`controller:
  poll_interval: 200ms
  ssh_connect_timeout: 2s
  retry_backoff: 100ms
  retry_backoff_max: 1s
  max_fix_rounds: 2
nodes:
  - name: glm
    ssh: %[1]s@127.0.0.1:%[2]d
    slots: 3
    work_dir: %[3]s
    api_mode: zai
    tags: [glm]
  - name: cdx
    ssh: %[1]s@127.0.0.1:%[4]d
    slots: 2
    work_dir: %[5]s
    tool: codex
    api_mode: plain
    dangerous: true
    tags: [codex]
api_modes:
  zai:
    env:
      ANTHROPIC_AUTH_TOKEN: ${ZAI_KEY}
      PATH: ${FAKEBIN}:/usr/bin:/bin
    max_concurrency: 2
  plain:
    env:
      PATH: ${FAKEBIN}:/usr/bin:/bin
routes:
  implementation: glm
  integration: codex
  verification: codex
  fix: codex
`, c.User, glm.Port, glm.WorkDir, cdx.Port, cdx.WorkDir))
	unsandboxed(t, h.home, "the fake agent CLIs live under /tmp, which the sandbox replaces")
	dir := filepath.Join(h.home, "specs", "app")
	writeFile(t, filepath.Join(dir, "project.yaml"), "tool: claude\n")
	writeFile(t, filepath.Join(dir, "SHARED_CONTEXT.md"), "## Conventions\nUse tabs. CONTEXT-MARKER-CONVENTIONS\n\n## Database\nPostgres 16. CONTEXT-MARKER-DATABASE\n")
	writeFile(t, filepath.Join(dir, "S01-api.md"), "# Build the API\n@context: conventions\nFILE api/server.txt api by S01\nFILE shared/config.txt port=8080\n")
	writeFile(t, filepath.Join(dir, "S02-ui.md"), "# Build the UI\nFILE ui/app.txt ui by S02\nFILE shared/config.txt port=3000\n")
	writeFile(t, filepath.Join(dir, "S03-db.md"), "# Build the schema\nRATE_LIMIT_ONCE\nFILE db/schema.txt schema by S03\n")
	writeFile(t, filepath.Join(dir, "S04-docs.md"), "---\ntool: gemini\nmodel: gemini-2.5-pro\n---\n# Write the docs\nFILE docs/README.txt docs by S04\n")

	r := h.run(t, "validate", "app")
	if r.code != 0 {
		t.Fatalf("validate: %s", r)
	}
	r = h.run(t, "start", "app")
	if r.code != 0 {
		t.Fatalf("start: %s", r)
	}

	st := openStore(t, h.home)
	ctx := t.Context()
	tasks, _ := st.Tasks(ctx, "app")
	node := map[string]string{}
	for _, tk := range tasks {
		node[tk.ID] = tk.Node
		if tk.Status != domain.Completed {
			t.Errorf("%s = %s (%s)", tk.ID, tk.Status, tk.Error)
		}
	}
	// Routing by type: author tasks on glm, the phase on cdx.
	for id, want := range map[string]string{"S01": "glm", "S02": "glm", "S03": "glm", "S04": "glm",
		"S99": "cdx", "V01": "cdx", "F01": "cdx", "V02": "cdx"} {
		if node[id] != want {
			t.Errorf("%s ran on %q, want %s (routes)", id, node[id], want)
		}
	}
	if _, ok := node["F02"]; ok {
		t.Error("a second fix round ran after V02 passed")
	}
	seen := func(work, id, file string) string {
		return readFile(t, filepath.Join(work, "app", "tasks", id, file))
	}
	// @context: the selected section, not the other one.
	if p := seen(glm.WorkDir, "S01", "seen-prompt.txt"); !strings.Contains(p, "CONTEXT-MARKER-CONVENTIONS") || strings.Contains(p, "CONTEXT-MARKER-DATABASE") {
		t.Errorf("S01 prompt with @context: conventions:\n%s", p)
	}
	// The model flag and the dangerous flags, only where configured.
	if a := seen(glm.WorkDir, "S04", "seen-args.txt"); !strings.Contains(a, "-m\ngemini-2.5-pro\n--approval-mode\nauto_edit\n") {
		t.Errorf("gemini argv: %q", a)
	}
	if a := seen(glm.WorkDir, "S01", "seen-args.txt"); strings.Contains(a, "dangerously") {
		t.Errorf("claude ran with a dangerous flag on a node without dangerous: true: %q", a)
	}
	if a := seen(cdx.WorkDir, "S99", "seen-args.txt"); !strings.Contains(a, "--dangerously-bypass-approvals-and-sandbox") {
		t.Errorf("codex on a dangerous node: %q", a)
	}
	// The fix round got the verifier's issues.
	if p := seen(cdx.WorkDir, "F01", "seen-prompt.txt"); !strings.Contains(p, "FIXED.txt is missing from the tree") {
		t.Errorf("F01 prompt lacks the issues:\n%s", p)
	}
	// The secret reached the tool...
	sum := sha256.Sum256([]byte(secret))
	if got := strings.TrimSpace(seen(glm.WorkDir, "S01", "seen-secret.sha256")); got != hex.EncodeToString(sum[:]) {
		t.Errorf("the tool did not get the secret: %q", got)
	}
	// ...and is written nowhere: node work_dirs, the home (database, runs,
	// logs) and the operator's ~.
	for _, root := range []string{glm.WorkDir, cdx.WorkDir, h.home, c.Home} {
		filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err != nil || !d.Type().IsRegular() {
				return nil
			}
			if b, err := os.ReadFile(p); err == nil && strings.Contains(string(b), secret) {
				t.Errorf("the secret is in %s", p)
			}
			return nil
		})
	}
	// The rate limit paused the mode and did not use up a retry.
	s03, _ := st.Task(ctx, "app", "S03")
	if s03.RetriesUsed != 0 || s03.RateLimitRetries != 1 || s03.Attempt != 2 {
		t.Errorf("S03: retries %d, rate-limit retries %d, attempt %d", s03.RetriesUsed, s03.RateLimitRetries, s03.Attempt)
	}
	runs, _ := st.Attempts(ctx, "app", "S03")
	if len(runs) == 2 && runs[1].StartedAt.Sub(runs[0].CompletedAt).Seconds() < 2.5 {
		t.Errorf("S03 retried %s after a rate limit that said 3s", runs[1].StartedAt.Sub(runs[0].CompletedAt))
	}
	evs, _ := st.Events(ctx, "", 0, 0)
	paused := false
	for _, e := range evs {
		paused = paused || (e.Kind == "pause" && strings.Contains(e.Message, "zai paused"))
	}
	if !paused {
		t.Error("no pause event for api_mode zai")
	}

	// The report: passed, tokens summed, the conflict listed.
	r = h.run(t, "report", "app", "--format", "json")
	var rep struct {
		Result string `json:"result"`
		Phase  string `json:"phase"`
		Totals struct {
			TokensIn  int64   `json:"tokens_in"`
			TokensOut int64   `json:"tokens_out"`
			CostUSD   float64 `json:"cost_usd"`
			Attempts  int     `json:"attempts"`
		} `json:"totals"`
		Conflicts []struct {
			Path  string   `json:"path"`
			Tasks []string `json:"tasks"`
		} `json:"conflicts"`
		Verification struct {
			Rounds int   `json:"rounds"`
			Pass   *bool `json:"pass"`
		} `json:"verification"`
		Dangerous []string `json:"dangerous"`
		Tasks     []struct {
			ID       string `json:"id"`
			Attempts []struct {
				TokensIn  int64   `json:"tokens_in"`
				TokensOut int64   `json:"tokens_out"`
				CostUSD   float64 `json:"cost_usd"`
			} `json:"attempts"`
		} `json:"tasks"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("report json: %v\n%s", err, r.stdout)
	}
	if rep.Result != "passed" || rep.Phase != "done" {
		t.Errorf("result %s phase %s", rep.Result, rep.Phase)
	}
	if rep.Verification.Rounds != 2 || rep.Verification.Pass == nil || !*rep.Verification.Pass {
		t.Errorf("verification %+v", rep.Verification)
	}
	if len(rep.Conflicts) != 1 || rep.Conflicts[0].Path != "shared/config.txt" || strings.Join(rep.Conflicts[0].Tasks, ",") != "S01,S02" {
		t.Errorf("conflicts %+v", rep.Conflicts)
	}
	if strings.Join(rep.Dangerous, ",") != "S99,V01,F01,V02" && len(rep.Dangerous) != 4 {
		t.Errorf("dangerous %v", rep.Dangerous)
	}
	// claude: 150 in, 50 out, $0.0125 per successful run (S01, S02, S03's
	// second attempt; its rate-limited first printed nothing); gemini 70/7;
	// codex 1,000 out for each of S99, V01, F01, V02.
	if rep.Totals.TokensIn != 3*150+70 || rep.Totals.TokensOut != 3*50+7+4*1000 {
		t.Errorf("tokens %d in, %d out", rep.Totals.TokensIn, rep.Totals.TokensOut)
	}
	if rep.Totals.CostUSD < 0.0374 || rep.Totals.CostUSD > 0.0376 {
		t.Errorf("cost %.4f", rep.Totals.CostUSD)
	}
	// The final tree is the verified one, with the conflict's other side
	// kept for S99 to merge.
	final := filepath.Join(h.home, "runs", "app", "final")
	for _, f := range []string{"api/server.txt", "ui/app.txt", "db/schema.txt", "docs/README.txt", "INTEGRATION.md", "FIXED.txt", "shared/config.txt.S02.conflict"} {
		if _, err := os.Stat(filepath.Join(final, f)); err != nil {
			t.Errorf("final/%s: %v", f, err)
		}
	}
	if _, err := os.Stat(filepath.Join(final, "verdict.json")); err == nil {
		t.Error("final/ holds the verifier's verdict.json; it should be the verified tree")
	}
	md := readFile(t, filepath.Join(h.home, "runs", "app", "report.md"))
	for _, want := range []string{"**PASSED**", "shared/config.txt", "2 round(s)", "S99, V01, F01, V02"} {
		if !strings.Contains(md, want) {
			t.Errorf("report.md lacks %q:\n%s", want, md)
		}
	}
	t.Logf("report.md:\n%s", md)
}

var _ = sshdtest.Require
