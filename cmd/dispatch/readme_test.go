package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/spec"
)

// TestReadmeReference keeps the README's command, nodes.yaml, spec and
// project.yaml references in step with the code: every command, subcommand
// and flag, and every key the parsers accept, is documented.
func TestReadmeReference(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	app := newApp(io.Discard, io.Discard)
	for _, f := range app.Flags {
		if name := f.Names()[0]; !strings.Contains(readme, "--"+name) {
			t.Errorf("README does not document the global flag --%s", name)
		}
	}
	var check func(prefix string, cmds []*cli.Command)
	check = func(prefix string, cmds []*cli.Command) {
		for _, c := range cmds {
			if c.Hidden || c.Name == "help" {
				continue
			}
			full := prefix + " " + c.Name
			if !strings.Contains(readme, full) {
				t.Errorf("README does not document %q", full)
			}
			for _, f := range c.Flags {
				name := f.Names()[0]
				if name == "help" {
					continue
				}
				if !strings.Contains(readme, "--"+name) && !strings.Contains(readme, "-"+name+" ") {
					t.Errorf("README does not document %s --%s", full, name)
				}
			}
			check(full, c.Subcommands)
		}
	}
	check("dispatch", app.Commands)
	for section, keys := range nodes.Keys {
		for _, k := range keys {
			if !strings.Contains(readme, k+":") {
				t.Errorf("README's nodes.yaml reference lacks %s key %q", section, k)
			}
		}
	}
	for _, k := range spec.TaskKeys {
		if !strings.Contains(readme, k+":") {
			t.Errorf("README's spec reference lacks front-matter key %q", k)
		}
	}
	for _, k := range spec.ProjectKeys {
		if !strings.Contains(readme, k+":") {
			t.Errorf("README's project.yaml reference lacks key %q", k)
		}
	}
}

// TestReadmeClaims checks what the README says against what dispatch does,
// for the claims a new user found wrong: depends_on orders tasks and
// passes no files; an author-written S99/V01 runs with project.yaml's
// tool:, not the node's; final/ is a plain copy, not a checkout.
func TestReadmeClaims(t *testing.T) {
	readme := readFile(t, "../../README.md")
	for _, claim := range []string{
		"`depends_on: [S01]` only orders the tasks",
		"(order only: their outputs are not copied in)",
		"runs like the\nauthor's tasks: with its own front matter's `tool:`, else project.yaml's `tool:`, else\nthe node's",
		"(a plain copy, not a\n  git checkout",
		"(a plain copy of the files,\n   not a git checkout)",
	} {
		if !strings.Contains(readme, claim) {
			t.Errorf("README does not say %q", claim)
		}
	}
	for _, wrong := range []string{"project.yaml's `tool` is for the author's tasks", "checked out in `runs/<project>/final/`"} {
		if strings.Contains(readme, wrong) {
			t.Errorf("README still says %q", wrong)
		}
	}

	home, work := opsHome(t, map[string]map[string]string{
		"p": {"S01-a.md": "echo hello > hello.txt\n", "S02-b.md": "---\ndepends_on: [S01]\n---\nls -la\n"},
		"g": {"S01-a.md": "echo a > a.txt\n", "S99-mine.md": "echo mine > INTEGRATION.md\n", "V01-mine.md": "echo '{\"pass\": true, \"issues\": []}' > verdict.json\n"},
	})
	// depends_on: S02 runs after S01 but sees none of its files.
	if r := runDispatch(t, nil, "--home", home, "start", "p"); r.code != 0 {
		t.Fatalf("start p: %s", r)
	}
	if log := readFile(t, filepath.Join(home, "runs", "p", "S02", "task.log")); strings.Contains(log, "hello.txt") {
		t.Errorf("S02 saw S01's hello.txt, which the README says is not passed:\n%s", log)
	}
	// An author-written S99 and V01 run with project.yaml's tool: shell,
	// on a node whose own tool is claude.
	writeFile(t, filepath.Join(home, "nodes.yaml"), fmt.Sprintf("nodes:\n  - name: local\n    tool: claude\n    work_dir: %s\n", work))
	writeFile(t, filepath.Join(home, "specs", "g", "project.yaml"), "tool: shell\nmax_fix_rounds: 0\n")
	r := runDispatch(t, nil, "--home", home, "validate", "g")
	if r.code != 0 || !planRowHas(r.stdout, "S99", "(shell)") || !planRowHas(r.stdout, "V01", "(shell)") {
		t.Errorf("validate g: the author's S99 and V01 should run with project.yaml's tool shell: %s", r)
	}
}
