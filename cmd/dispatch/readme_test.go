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

// docText returns the text of the given files of the repository (README.md,
// docs/COMMANDS.md, ...), one after the other.
func docText(t *testing.T, files ...string) string {
	t.Helper()
	var b strings.Builder
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join("..", "..", f))
		if err != nil {
			t.Fatal(err)
		}
		b.Write(data)
		b.WriteString("\n")
	}
	return b.String()
}

// TestReadmeReference keeps the reference in docs/ in step with the code:
// docs/COMMANDS.md documents every command, subcommand and flag,
// docs/CONFIGURATION.md every key of nodes.yaml, docs/PROJECTS.md (with
// docs/SANDBOX.md for sandbox:) every key of a spec's front matter and of
// project.yaml.
func TestReadmeReference(t *testing.T) {
	doc := docText(t, "docs/COMMANDS.md")
	app := newApp(io.Discard, io.Discard)
	for _, f := range app.Flags {
		if name := f.Names()[0]; !strings.Contains(doc, "--"+name) {
			t.Errorf("docs/COMMANDS.md does not document the global flag --%s", name)
		}
	}
	var check func(prefix string, cmds []*cli.Command)
	check = func(prefix string, cmds []*cli.Command) {
		for _, c := range cmds {
			if c.Hidden || c.Name == "help" {
				continue
			}
			full := prefix + " " + c.Name
			if !strings.Contains(doc, full) {
				t.Errorf("docs/COMMANDS.md does not document %q", full)
			}
			for _, f := range c.Flags {
				name := f.Names()[0]
				if name == "help" {
					continue
				}
				if !strings.Contains(doc, "--"+name) && !strings.Contains(doc, "-"+name+" ") {
					t.Errorf("docs/COMMANDS.md does not document %s --%s", full, name)
				}
			}
			check(full, c.Subcommands)
		}
	}
	check("dispatch", app.Commands)
	doc = docText(t, "docs/CONFIGURATION.md")
	for section, keys := range nodes.Keys {
		for _, k := range keys {
			if !strings.Contains(doc, k+":") {
				t.Errorf("docs/CONFIGURATION.md's nodes.yaml reference lacks %s key %q", section, k)
			}
		}
	}
	doc = docText(t, "docs/PROJECTS.md", "docs/SANDBOX.md")
	for _, k := range spec.TaskKeys {
		if !strings.Contains(doc, k+":") {
			t.Errorf("docs/PROJECTS.md and docs/SANDBOX.md lack the front-matter key %q", k)
		}
	}
	for _, k := range spec.ProjectKeys {
		if !strings.Contains(doc, k+":") {
			t.Errorf("docs/PROJECTS.md and docs/SANDBOX.md lack the project.yaml key %q", k)
		}
	}
}

// TestReadmeClaims checks what the README and docs/ say against what
// dispatch does, for the claims a new user found wrong: depends_on orders
// tasks and passes their outputs in $DISPATCH_INPUTS; an author-written S99/V01 runs with
// project.yaml's tool:, not the node's; final/ is a plain copy, not a
// checkout.
func TestReadmeClaims(t *testing.T) {
	for _, c := range []struct{ file, claim string }{
		{"README.md", "`depends_on: [S01]` orders the tasks and passes results along"},
		{"docs/PROJECTS.md", "their outputs in $DISPATCH_INPUTS/<ID>/"},
		{"docs/PROJECTS.md", "runs like the\nauthor's tasks: with its own front matter's `tool:`, else project.yaml's `tool:`, else\nthe node's"},
		{"docs/GIT.md", "(a plain copy, not a\n  git checkout"},
		{"docs/PROJECTS.md", "(a plain copy of the files,\n   not a git checkout)"},
	} {
		if !strings.Contains(docText(t, c.file), c.claim) {
			t.Errorf("%s does not say %q", c.file, c.claim)
		}
	}
	docs, err := filepath.Glob("../../docs/*.md")
	if err != nil || len(docs) == 0 {
		t.Fatalf("no docs/*.md: %v", err)
	}
	files := []string{"README.md"}
	for _, d := range docs {
		files = append(files, filepath.Join("docs", filepath.Base(d)))
	}
	for _, f := range files {
		text := docText(t, f)
		for _, wrong := range []string{"project.yaml's `tool` is for the author's tasks", "checked out in `runs/<project>/final/`"} {
			if strings.Contains(text, wrong) {
				t.Errorf("%s still says %q", f, wrong)
			}
		}
	}

	home, work := opsHome(t, map[string]map[string]string{
		"p": {"S01-a.md": "echo hello > hello.txt\n", "S02-b.md": "---\ndepends_on: [S01]\n---\nls -R \"$DISPATCH_INPUTS\"\nls\n"},
		"g": {"S01-a.md": "echo a > a.txt\n", "S99-mine.md": "echo mine > INTEGRATION.md\n", "V01-mine.md": "echo '{\"pass\": true, \"issues\": []}' > verdict.json\n"},
	})
	// depends_on: S02 runs after S01 and sees its files in
	// $DISPATCH_INPUTS/S01/, not in its own workspace.
	if r := runDispatch(t, nil, "--home", home, "start", "p"); r.code != 0 {
		t.Fatalf("start p: %s", r)
	}
	if log := readFile(t, filepath.Join(home, "runs", "p", "S02", "task.log")); !strings.Contains(log, "S01:\nhello.txt\n") {
		t.Errorf("S02 did not list S01's hello.txt under $DISPATCH_INPUTS, as the README says:\n%s", log)
	}
	if _, err := os.Stat(filepath.Join(home, "runs", "p", "S02", "output", "hello.txt")); err == nil {
		t.Error("S01's hello.txt was copied into S02's workspace; only start_from: dependencies does that")
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
