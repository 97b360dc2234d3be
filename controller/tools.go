package controller

import (
	"fmt"
	"sort"

	"github.com/dispatch-tool/dispatch/nodes"
)

// DefaultTool is the tool of a task that names none, on a node that names none.
const DefaultTool = "claude"

// builtinTool describes how dispatch runs one agent CLI. The prompt always
// goes on stdin, never in argv.
type builtinTool struct {
	base      []string
	modelFlag string
	// modelAt is where the model flag goes in base (after the subcommand).
	modelAt   int
	tail      []string
	dangerous []string
	stdin     string
}

var builtinTools = map[string]builtinTool{
	"claude": {base: []string{"claude", "-p"}, modelFlag: "--model", modelAt: 2,
		tail:      []string{"--output-format", "stream-json", "--verbose", "--permission-mode", "acceptEdits"},
		dangerous: []string{"--dangerously-skip-permissions"}, stdin: "spec"},
	"codex": {base: []string{"codex", "exec"}, modelFlag: "-m", modelAt: 2,
		tail: []string{"--full-auto", "-"}, dangerous: []string{"--dangerously-bypass-approvals-and-sandbox"}, stdin: "spec"},
	"gemini": {base: []string{"gemini"}, modelFlag: "-m", modelAt: 1,
		tail: []string{"-p"}, dangerous: []string{"--yolo"}, stdin: "spec"},
	"shell": {base: []string{"/bin/sh", "{spec}"}, modelAt: 2},
}

// ToolNames lists the built-in tools and those of nodes.yaml.
func ToolNames(cfg *nodes.Config) []string {
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

// toolFor resolves a task's tool on a node: the task's (spec or
// project.yaml), else the node's, else claude.
func toolFor(taskTool string, n nodes.Node) string {
	if taskTool != "" {
		return taskTool
	}
	if n.Tool != "" {
		return n.Tool
	}
	return DefaultTool
}

// toolCommand returns the argv and stdin mode of a tool. dangerous adds the
// tool's permission-skipping flags; it is only ever set by the node or the
// api_mode, never by a spec.
func toolCommand(cfg *nodes.Config, tool, model string, dangerous bool) (argv []string, stdin string, err error) {
	if t, ok := cfg.Tools[tool]; ok {
		argv = append(argv, t.Command...)
		if model != "" && t.ModelFlag != "" {
			argv = append(argv, t.ModelFlag, model)
		}
		return argv, "spec", nil
	}
	b, ok := builtinTools[tool]
	if !ok {
		return nil, "", fmt.Errorf("unknown tool %q: use one of %v or define it under tools: in nodes.yaml", tool, ToolNames(cfg))
	}
	argv = append(argv, b.base[:b.modelAt]...)
	if model != "" && b.modelFlag != "" {
		argv = append(argv, b.modelFlag, model)
	}
	argv = append(argv, b.base[b.modelAt:]...)
	argv = append(argv, b.tail...)
	if dangerous {
		argv = append(argv, b.dangerous...)
	}
	return argv, b.stdin, nil
}
