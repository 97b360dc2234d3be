package main

import (
	"io"
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
