package main

import (
	"io"
	"os"
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
