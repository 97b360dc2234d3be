package spec

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

// matrixCases are the projects of TestMatrixExpansion.
var matrixCases = []struct {
	name   string
	files  map[string]string
	ids    []string          // the tasks, in Project.Tasks order
	titles map[string]string // some tasks' titles
	bodies map[string]string // some tasks' snapshots
	deps   map[string][]string
}{
	{
		name: "one key",
		files: map[string]string{
			"p/S01.md": "---\nmatrix: {pkg: [net/http, strings]}\n---\n# Test {{pkg}}\ngo test {{ pkg }}\n",
			"p/S02.md": "---\ndepends_on: [S01]\n---\n# After\ntrue\n",
		},
		ids:    []string{"S01.1", "S01.2", "S02"},
		titles: map[string]string{"S01.1": "Test net/http", "S01.2": "Test strings"},
		bodies: map[string]string{"S01.1": "# Test net/http\ngo test net/http\n", "S01.2": "# Test strings\ngo test strings\n"},
		deps:   map[string][]string{"S02": {"S01.1", "S01.2"}, "S01.1": nil},
	},
	{
		name: "several keys: every combination, keys sorted, values in order",
		files: map[string]string{
			"p/S01.md": "---\nmatrix: {os: [linux, mac], arch: [amd64, arm64, \"386\"]}\ndepends_on: [S02]\n---\n# build\n{{os}}/{{arch}}\n",
			"p/S02.md": "# first\ntrue\n",
		},
		ids:    []string{"S01.1", "S01.2", "S01.3", "S01.4", "S01.5", "S01.6", "S02"},
		titles: map[string]string{"S01.1": "build (amd64, linux)", "S01.6": "build (386, mac)"},
		bodies: map[string]string{"S01.1": "# build\nlinux/amd64\n", "S01.2": "# build\nmac/amd64\n", "S01.5": "# build\nlinux/386\n"},
		deps:   map[string][]string{"S01.3": {"S02"}},
	},
	{
		name: "a value holding {{ is not expanded again; a matrix task may be named",
		files: map[string]string{
			"p/S01.md": "---\nmatrix: {a: [\"{{b}}\"], b: [x]}\n---\n{{a}} {{b}}\n",
			"p/S02.md": "---\ndepends_on: [S01.1]\n---\ntrue\n",
		},
		ids:    []string{"S01.1", "S02"},
		bodies: map[string]string{"S01.1": "{{b}} x\n"},
		deps:   map[string][]string{"S02": {"S01.1"}},
	},
	{
		name: "matrix_file: key from the file's name, blank and # lines skipped",
		files: map[string]string{
			"p/S01.md":   "---\nmatrix_file: pkgs.txt\n---\ncheck {{pkgs}}\n",
			"p/pkgs.txt": "# packages\nnet/http\n\n  strings  \nos\n",
		},
		ids:    []string{"S01.1", "S01.2", "S01.3"},
		bodies: map[string]string{"S01.2": "check strings\n"},
	},
	{
		name: "matrix_file with its key named",
		files: map[string]string{
			"p/S01.md":            "---\nmatrix_file: {pkg: lists/my-pkgs.txt}\n---\ncheck {{pkg}}\n",
			"p/lists/my-pkgs.txt": "a\nb\n",
		},
		ids:    []string{"S01.1", "S01.2"},
		bodies: map[string]string{"S01.2": "check b\n"},
	},
	{
		name: "ten tasks sort by byte order, as SQL does",
		files: map[string]string{
			"p/S01.md": "---\nmatrix: {n: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]}\n---\n{{n}}\n",
		},
		ids: []string{"S01.1", "S01.10", "S01.2", "S01.3", "S01.4", "S01.5", "S01.6", "S01.7", "S01.8", "S01.9"},
	},
}

func TestMatrixExpansion(t *testing.T) {
	tests := matrixCases
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeSpecs(t, tc.files)
			p, err := Load(dir, "p")
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, task := range p.Tasks {
				ids = append(ids, task.ID)
			}
			if !reflect.DeepEqual(ids, tc.ids) {
				t.Fatalf("tasks = %v, want %v", ids, tc.ids)
			}
			for id, want := range tc.titles {
				if got := p.Task(id).Title; got != want {
					t.Errorf("%s title = %q, want %q", id, got, want)
				}
			}
			for id, want := range tc.bodies {
				if got := string(snapshot(t, p, p.Task(id))); got != want {
					t.Errorf("%s snapshot = %q, want %q", id, got, want)
				}
			}
			for id, want := range tc.deps {
				if got := p.Task(id).DependsOn; !reflect.DeepEqual(got, want) {
					t.Errorf("%s depends_on = %v, want %v", id, got, want)
				}
			}
			for _, task := range p.Tasks {
				if strings.Contains(task.ID, ".") && (task.Parent != "S01" || task.Vars == nil) {
					t.Errorf("%s: parent %q, vars %v", task.ID, task.Parent, task.Vars)
				}
				if !TaskIDPattern.MatchString(task.ID) {
					t.Errorf("%s does not match TaskIDPattern", task.ID)
				}
			}
		})
	}
}

func TestMatrixKeepsSettings(t *testing.T) {
	dir := writeSpecs(t, map[string]string{
		"p/S01.md": "---\nmatrix: {pkg: [a, b]}\ntool: shell\npriority: 2\ntimeout: 5m\ntags: [x]\nenv:\n  K: \"1\"\n  S: ${SECRET}\nretry_backoff: 2s\n---\n{{pkg}}\n",
	})
	p, err := Load(dir, "p")
	if err != nil {
		t.Fatal(err)
	}
	a, b := p.Task("S01.1"), p.Task("S01.2")
	for _, task := range []*Task{a, b} {
		if task.Tool != "shell" || task.Priority != 2 || task.Timeout != 5*time.Minute || !reflect.DeepEqual(task.Tags, []string{"x"}) ||
			!reflect.DeepEqual(task.Env, map[string]string{"K": "1", "S": "${SECRET}"}) || task.RetryBackoff != 2*time.Second {
			t.Errorf("%s = %+v", task.ID, task)
		}
	}
	if a.Hash == b.Hash {
		t.Error("two matrix tasks have the same spec hash")
	}
}

func TestFanOutErrors(t *testing.T) {
	big := make([]string, 101)
	for i := range big {
		big[i] = fmt.Sprint(i)
	}
	list := "[" + strings.Join(big, ", ") + "]"
	tests := []struct {
		name  string
		files map[string]string
		want  []wantErr
	}{
		{"empty list", map[string]string{"p/S01.md": "---\nmatrix: {pkg: []}\n---\n{{pkg}}\n"},
			[]wantErr{{"p/S01.md", 2, "matrix.pkg is an empty list"}}},
		{"not a list", map[string]string{"p/S01.md": "---\nmatrix:\n  pkg: strings\n---\n{{pkg}}\n"},
			[]wantErr{{"p/S01.md", 3, "matrix.pkg must be a list of values"}}},
		{"non-scalar value", map[string]string{"p/S01.md": "---\nmatrix:\n  pkg:\n    - a\n    - [b, c]\n---\n{{pkg}}\n"},
			[]wantErr{{"p/S01.md", 5, "matrix.pkg: each value must be a single value"}}},
		{"null value", map[string]string{"p/S01.md": "---\nmatrix: {pkg: [a, ~]}\n---\n{{pkg}}\n"},
			[]wantErr{{"p/S01.md", 2, "each value must be a single value"}}},
		{"bad key", map[string]string{"p/S01.md": "---\nmatrix: {my-pkg: [a]}\n---\nx\n"},
			[]wantErr{{"p/S01.md", 2, `matrix: "my-pkg" cannot be a key`}}},
		{"not a mapping", map[string]string{"p/S01.md": "---\nmatrix: [a, b]\n---\nx\n"},
			[]wantErr{{"p/S01.md", 2, "matrix must be a mapping"}}},
		{"unknown placeholder in the title and body", map[string]string{"p/S01.md": "---\nmatrix: {pkg: [a]}\n---\n# Test {{pgk}}\n\nrun {{pkg}} {{os}}\n"},
			[]wantErr{{"p/S01.md", 4, "unknown {{pgk}}: the matrix has {{pkg}}"}, {"p/S01.md", 6, "unknown {{os}}"}}},
		{"over 10,000 combinations", map[string]string{"p/S01.md": "---\nmatrix:\n  a: " + list + "\n  b: " + list + "\n---\n{{a}}{{b}}\n"},
			[]wantErr{{"p/S01.md", 3, "matrix makes 10201 tasks, more than 10000"}}},
		{"matrix and matrix_file", map[string]string{"p/S01.md": "---\nmatrix: {a: [x]}\nmatrix_file: {b: b.txt}\n---\n{{a}}{{b}}\n", "p/b.txt": "y\n"},
			[]wantErr{{"p/S01.md", 3, "matrix and matrix_file are both set"}}},
		{"matrix_file missing", map[string]string{"p/S01.md": "---\nmatrix_file: pkgs.txt\n---\n{{pkgs}}\n"},
			[]wantErr{{"p/S01.md", 2, `matrix_file "pkgs.txt" does not exist`}}},
		{"matrix_file empty", map[string]string{"p/S01.md": "---\nmatrix_file: pkgs.txt\n---\n{{pkgs}}\n", "p/pkgs.txt": "# none\n\n"},
			[]wantErr{{"p/S01.md", 2, "matrix_file pkgs.txt has no values"}}},
		{"matrix_file name is no key", map[string]string{"p/S01.md": "---\nmatrix_file: my-pkgs.txt\n---\nx\n", "p/my-pkgs.txt": "a\n"},
			[]wantErr{{"p/S01.md", 2, `the key would be "my-pkgs"`}}},
		{"matrix_file outside", map[string]string{"p/S01.md": "---\nmatrix_file: ../x.txt\n---\n{{x}}\n", "x.txt": "a\n"},
			[]wantErr{{"p/S01.md", 2, "outside the project directory"}}},
		{"dependency on a matrix task that is not made", map[string]string{"p/S01.md": "---\nmatrix: {a: [x, y]}\n---\n{{a}}\n", "p/S02.md": "---\ndepends_on: [S01.3]\n---\nx\n"},
			[]wantErr{{"p/S02.md", 2, "depends_on: unknown task S01.3; known tasks: S01, S02"}}},
		{"a matrix depending on itself", map[string]string{"p/S01.md": "---\nmatrix: {a: [x]}\ndepends_on: [S01]\n---\n{{a}}\n"},
			[]wantErr{{"p/S01.md", 3, "dependency cycle: S01.1 → S01.1"}}},
		{"a phase task", map[string]string{"p/S99.md": "---\nmatrix: {a: [x]}\n---\n{{a}}\n", "p/V01.md": "---\nnodes: all\n---\nx\n", "p/S01.md": "x\n"},
			[]wantErr{{"p/S99.md", 2, "S99 is a task of the integration phase"}, {"p/V01.md", 2, "V01 is a task of the integration phase"}}},
		{"nodes with node", map[string]string{"p/S01.md": "---\nnodes: all\nnode: a\n---\nx\n"},
			[]wantErr{{"p/S01.md", 2, "nodes: and node: are both set"}}},
		{"nodes bad word", map[string]string{"p/S01.md": "---\nnodes: some\n---\nx\n"},
			[]wantErr{{"p/S01.md", 2, `nodes: "some" is neither all nor {tags: [...]}`}}},
		{"nodes without tags", map[string]string{"p/S01.md": "---\nnodes: {}\n---\nx\n"},
			[]wantErr{{"p/S01.md", 2, "nodes: {} names no tags"}}},
		{"env", map[string]string{"p/S01.md": "---\nenv:\n  1X: a\n  DISPATCH_NODE: b\n  K: [a]\n  L: ${\n---\nx\n"},
			[]wantErr{{"p/S01.md", 3, `"1X" is not a valid environment variable name`}, {"p/S01.md", 4, "DISPATCH_NODE would be overwritten"},
				{"p/S01.md", 5, "env: K must be a plain value"}, {"p/S01.md", 6, "env: L: ${ at offset 0 is not closed"}}},
		{"retry_backoff", map[string]string{"p/S01.md": "---\nretry_backoff: soon\n---\nx\n", "p/S02.md": "---\nretry_backoff: 0s\n---\nx\n"},
			[]wantErr{{"p/S01.md", 2, "retry_backoff"}, {"p/S02.md", 2, "retry_backoff must be positive"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeSpecs(t, tc.files)
			_, err := Load(dir, "p")
			checkErrors(t, dir, err, tc.want)
		})
	}
}

func TestExpandBroadcast(t *testing.T) {
	dir := writeSpecs(t, map[string]string{
		"p/S01.md": "---\nnodes: all\n---\nuname\n",
		"p/S02.md": "---\nnodes: {tags: [gpu]}\nmatrix: {m: [a, b]}\ndepends_on: [S01]\n---\n{{m}}\n",
		"p/S03.md": "---\ndepends_on: [S01, S02]\n---\nx\n",
	})
	p, err := Load(dir, "p")
	if err != nil {
		t.Fatal(err)
	}
	nodes := []Node{{Name: "n1", Tags: []string{"gpu"}}, {Name: "n2"}}
	if err := p.ExpandBroadcast(nodes); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, task := range p.Tasks {
		ids = append(ids, task.ID)
	}
	want := []string{"S01@n1", "S01@n2", "S02.1@n1", "S02.2@n1", "S03"}
	if !reflect.DeepEqual(ids, want) {
		t.Fatalf("tasks = %v, want %v", ids, want)
	}
	if got := p.Task("S03").DependsOn; !reflect.DeepEqual(got, []string{"S01@n1", "S01@n2", "S02.1@n1", "S02.2@n1"}) {
		t.Errorf("S03 depends on %v", got)
	}
	if got := p.Task("S02.2@n1"); got.Node != "n1" || got.Parent != "S02" || !reflect.DeepEqual(got.DependsOn, []string{"S01@n1", "S01@n2"}) {
		t.Errorf("S02.2@n1 = node %q, parent %q, deps %v", got.Node, got.Parent, got.DependsOn)
	}
	if err := p.ExpandBroadcast(nodes); err != nil || len(p.Tasks) != 5 {
		t.Errorf("a second expansion: %v, %d tasks", err, len(p.Tasks))
	}

	p, err = Load(dir, "p")
	if err != nil {
		t.Fatal(err)
	}
	err = p.ExpandBroadcast([]Node{{Name: "n2"}})
	var errs Errors
	if !errors.As(err, &errs) || len(errs) != 1 || errs[0].Line != 2 || !strings.Contains(errs[0].Msg, "no node is eligible for S02 (needs the tags gpu)") {
		t.Fatalf("no eligible node: %v", err)
	}
}
