package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/internal/agentcli"
	"github.com/dispatch-tool/dispatch/internal/fakeapi"
	"github.com/dispatch-tool/dispatch/store"
	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/agentlog"
)

// realCLI is how a test points one real agent CLI at a fake provider API:
// the api_mode variables besides the key, and the files its private home
// needs. These are what an operator's api_mode would set for another
// endpoint or account.
type realCLI struct {
	tool     string
	provider fakeapi.Provider
	// keyVar is the variable the api_mode puts the (secret) key in.
	keyVar string
	// env returns the api_mode's other variables for a CLI home.
	env func(s *fakeapi.Server, home string) map[string]string
	// setup writes the CLI's settings into its home.
	setup func(t *testing.T, s *fakeapi.Server, home string)
	// printedCost reports whether the CLI prints a cost (only claude does).
	printedCost bool
}

// modeEnv makes a private home for the CLI and returns it with the env:
// entries of an api_mode that runs the CLI against api, its key taken from
// ${keyVar} of the controller's environment.
func (cli realCLI) modeEnv(t *testing.T, api *fakeapi.Server, bin, keyVar string) (yaml, home string) {
	t.Helper()
	home = t.TempDir()
	if cli.setup != nil {
		cli.setup(t, api, home)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "      %s: ${%s}\n      PATH: %s\n", cli.keyVar, keyVar, agentcli.PATH(t, bin))
	for k, v := range cli.env(api, home) {
		fmt.Fprintf(&b, "      %s: %s\n", k, v)
	}
	return b.String(), home
}

var realCLIs = []realCLI{
	{tool: "claude", provider: fakeapi.Anthropic, keyVar: "ANTHROPIC_API_KEY", printedCost: true,
		env: func(s *fakeapi.Server, home string) map[string]string {
			return map[string]string{"ANTHROPIC_BASE_URL": s.URL, "HOME": home}
		}},
	{tool: "codex", provider: fakeapi.OpenAI, keyVar: "OPENAI_API_KEY",
		env: func(s *fakeapi.Server, home string) map[string]string {
			return map[string]string{"CODEX_HOME": filepath.Join(home, ".codex"), "HOME": home}
		},
		setup: func(t *testing.T, s *fakeapi.Server, home string) {
			// A provider of its own: codex's built-in one would try a
			// WebSocket first and ignores OPENAI_BASE_URL.
			writeFile(t, filepath.Join(home, ".codex", "config.toml"), fmt.Sprintf(`model_provider = "fake"
model = "gpt-fake"
[model_providers.fake]
name = "fake"
base_url = "%s/v1"
env_key = "OPENAI_API_KEY"
wire_api = "responses"
`, s.URL))
		}},
	{tool: "gemini", provider: fakeapi.Gemini, keyVar: "GEMINI_API_KEY",
		env: func(s *fakeapi.Server, home string) map[string]string {
			return map[string]string{"GOOGLE_GEMINI_BASE_URL": s.URL, "HOME": home}
		},
		setup: func(t *testing.T, s *fakeapi.Server, home string) {
			// With GOOGLE_GEMINI_BASE_URL alone it picks the "gateway"
			// auth type, which headless runs refuse. Usage statistics
			// (play.googleapis.com) are off only through settings.
			writeFile(t, filepath.Join(home, ".gemini", "settings.json"),
				`{"security":{"auth":{"selectedType":"gemini-api-key"}},"privacy":{"usageStatisticsEnabled":false}}`+"\n")
		}},
}

// TestRealAgentCLIs runs each real agent CLI (the npm packages pinned in
// .ci/agent-clis.txt) through dispatch against a fake provider API, on the
// local node and on an sshd node: the prompt reaches the API, the CLI's own
// file-writing tool call creates a file that dispatch collects, the tokens
// (and claude's cost) dispatch records are what the fake answered and the
// CLI printed, a 401 fails as auth without a retry, a 429 with a reset is a
// rate limit that pauses the api_mode until the reset and is retried
// outside max_retries, and no key is in any file.
func TestRealAgentCLIs(t *testing.T) {
	bin := agentcli.Dir(t)
	for _, cli := range realCLIs {
		t.Run(cli.tool, func(t *testing.T) {
			t.Parallel()
			testRealCLI(t, cli, bin)
		})
	}
}

func testRealCLI(t *testing.T, cli realCLI, bin string) {
	t.Logf("%s %s", cli.tool, agentcli.Version(t, bin, cli.tool))
	api := fakeapi.New(t, cli.provider)
	api.File = "hello-" + cli.tool + ".txt"
	api.Content = "written by " + cli.tool + " through its own tool\n"
	api.Reset = 20 * time.Second
	h := newSSHHome(t)
	srv := h.client.StartServer(t, "remote")
	h.client.Trust(t, srv)

	// One node per behaviour, each with its own api_mode and key: local
	// and remote work, bad is refused (sshd), limited is rate-limited
	// (local) until the test lets it through.
	type nodeCase struct {
		name, id string
		ssh      bool
		key      string
	}
	cases := []nodeCase{
		{"local", "S01", false, "sk-fake-" + cli.tool + "-local-7f3a9c"},
		{"remote", "S02", true, "sk-fake-" + cli.tool + "-remote-51d0e2"},
		{"bad", "S03", true, "sk-fake-" + cli.tool + "-bad-a4c7d1"},
		{"limited", "S04", false, "sk-fake-" + cli.tool + "-limited-9b2e60"},
	}
	api.Set(cases[2].key, fakeapi.Unauthorized)
	api.Set(cases[3].key, fakeapi.RateLimited)

	var cfg strings.Builder
	cfg.WriteString(testController + "nodes:\n")
	var modes strings.Builder
	var roots []string
	for _, nc := range cases {
		envVar := "KEY_" + strings.ToUpper(nc.name)
		envYAML, cliHome := cli.modeEnv(t, api, bin, envVar)
		roots = append(roots, cliHome)
		work := filepath.Join(t.TempDir(), "work")
		if nc.ssh {
			work = srv.WorkDir + "-" + nc.name
		}
		roots = append(roots, work)
		fmt.Fprintf(&cfg, "  - name: %s\n", nc.name)
		if nc.ssh {
			fmt.Fprintf(&cfg, "    ssh: %s@127.0.0.1:%d\n", h.client.User, srv.Port)
		} else {
			cfg.WriteString("    ssh: null\n")
		}
		fmt.Fprintf(&cfg, "    slots: 1\n    work_dir: %s\n    tool: %s\n    api_mode: m-%s\n", work, cli.tool, nc.name)
		h.env = append(h.env, envVar+"="+nc.key)
		fmt.Fprintf(&modes, "  m-%s:\n    env:\n%s", nc.name, envYAML)
	}
	cfg.WriteString("api_modes:\n" + modes.String())
	writeFile(t, filepath.Join(h.home, "nodes.yaml"), cfg.String())
	unsandboxed(t, h.home, "the CLI's HOME (settings, sessions) is under /tmp, which the sandbox replaces on each attempt")
	dir := filepath.Join(h.home, "specs", "p")
	writeFile(t, filepath.Join(dir, "project.yaml"), "integration: false\nmax_retries: 2\n")
	prompts := map[string]string{}
	for _, nc := range cases {
		prompts[nc.id] = fmt.Sprintf("Write the greeting file for %s (PROMPT-MARKER-%s).", nc.name, nc.id)
		writeFile(t, filepath.Join(dir, nc.id+"-"+nc.name+".md"), fmt.Sprintf("---\nnode: %s\n---\n%s\n", nc.name, prompts[nc.id]))
	}
	roots = append(roots, h.home, h.client.Home)

	if r := h.run(t, "validate", "p"); r.code != 0 {
		t.Fatalf("validate: %s", r)
	}
	finished := startBackground(t, h.env, "--home", h.home, "start", "p")

	// The rate-limited attempt fails as rate_limit and pauses its mode
	// until the reset; then the key works again.
	pollUntil(t, 30*time.Second, "the database", func() bool {
		_, err := os.Stat(filepath.Join(h.home, "dispatch.db"))
		return err == nil
	})
	st := openStore(t, h.home)
	ctx := context.Background()
	limited := cases[3]
	var pause store.Pause
	pollUntil(t, 60*time.Second, "the rate limit to pause m-limited", func() bool {
		ps, _ := st.Pauses(ctx)
		for _, p := range ps {
			if p.APIMode == "m-"+limited.name {
				pause = p
				return true
			}
		}
		return false
	})
	runs, _ := st.Attempts(ctx, "p", limited.id)
	if len(runs) == 0 || runs[0].ErrorClass != wire.ClassRateLimit {
		t.Fatalf("%s attempt 1: %+v, want rate_limit", limited.id, runs)
	}
	// Measured from the end of the attempt, so that a slow poll of the
	// test does not count: claude adds up to a quarter to Retry-After;
	// the controller may apply the status a few seconds late on a busy
	// machine; codex shows the reset as a time of day to the minute,
	// which may have just passed.
	// The limit was hit between the attempt's start and its end (the
	// wrapper then stops the tool, which takes its grace): the reset
	// lies at least Reset after the start, and the pause may not end
	// before it; it may end at most a little after Reset from the end.
	paused := pause.Until.Sub(runs[0].CompletedAt)
	fromStart := pause.Until.Sub(runs[0].StartedAt)
	low, high := api.Reset-2*time.Second, api.Reset*5/4+5*time.Second
	if cli.tool == "codex" {
		low, high = -time.Minute, api.Reset+31*time.Second
	}
	if fromStart < low || paused > high {
		t.Errorf("m-limited paused for %s after the attempt ended (%s after it started), want about %s (the reset)", paused.Round(time.Second), fromStart.Round(time.Second), api.Reset)
	}
	api.Set(limited.key, fakeapi.Work)
	r := finished()
	if r.code == 0 {
		t.Errorf("start exited 0 with a failed task: %s", r)
	}

	tasks := map[string]domain.Task{}
	all, _ := st.Tasks(ctx, "p")
	for _, tk := range all {
		tasks[tk.ID] = tk
	}
	for _, nc := range []nodeCase{cases[0], cases[1], cases[3]} {
		tk := tasks[nc.id]
		if tk.Status != domain.Completed {
			t.Errorf("%s on %s: %s (%s: %s)\n%s", nc.id, nc.name, tk.Status, tk.ErrorClass, tk.Error,
				tailOf(filepath.Join(h.home, "runs", "p", nc.id, "task.log")))
			continue
		}
		// The CLI's own tool wrote the file; dispatch collected it.
		got := readFile(t, filepath.Join(h.home, "runs", "p", nc.id, "output", api.File))
		if got != api.Content {
			t.Errorf("%s: collected %s = %q", nc.id, api.File, got)
		}
		// Tokens: what the fake answered to this key, over all attempts.
		runs, _ := st.Attempts(ctx, "p", nc.id)
		var in, out int64
		var cost float64
		for _, run := range runs {
			in, out, cost = in+run.TokensIn, out+run.TokensOut, cost+run.CostUSD
		}
		want := api.AnsweredFor(nc.key)
		if want.In == 0 || in != want.In || out != want.Out {
			t.Errorf("%s: recorded %d in, %d out; the fake answered %d in, %d out", nc.id, in, out, want.In, want.Out)
		}
		// ...and what the CLI printed.
		pin, pout, pcost := agentlog.ParseUsage(cli.tool, []byte(readFile(t, filepath.Join(h.home, "runs", "p", nc.id, "task.log"))))
		last := runs[len(runs)-1]
		if pin != last.TokensIn || pout != last.TokensOut || pcost != last.CostUSD {
			t.Errorf("%s: recorded %d/%d/$%g, the CLI printed %d/%d/$%g", nc.id, last.TokensIn, last.TokensOut, last.CostUSD, pin, pout, pcost)
		}
		if cli.printedCost && !(cost > 0) {
			t.Errorf("%s: no cost recorded", nc.id)
		}
	}
	// The prompt reached the API.
	seen := map[string]bool{}
	for _, req := range api.Requests() {
		for id, p := range prompts {
			if strings.Contains(req.Prompt, p) {
				seen[id] = true
			}
		}
	}
	for _, nc := range cases {
		if !seen[nc.id] {
			t.Errorf("%s: its prompt never reached the API", nc.id)
		}
	}
	// 401: auth, on the first attempt, not retried.
	bad := tasks[cases[2].id]
	if bad.Status != domain.Failed || bad.ErrorClass != wire.ClassAuth || bad.Attempt != 1 {
		t.Errorf("%s with a refused key: %s, class %s, attempt %d; want failed, auth, 1", bad.ID, bad.Status, bad.ErrorClass, bad.Attempt)
	}
	// 429: retried outside max_retries.
	lt := tasks[limited.id]
	if lt.RetriesUsed != 0 || lt.RateLimitRetries != 1 || lt.Attempt != 2 {
		t.Errorf("%s: retries %d, rate-limit retries %d, attempt %d; want 0, 1, 2", lt.ID, lt.RetriesUsed, lt.RateLimitRetries, lt.Attempt)
	}
	// No key is in any file: the homes, work dirs, the CLIs' homes.
	for _, root := range roots {
		filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err != nil || !d.Type().IsRegular() {
				return nil
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return nil
			}
			for _, nc := range cases {
				if strings.Contains(string(b), nc.key) {
					t.Errorf("the key of %s is in %s", nc.name, p)
				}
			}
			return nil
		})
	}
	rep := h.run(t, "report", "p")
	t.Logf("%s report:\n%s", cli.tool, rep.stdout)
}

// tailOf returns the last lines of a file, for a failure message.
func tailOf(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > 20 {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

// TestRealAgentCLIsStallAndResume: a real CLI whose API call hangs writes
// nothing; dispatch stops it as stalled and retries it. claude and codex
// continue their session (the retry's request carries the first attempt's
// prompt although the retry's own input is only "continue"); gemini, which
// cannot resume a session by id, starts afresh.
func TestRealAgentCLIsStallAndResume(t *testing.T) {
	bin := agentcli.Dir(t)
	for _, cli := range realCLIs {
		t.Run(cli.tool, func(t *testing.T) {
			t.Parallel()
			api := fakeapi.New(t, cli.provider)
			api.File = "resumed.txt"
			key := "sk-fake-" + cli.tool + "-stall-3e9a1b"
			// The first model request hangs; the ones after work.
			api.Script(key, fakeapi.Stall, fakeapi.Work)
			h := newSSHHome(t)
			srv := h.client.StartServer(t, "n1")
			h.client.Trust(t, srv)
			envYAML, _ := cli.modeEnv(t, api, bin, "KEY")
			h.env = append(h.env, "KEY="+key)
			writeFile(t, filepath.Join(h.home, "nodes.yaml"), testController+fmt.Sprintf(`nodes:
  - name: n1
    ssh: %s@127.0.0.1:%d
    slots: 1
    work_dir: %s
    tool: %s
    api_mode: m
api_modes:
  m:
    env:
%s`, h.client.User, srv.Port, srv.WorkDir, cli.tool, envYAML))
			unsandboxed(t, h.home, "the CLI's HOME (settings, sessions) is under /tmp, which the sandbox replaces on each attempt")
			dir := filepath.Join(h.home, "specs", "p")
			writeFile(t, filepath.Join(dir, "project.yaml"), "integration: false\nstall_timeout: 10s\n")
			const marker = "PROMPT-MARKER-RESUME-7d2c"
			writeFile(t, filepath.Join(dir, "S01-resume.md"), "Write the file resumed.txt ("+marker+").\n")
			r := h.run(t, "start", "p")
			if r.code != 0 {
				t.Fatalf("start: %s\n%s", r, tailOf(filepath.Join(h.home, "runs", "p", "S01", "task.log")))
			}
			st := openStore(t, h.home)
			ctx := context.Background()
			runs, _ := st.Attempts(ctx, "p", "S01")
			if len(runs) != 2 || runs[0].ErrorClass != wire.ClassStalled || runs[1].Status != domain.Completed {
				t.Fatalf("runs: %+v; want stalled, then completed", runs)
			}
			if got := readFile(t, filepath.Join(h.home, "runs", "p", "S01", "output", api.File)); got != api.Content {
				t.Errorf("collected %s = %q", api.File, got)
			}
			evs, _ := st.Events(ctx, "p", 0, 0)
			resumed := false
			for _, e := range evs {
				resumed = resumed || e.Kind == "resume" && strings.Contains(e.Message, runs[0].SessionID)
			}
			reqs := api.Requests()
			last := reqs[len(reqs)-1]
			switch cli.tool {
			case "claude", "codex":
				if runs[0].SessionID == "" || !resumed {
					t.Errorf("attempt 2 did not resume attempt 1's session %q", runs[0].SessionID)
				}
				// The retry got only the resume prompt on stdin: the
				// first prompt in its request comes from the session.
				if !strings.Contains(last.Body, marker) || !strings.Contains(last.Body, "You were interrupted") {
					t.Errorf("the resumed request lacks the session's prompt or the resume prompt")
				}
			default:
				if resumed {
					t.Errorf("%s resumed, but it has no resume by id", cli.tool)
				}
			}
		})
	}
}

// TestRealClaudeDangerousAsRoot: claude refuses --dangerously-skip-permissions
// as root, so validate refuses a dangerous node whose user is root, with the
// fix; with IS_SANDBOX=1 in the api_mode the real claude runs there.
func TestRealClaudeDangerousAsRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the sshd nodes of the tests log in as the current user, which is not root")
	}
	bin := agentcli.Dir(t)
	api := fakeapi.New(t, fakeapi.Anthropic)
	h := newSSHHome(t)
	srv := h.client.StartServer(t, "n1")
	h.client.Trust(t, srv)
	h.env = append(h.env, "KEY=sk-fake-root-2b7c11")
	cliHome := t.TempDir()
	nodesYAML := func(sandbox string) string {
		return fmt.Sprintf(`controller:
  poll_interval: 200ms
  retry_backoff: 100ms
nodes:
  - name: n1
    ssh: %s@127.0.0.1:%d
    work_dir: %s
    tool: claude
    dangerous: true
    api_mode: m
api_modes:
  m:
    env:
      ANTHROPIC_API_KEY: ${KEY}
      ANTHROPIC_BASE_URL: %s
      HOME: %s
      PATH: %s
%s`, h.client.User, srv.Port, srv.WorkDir, api.URL, cliHome, agentcli.PATH(t, bin), sandbox)
	}
	writeFile(t, filepath.Join(h.home, "nodes.yaml"), nodesYAML(""))
	dir := filepath.Join(h.home, "specs", "p")
	writeFile(t, filepath.Join(dir, "project.yaml"), "integration: false\n")
	writeFile(t, filepath.Join(dir, "S01-root.md"), "Write hello.txt.\n")
	r := h.run(t, "validate", "p")
	if r.code != 2 || !strings.Contains(r.stderr, "claude would run as root") || !strings.Contains(r.stderr, "IS_SANDBOX=1") {
		t.Fatalf("validate of a dangerous claude node whose user is root: %s", r)
	}
	if r := h.run(t, "start", "p"); r.code != 2 {
		t.Fatalf("start: %s", r)
	}
	writeFile(t, filepath.Join(h.home, "nodes.yaml"), nodesYAML(`      IS_SANDBOX: "1"
`))
	if r := h.run(t, "start", "p"); r.code != 0 {
		t.Fatalf("start with IS_SANDBOX=1: %s\n%s", r, tailOf(filepath.Join(h.home, "runs", "p", "S01", "task.log")))
	}
	if got := readFile(t, filepath.Join(h.home, "runs", "p", "S01", "output", api.File)); got != api.Content {
		t.Errorf("collected %s = %q", api.File, got)
	}
}

// TestRealAgentCLIsFallbackAndBudget: with each real CLI, a rate limit on
// the node's api_mode sends the retry to its fallback account at once, and
// the budget, reached by what the CLI reported, cancels the task that was
// to come next.
func TestRealAgentCLIsFallbackAndBudget(t *testing.T) {
	bin := agentcli.Dir(t)
	for _, cli := range realCLIs {
		t.Run(cli.tool, func(t *testing.T) {
			t.Parallel()
			api := fakeapi.New(t, cli.provider)
			api.Reset = 5 * time.Minute
			limited, spare := "sk-fake-"+cli.tool+"-first-77aa01", "sk-fake-"+cli.tool+"-second-0c3d9e"
			api.Set(limited, fakeapi.RateLimited)
			h := newSSHHome(t)
			srv := h.client.StartServer(t, "n1")
			h.client.Trust(t, srv)
			h.env = append(h.env, "KEY_A="+limited, "KEY_B="+spare)
			var modes strings.Builder
			for _, m := range []struct{ name, key, fallback string }{{"a", "KEY_A", "    fallback: [b]\n"}, {"b", "KEY_B", ""}} {
				envYAML, _ := cli.modeEnv(t, api, bin, m.key)
				fmt.Fprintf(&modes, "  %s:\n%s    env:\n%s", m.name, m.fallback, envYAML)
			}
			writeFile(t, filepath.Join(h.home, "nodes.yaml"), testController+fmt.Sprintf(`nodes:
  - name: n1
    ssh: %s@127.0.0.1:%d
    slots: 1
    work_dir: %s
    tool: %s
    api_mode: a
    api_modes: [b]
api_modes:
%s`, h.client.User, srv.Port, srv.WorkDir, cli.tool, modes.String()))
			unsandboxed(t, h.home, "the CLI's HOME (settings, sessions) is under /tmp, which the sandbox replaces on each attempt")
			dir := filepath.Join(h.home, "specs", "p")
			writeFile(t, filepath.Join(dir, "project.yaml"), "integration: false\nbudget: {tokens: 100}\n")
			writeFile(t, filepath.Join(dir, "S01-first.md"), "Write hello.txt.\n")
			writeFile(t, filepath.Join(dir, "S02-next.md"), "---\ndepends_on: [S01]\n---\nWrite hello.txt again.\n")
			r := h.run(t, "start", "p")
			if r.code != 1 {
				t.Fatalf("start: %s, want exit 1 (the budget stopped the project)", r)
			}
			st := openStore(t, h.home)
			ctx := context.Background()
			runs, _ := st.Attempts(ctx, "p", "S01")
			if len(runs) != 2 || runs[0].APIMode != "a" || runs[0].ErrorClass != wire.ClassRateLimit ||
				runs[1].APIMode != "b" || runs[1].Status != domain.Completed {
				t.Fatalf("S01 runs: %+v; want rate_limit under a, then completed under b", runs)
			}
			if used := api.AnsweredFor(spare); runs[1].TokensIn+runs[1].TokensOut != used.In+used.Out {
				t.Errorf("S01 under b recorded %d tokens, the fake answered %d", runs[1].TokensIn+runs[1].TokensOut, used.In+used.Out)
			}
			s02, _ := st.Task(ctx, "p", "S02")
			if s02.Status != domain.Canceled || !strings.Contains(s02.Error, "budget reached") {
				t.Errorf("S02: %s (%s); want canceled by the budget", s02.Status, s02.Error)
			}
			md := readFile(t, filepath.Join(h.home, "runs", "p", "report.md"))
			if !strings.Contains(md, "- S01: #1 a, #2 b") || !strings.Contains(md, "Budget: 100 tokens — budget reached") {
				t.Errorf("report.md lacks the modes or the budget:\n%s", md)
			}
			t.Logf("%s report.md:\n%s", cli.tool, md)
		})
	}
}
