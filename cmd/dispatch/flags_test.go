package main

import (
	"flag"
	"io"
	"strings"

	"github.com/urfave/cli/v2"
	"slices"
	"testing"
)

func TestFlagsFirst(t *testing.T) {
	tests := []struct {
		name string
		in   []string
		want []string
	}{
		{"flags already first", []string{"dispatch", "status", "--json", "p"}, []string{"dispatch", "status", "--json", "p"}},
		{"bool flag after the project", []string{"dispatch", "status", "p", "--json"}, []string{"dispatch", "status", "--json", "p"}},
		{"value flag after the project", []string{"dispatch", "report", "p", "--format", "json", "-o", "r.json"},
			[]string{"dispatch", "report", "--format", "json", "-o", "r.json", "p"}},
		{"flag=value", []string{"dispatch", "report", "p", "--format=json"}, []string{"dispatch", "report", "--format=json", "p"}},
		{"negative duration stays with its flag", []string{"dispatch", "start", "p", "--poll", "-1s"}, []string{"dispatch", "start", "--poll", "-1s", "p"}},
		{"global flags with values", []string{"dispatch", "--home", "h", "--no-color", "--log-level", "debug", "status", "p", "--json"},
			[]string{"dispatch", "--home", "h", "--no-color", "--log-level", "debug", "status", "--json", "p"}},
		{"global value that looks like a command", []string{"dispatch", "--home", "status", "report", "p", "--format", "json"},
			[]string{"dispatch", "--home", "status", "report", "--format", "json", "p"}},
		{"after --", []string{"dispatch", "status", "p", "--", "--json"}, []string{"dispatch", "status", "p", "--", "--json"}},
		{"unknown flag moves too", []string{"dispatch", "start", "p", "--bogus"}, []string{"dispatch", "start", "--bogus", "p"}},
		{"unknown command", []string{"dispatch", "bogus", "p", "--json"}, []string{"dispatch", "bogus", "p", "--json"}},
		{"no command", []string{"dispatch", "--home", "h"}, []string{"dispatch", "--home", "h"}},
		{"value flag at the end", []string{"dispatch", "start", "p", "--poll"}, []string{"dispatch", "start", "--poll", "p"}},
		{"subcommand flag after it", []string{"dispatch", "nodes", "check", "--json"}, []string{"dispatch", "nodes", "check", "--json"}},
		{"subcommand flag after its argument", []string{"dispatch", "nodes", "trust", "n1", "--yes"}, []string{"dispatch", "nodes", "trust", "--yes", "n1"}},
		{"flag after --http ADDR", []string{"dispatch", "serve", "--http", "127.0.0.1:7979", "--detach"},
			[]string{"dispatch", "serve", "--http", "--detach", "127.0.0.1:7979"}},
		{"value flag after --http ADDR", []string{"dispatch", "serve", "--http", "127.0.0.1:7979", "--poll", "5s"},
			[]string{"dispatch", "serve", "--http", "--poll", "5s", "127.0.0.1:7979"}},
		{"command flag before a subcommand", []string{"dispatch", "nodes", "--json"}, []string{"dispatch", "nodes", "--json"}},
	}
	app := newApp(io.Discard, io.Discard)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := flagsFirst(app, slices.Clone(tc.in))
			if !slices.Equal(got, tc.want) {
				t.Errorf("flagsFirst(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

// TestFlagsFirstReadsFlagsAsParsed checks every flag of every command: a
// flag moved in front of the arguments takes the next argument with it
// exactly when the flag package would read one (a bool flag, or serve's
// --http that may stand alone, takes none), so `dispatch CMD ARG --FLAG
// [VALUE]` parses as `dispatch CMD --FLAG [VALUE] ARG`.
func TestFlagsFirstReadsFlagsAsParsed(t *testing.T) {
	app := newApp(io.Discard, io.Discard)
	var walk func(path []string, cmds []*cli.Command)
	walk = func(path []string, cmds []*cli.Command) {
		for _, cmd := range cmds {
			p := append(slices.Clone(path), cmd.Name)
			walk(p, cmd.Subcommands)
			for _, f := range cmd.Flags {
				set := flag.NewFlagSet(cmd.Name, flag.ContinueOnError)
				if err := f.Apply(set); err != nil {
					t.Fatal(err)
				}
				name := f.Names()[0]
				bf, ok := set.Lookup(name).Value.(interface{ IsBoolFlag() bool })
				parsedAlone := ok && bf.IsBoolFlag()
				if got := takesValue(cmd.Flags, "--"+name); got == parsedAlone {
					t.Errorf("dispatch %s --%s: flagsFirst takes a value %v, the flag package %v",
						strings.Join(p, " "), name, got, !parsedAlone)
				}
			}
		}
	}
	walk(nil, app.Commands)
}
