package policy

import (
	"cmp"
	"fmt"
	"maps"
	"net"
	"net/url"
	"slices"
	"sort"
	"strings"

	"github.com/dispatch-tool/dispatch/internal/netallow"
	"github.com/dispatch-tool/dispatch/nodes"
)

// defaultTool is the tool of a task that names none, on a node that names none.
const defaultTool = "claude"

// builtinTool describes how dispatch runs one agent CLI. The prompt always
// goes on stdin, never in argv. The flags and variables are the ones the
// CLIs' current releases accepted in the tests (docs/AGENTS.md).
type builtinTool struct {
	base      []string
	modelFlag string
	// modelAt is where the model flag goes in base (after the subcommand).
	modelAt int
	// safe are the flags of a normal run; dangerous replaces them on a node
	// or api_mode with dangerous: true, and in an attempt dispatch's
	// sandbox confines (autonomous: the tool's own approval prompts off,
	// its shell tool runs, confined by bwrap).
	safe      []string
	dangerous []string
	// sandboxEnv is added to env where the attempt runs sandboxed.
	sandboxEnv map[string]string
	// tail comes last in either case.
	tail  []string
	stdin string
	// env are the tool's settings: offline, non-interactive, its own
	// retries bounded. The api_mode's env overrides any of them.
	env map[string]string
	// resume builds the command that continues session instead of
	// starting afresh; nil when the tool cannot (the attempt restarts).
	resume func(b builtinTool, model string, dangerous bool, session string) []string
	// apiHosts are the provider's hosts the tool talks to (its API, and
	// where a login is refreshed): a task with a network allow list may
	// always reach them.
	apiHosts []string
}

var builtinTools = map[string]builtinTool{
	// claude -p reads the prompt on stdin; stream-json prints one event per
	// step (the stall check sees progress) and a result event with usage
	// and cost. It refuses --dangerously-skip-permissions as root unless
	// IS_SANDBOX=1 (validate and start check this for dangerous: true; a
	// sandboxed attempt gets it, bwrap being the sandbox it asks for).
	// acceptEdits refuses every shell command in -p ("This command
	// requires approval").
	"claude": {base: []string{"claude", "-p"}, modelFlag: "--model", modelAt: 2,
		apiHosts:   []string{"api.anthropic.com:443", "console.anthropic.com:443"},
		safe:       []string{"--permission-mode", "acceptEdits"},
		dangerous:  []string{"--dangerously-skip-permissions"},
		sandboxEnv: map[string]string{"IS_SANDBOX": "1"},
		tail:       []string{"--output-format", "stream-json", "--verbose"}, stdin: "spec",
		resume: func(b builtinTool, model string, dangerous bool, session string) []string {
			argv := append([]string{"claude", "-p", "--resume", session}, b.flags(model, dangerous)[2:]...)
			return argv
		},
		env: map[string]string{
			// It retries a failed call 10 times over minutes by itself;
			// dispatch retries attempts, and stops one that waits out a
			// rate limit (wrapper: retry notices).
			"CLAUDE_CODE_MAX_RETRIES":                  "3",
			"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
			"DISABLE_AUTOUPDATER":                      "1",
			"DISABLE_TELEMETRY":                        "1",
			"DISABLE_ERROR_REPORTING":                  "1",
		}},
	// codex exec reads the prompt on stdin ("-"). 0.169 no longer knows
	// --full-auto (exit 2) and refuses to run outside a git repository
	// without --skip-git-repo-check; --json prints the usage split into
	// input, cached input and output. Its shell snapshot would write the
	// whole environment, secrets included, under CODEX_HOME.
	"codex": {base: []string{"codex", "exec"}, modelFlag: "-m", modelAt: 2,
		apiHosts:  []string{"api.openai.com:443", "chatgpt.com:443", "auth.openai.com:443"},
		safe:      []string{"--sandbox", "workspace-write"},
		dangerous: []string{"--dangerously-bypass-approvals-and-sandbox"},
		tail: []string{"--json", "--skip-git-repo-check", "--disable", "shell_snapshot", "--disable", "plugins",
			"-c", "check_for_update_on_startup=false", "-"}, stdin: "spec",
		// codex exec resume [flags] <id> -: it has no --sandbox, the
		// config key says the same.
		resume: func(b builtinTool, model string, dangerous bool, session string) []string {
			argv := []string{"codex", "exec", "resume"}
			if model != "" {
				argv = append(argv, "-m", model)
			}
			if dangerous {
				argv = append(argv, b.dangerous...)
			} else {
				argv = append(argv, "-c", `sandbox_mode="workspace-write"`)
			}
			tail := b.tail[:len(b.tail)-1]
			return append(append(argv, tail...), session, "-")
		}},
	// gemini -p "" reads the prompt on stdin (0.61 requires -p to have a
	// value); headless runs outside a trusted folder exit 55 without
	// --skip-trust; only auto_edit or yolo give it its file-writing tool;
	// stream-json prints the usage.
	"gemini": {base: []string{"gemini"}, modelFlag: "-m", modelAt: 1,
		apiHosts:  []string{"generativelanguage.googleapis.com:443", "cloudcode-pa.googleapis.com:443", "oauth2.googleapis.com:443"},
		safe:      []string{"--approval-mode", "auto_edit"},
		dangerous: []string{"--approval-mode", "yolo"},
		tail:      []string{"-p", "", "--output-format", "stream-json", "--skip-trust"}, stdin: "spec",
		env: map[string]string{
			"GEMINI_TELEMETRY_ENABLED": "false",
			"GEMINI_CLI_NO_RELAUNCH":   "true",
		}},
	ToolShell: {base: []string{"/bin/sh", "{spec}"}, modelAt: 2},
}

// ToolShell is the built-in tool that runs the spec as a script: its
// spec is never a prompt to add to.
const ToolShell = "shell"

// toolNames lists the built-in tools and those of nodes.yaml.
func toolNames(cfg *nodes.Config) []string {
	var out []string
	for n := range builtinTools {
		out = append(out, n)
	}
	for n := range cfg.Tools {
		if _, ok := builtinTools[n]; !ok {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// IsBuiltinTool reports whether tool is one dispatch knows (claude, codex,
// gemini, shell), whatever nodes.yaml defines.
func IsBuiltinTool(tool string) bool {
	_, ok := builtinTools[tool]
	return ok
}

// ToolFor resolves a task's tool on a node: the task's (spec or
// project.yaml), else the node's, else claude.
func ToolFor(taskTool string, n nodes.Node) string {
	if taskTool != "" {
		return taskTool
	}
	if n.Tool != "" {
		return n.Tool
	}
	return defaultTool
}

// ToolCommand returns the argv, stdin mode and settings of a tool.
// dangerous uses the tool's permission-skipping flags; it is only ever set
// by the node or the api_mode, never by a spec. sandboxed, for an attempt
// that runs under bwrap, uses them too, with the tool's sandboxEnv: the
// agent works autonomously, confined by dispatch's sandbox instead of its
// own prompts. A tool of nodes.yaml runs the same either way. A session
// continues that session of the tool (stdin "resume") where the tool can;
// "" starts afresh.
func ToolCommand(cfg *nodes.Config, tool, model string, dangerous, sandboxed bool, session string) (argv []string, stdin string, env map[string]string, err error) {
	if t, ok := cfg.Tools[tool]; ok {
		argv = append(argv, t.Command...)
		if model != "" && t.ModelFlag != "" {
			argv = append(argv, t.ModelFlag, model)
		}
		return argv, "spec", nil, nil
	}
	b, ok := builtinTools[tool]
	if !ok {
		return nil, "", nil, fmt.Errorf("unknown tool %q: use one of %v or define it under tools: in nodes.yaml", tool, toolNames(cfg))
	}
	env = b.env
	if sandboxed && len(b.sandboxEnv) > 0 {
		env = make(map[string]string, len(b.env)+len(b.sandboxEnv))
		for _, m := range []map[string]string{b.env, b.sandboxEnv} {
			for k, v := range m {
				env[k] = v
			}
		}
	}
	autonomous := dangerous || sandboxed
	if session != "" && b.resume != nil {
		return b.resume(b, model, autonomous, session), "resume", env, nil
	}
	return b.flags(model, autonomous), b.stdin, env, nil
}

// flags is the tool's command line for a fresh start.
func (b builtinTool) flags(model string, dangerous bool) []string {
	var argv []string
	argv = append(argv, b.base[:b.modelAt]...)
	if model != "" && b.modelFlag != "" {
		argv = append(argv, b.modelFlag, model)
	}
	argv = append(argv, b.base[b.modelAt:]...)
	if dangerous {
		argv = append(argv, b.dangerous...)
	} else {
		argv = append(argv, b.safe...)
	}
	return append(argv, b.tail...)
}

// ResumePrompt is what a resumed session is told.
const ResumePrompt = "You were interrupted (a rate limit, a stall or a more urgent task stopped you). Continue the task from where you left off and finish it.\n"

// NetworkAllow is launch.json's allow list for a task whose network
// setting is an allow list: its entries, the hosts of tool's provider
// (apiHosts) and the host of every URL among the api_mode's values (its
// base URL: ANTHROPIC_BASE_URL and the like), so that the tool reaches
// its API whatever the list says. The values are secrets: an error names
// the variable, never its value.
func NetworkAllow(network, tool string, modeEnv map[string]string) ([]string, error) {
	l, _, err := netallow.Decode(network)
	if err != nil {
		return nil, err
	}
	for _, h := range builtinTools[tool].apiHosts {
		e, err := netallow.Parse(h)
		if err != nil {
			return nil, err
		}
		l = append(l, e)
	}
	for _, k := range slices.Sorted(maps.Keys(modeEnv)) {
		if e, ok := urlEntry(modeEnv[k]); ok {
			l = append(l, e)
		}
	}
	_, list, _ := strings.Cut(netallow.Encode(l), netallow.Prefix)
	if list == "" {
		return []string{}, nil
	}
	return strings.Split(list, ","), nil
}

// urlEntry is the host:port of an http(s) or ws(s) URL (its scheme's port
// when it has none); false for any other value.
func urlEntry(v string) (netallow.Entry, bool) {
	u, err := url.Parse(strings.TrimSpace(v))
	if err != nil || u.Hostname() == "" {
		return netallow.Entry{}, false
	}
	port := u.Port()
	switch u.Scheme {
	case "http", "ws":
		port = cmp.Or(port, "80")
	case "https", "wss":
		port = cmp.Or(port, "443")
	default:
		return netallow.Entry{}, false
	}
	e, err := netallow.Parse(net.JoinHostPort(u.Hostname(), port))
	return e, err == nil
}
