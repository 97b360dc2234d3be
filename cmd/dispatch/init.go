package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v2"
)

// scaffold is what `dispatch init` writes: a nodes.yaml with one local node
// and an example project that runs without any agent CLI.
var scaffold = map[string]string{
	"nodes.yaml": `# dispatch nodes.yaml — see docs/CONFIGURATION.md for every key.
controller:
  poll_interval: 30s
  max_retries: 2

nodes:
  - name: local
    ssh: null              # this machine; add SSH nodes as: ssh: my-alias | user@host[:port] | "ssh -p 2222 me@host"
    slots: 2
    work_dir: ~/.dispatch/work   # task workspaces; never inside a git checkout
    # Under the sandbox an agent CLI (claude, codex, gemini) reaches only its
    # provider's API: a prompt-injected agent cannot send its login anywhere.
    # To let every task of this node (shell tasks too) reach the usual package
    # registries as well, uncomment (see docs/SANDBOX.md, "Network"):
    # network:
    #   allow:
    #     - registry.npmjs.org:443           # npm
    #     - pypi.org:443                     # PyPI (pip)
    #     - files.pythonhosted.org:443
    #     - proxy.golang.org:443             # Go modules
    #     - sum.golang.org:443
    #     - index.crates.io:443              # crates.io (cargo)
    #     - static.crates.io:443
    #     - github.com:443                   # GitHub: git over https, releases, raw files
    #     - api.github.com:443
    #     - codeload.github.com:443
    #     - "*.githubusercontent.com:443"

# api_modes:               # environments for the agent tools; ${VAR} comes from your shell
#   zai:
#     env:
#       ANTHROPIC_AUTH_TOKEN: ${ZAI_API_KEY}
`,
	"specs/example/project.yaml": `# The example runs shell scripts so it works without an agent CLI.
# Remove this line to run the specs as prompts for claude (the default tool).
tool: shell
integration: false
`,
	"specs/example/S01-hello.md": `# Say hello
echo "hello from $DISPATCH_TASK on $DISPATCH_NODE" > hello.txt
`,
	"specs/example/S02-after.md": `---
depends_on: [S01]
---
# Runs after S01
date > after.txt
`,
}

func initCommand() *cli.Command {
	return &cli.Command{
		Name:      "init",
		Usage:     "create a dispatch home: nodes.yaml (one local node) and specs/example",
		ArgsUsage: "[DIR]",
		Action: func(c *cli.Context) error {
			if c.NArg() > 1 {
				return usagef("dispatch init [DIR]", "init takes at most one directory")
			}
			dir := c.Args().First()
			if dir == "" {
				dir = c.String("home")
			}
			abs, err := filepath.Abs(dir)
			if err != nil {
				return err
			}
			var exists []string
			for name := range scaffold {
				if _, err := os.Stat(filepath.Join(abs, name)); err == nil {
					exists = append(exists, name)
				} else if !errors.Is(err, fs.ErrNotExist) {
					return err
				}
			}
			if len(exists) > 0 {
				return usagef("dispatch init <another directory>", "%s already has %s; init writes nothing over existing files", abs, strings.Join(exists, ", "))
			}
			for _, name := range []string{"nodes.yaml", "specs/example/project.yaml", "specs/example/S01-hello.md", "specs/example/S02-after.md"} {
				p := filepath.Join(abs, name)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					return err
				}
				if err := os.WriteFile(p, []byte(scaffold[name]), 0o644); err != nil {
					return err
				}
				fmt.Fprintf(c.App.Writer, "wrote %s\n", p)
			}
			fmt.Fprintf(c.App.Writer, "\nNext:\n  cd %s\n  dispatch validate example\n  dispatch start example\n", abs)
			return nil
		},
	}
}
