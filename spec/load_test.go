package spec

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"github.com/dispatch-tool/dispatch/internal/yamlval"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// wantErr is one expected problem; file is relative to the specs directory.
type wantErr struct {
	file string
	line int
	msg  string
}

// writeSpecs writes files (paths relative to the specs directory) into a
// fresh specs directory and returns it. Used for fixtures whose bytes git
// or some file systems would not keep (CRLF, BOM, invalid UTF-8, shell
// characters in file names).
func writeSpecs(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "specs")
	for name, content := range files {
		path := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// snapshot is task's snapshot, read as the store reads it.
func snapshot(t *testing.T, p *Project, task *Task) []byte {
	t.Helper()
	snap, err := p.Snapshot(task)
	if err != nil {
		t.Fatalf("Snapshot(%s): %v", task.ID, err)
	}
	return snap
}

func checkErrors(t *testing.T, specsDir string, err error, want []wantErr) {
	t.Helper()
	var errs Errors
	if !errors.As(err, &errs) {
		t.Fatalf("Load error = %v (%T), want Errors", err, err)
	}
	if len(errs) != len(want) {
		t.Fatalf("got %d errors, want %d:\n%v", len(errs), len(want), errs)
	}
	for i, w := range want {
		got := errs[i]
		if wantFile := filepath.Join(specsDir, filepath.FromSlash(w.file)); got.File != wantFile || got.Line != w.line || !strings.Contains(got.Msg, w.msg) {
			t.Errorf("error %d = %s:%d: %s\nwant %s:%d: ...%s...", i, got.File, got.Line, got.Msg, wantFile, w.line, w.msg)
		}
		if got.Fix == "" && w.msg != "invalid UTF-8" {
			t.Errorf("error %d (%s) has no fix", i, got.Msg)
		}
	}
}

func TestLoadErrors(t *testing.T) {
	tests := []struct {
		name    string
		fixture string            // testdata/<fixture>/specs
		files   map[string]string // written to a temporary specs directory instead
		want    []wantErr
	}{
		{
			name:    "duplicate IDs",
			fixture: "duplicate_ids",
			want: []wantErr{
				{"p/S01-b.md", 0, "duplicate task ID S01: S01-a.md and S01-b.md"},
				{"p/S01-b.md", 2, "priority must be a whole number from 1 to 9, not 0"},
			},
		},
		{
			name:    "cycle",
			fixture: "cycle",
			want: []wantErr{
				{"p/S01-one.md", 2, "dependency cycle: S01 → S02 → S01"},
				{"p/S03-self.md", 3, "dependency cycle: S03 → S03"},
			},
		},
		{
			name:    "unknown dependency",
			fixture: "unknown_dependency",
			want:    []wantErr{{"p/S01.md", 4, "depends_on: unknown task S07; known tasks: S01, S02"}},
		},
		{
			name:    "unknown context",
			fixture: "unknown_context",
			want: []wantErr{
				{"p/S01.md", 2, `unknown context "databse"; SHARED_CONTEXT.md has: Database, API`},
				{"p/S01.md", 5, `unknown context "nope"; SHARED_CONTEXT.md has: Database, API`},
			},
		},
		{
			name:    "context without SHARED_CONTEXT.md",
			fixture: "no_shared_context",
			want:    []wantErr{{"p/S01.md", 3, `unknown context "db": there is no SHARED_CONTEXT.md`}},
		},
		{
			name:    "front matter",
			fixture: "front_matter",
			want: []wantErr{
				{"p/S01-unknown-key.md", 3, `front matter: unknown key "prority"`},
				{"p/S02-priority-zero.md", 2, "priority must be a whole number from 1 to 9, not 0"},
				{"p/S03-priority-word.md", 2, `priority must be a whole number from 1 to 9, not "high"`},
				{"p/S04-priority-ten.md", 3, "priority must be a whole number from 1 to 9, not 10"},
				{"p/S05-bad-duration.md", 2, `timeout: "30 minutes" is not a duration`},
				{"p/S06-bad-type.md", 2, `type: unknown type "impl"`},
				{"p/S07-bad-deps.md", 2, `depends_on: "s01" is not a task ID`},
				{"p/S07-bad-deps.md", 2, `depends_on: "S01-x" is not a task ID`},
				{"p/S08-bad-node.md", 2, `node: invalid name "a/b": contains a slash`},
				{"p/S09-unclosed.md", 1, "front matter is not closed"},
				{"p/S10-yaml-syntax.md", 3, "invalid YAML in front matter: did not find expected ',' or ']'"},
				{"p/S11-wrong-types.md", 2, "tags must be a list of names, not a mapping"},
				{"p/S11-wrong-types.md", 3, "max_retries must be at least 0, not -1"},
				{"p/S11-wrong-types.md", 4, `model "--yolo" is not a model name`},
				{"p/S11-wrong-types.md", 5, "tool must be a string, not 5"},
				{"p/S11-wrong-types.md", 6, "context: each entry must be a name, not a list"},
				{"p/S12-duplicate-key.md", 3, `front matter: duplicate key "priority" (first on line 2)`},
				{"p/S13-bad-tag.md", 2, `tags: invalid tag "x;y": contains shell metacharacter ';'`},
				{"p/S14-not-a-mapping.md", 2, "front matter must be a mapping of keys to values, not a list"},
			},
		},
		{
			name:    "empty spec",
			fixture: "empty_spec",
			want: []wantErr{
				{"p/S01-front-matter-only.md", 0, "empty spec"},
				{"p/S02-context-only.md", 0, "empty spec"},
				{"p/S03-zero-bytes.md", 0, "empty spec"},
			},
		},
		{
			name:    "project.yaml",
			fixture: "project_yaml",
			want: []wantErr{
				{"p/project.yaml", 1, `integration must be true or false, not "yes"`},
				{"p/project.yaml", 2, `verification must be true or false, not "maybe"`},
				{"p/project.yaml", 3, "max_fix_rounds must be at least 0, not -1"},
				{"p/project.yaml", 4, `integration_spec "missing.md" does not exist`},
				{"p/project.yaml", 5, `tool: invalid name "a b": contains whitespace`},
				{"p/project.yaml", 6, `type: unknown type "impl"`},
				{"p/project.yaml", 7, "timeout must be a duration, not 10"},
				{"p/project.yaml", 8, `max_retries must be a whole number, at least 0, not "two"`},
				{"p/project.yaml", 9, `base "../outside" is outside the project directory`},
				{"p/project.yaml", 10, "setup is empty"},
				{"p/project.yaml", 11, `halt: unknown key "soon"`},
				{"p/project.yaml", 12, `project.yaml: unknown key "colour"`},
			},
		},
		{
			name:    "no task files",
			fixture: "no_tasks",
			want:    []wantErr{{"p", 0, "no task files"}},
		},
		{
			name: "bad task file names",
			files: map[string]string{
				"p/S01 copy.md":       "# x\n",
				"p/S02-a$b.md":        "# x\n",
				"p/S03-.md":           "# x\n",
				"p/S04x.md":           "# x\n",
				"p/S05-a..b.md":       "# x\n",
				"p/S06-`id`.md":       "# x\n",
				"p/S07-x;rm -rf ~.md": "# x\n",
				"p/S08-fine.md":       "# x\n",
				"p/S09-a|b.md":        "# x\n",
				"p/S10-<x>.md":        "# x\n",
				"p/S11-*.md":          "# x\n",
				"p/S12-what?.md":      "# x\n",
				"p/S13-it's.md":       "# x\n",
				`p/S14-"q".md`:        "# x\n",
				"p/S15-a&b.md":        "# x\n",
				"p/S16_x.md":          "# x\n",
			},
			want: []wantErr{
				{"p/S01 copy.md", 0, "invalid task file name: contains whitespace ' '"},
				{"p/S02-a$b.md", 0, "contains shell metacharacter '$'"},
				{"p/S03-.md", 0, "empty slug after '-'"},
				{"p/S04x.md", 0, `the ID S04 is followed by "x" instead of '-'`},
				{"p/S05-a..b.md", 0, `contains ".."`},
				{"p/S06-`id`.md", 0, "contains shell metacharacter '`'"},
				{"p/S07-x;rm -rf ~.md", 0, "contains shell metacharacter ';'"},
				{"p/S09-a|b.md", 0, "contains shell metacharacter '|'"},
				{"p/S10-<x>.md", 0, "contains shell metacharacter '<'"},
				{"p/S11-*.md", 0, "contains shell metacharacter '*'"},
				{"p/S12-what?.md", 0, "contains shell metacharacter '?'"},
				{"p/S13-it's.md", 0, `contains shell metacharacter '\''`},
				{`p/S14-"q".md`, 0, `contains shell metacharacter '"'`},
				{"p/S15-a&b.md", 0, "contains shell metacharacter '&'"},
				{"p/S16_x.md", 0, `the ID S16 is followed by "_" instead of '-'`},
			},
		},
		{
			name:  "invalid UTF-8",
			files: map[string]string{"p/S01.md": "# ok\nline two \xff\n", "p/S02.md": "\xc3\x28\n"},
			want: []wantErr{
				{"p/S01.md", 2, "invalid UTF-8"},
				{"p/S02.md", 1, "invalid UTF-8"},
			},
		},
		{
			// The broken SHARED_CONTEXT.md is reported once; specs that
			// select its sections are not blamed too.
			name: "invalid UTF-8 in SHARED_CONTEXT.md",
			files: map[string]string{
				"p/SHARED_CONTEXT.md": "## A\n\nok\n\xfe\n",
				"p/S01.md":            "# x\n@context: a\n",
			},
			want: []wantErr{{"p/SHARED_CONTEXT.md", 4, "invalid UTF-8"}},
		},
		{
			// A dependency on a task whose file is broken is not unknown.
			name: "dependency on a broken task",
			files: map[string]string{
				"p/S01.md": "---\n# never closed\n",
				"p/S02.md": "---\ndepends_on: [S01]\n---\n# x\n",
			},
			want: []wantErr{{"p/S01.md", 1, "front matter is not closed"}},
		},
		{
			name: "duplicate SHARED_CONTEXT section",
			files: map[string]string{
				"p/SHARED_CONTEXT.md": "## Data\nx\n\n##  data \ny\n",
				"p/S01.md":            "# x\n",
			},
			want: []wantErr{{"p/SHARED_CONTEXT.md", 4, `duplicate section "data" (first on line 1)`}},
		},
		{
			name: "SHARED_CONTEXT.md without sections",
			files: map[string]string{
				"p/SHARED_CONTEXT.md": "# Only a title\n",
				"p/S01.md":            "# x\n@context: a\n",
			},
			want: []wantErr{{"p/S01.md", 2, `unknown context "a": SHARED_CONTEXT.md has no "## " sections`}},
		},
		{
			name: "empty @context name",
			files: map[string]string{
				"p/SHARED_CONTEXT.md": "## A\nx\n",
				"p/S01.md":            "# x\n\n@context: a,,\n",
			},
			want: []wantErr{{"p/S01.md", 3, "@context: empty name"}},
		},
		{
			name:  "budget.max_attempt_usd is not positive",
			files: map[string]string{"p/S01.md": "# x\n", "p/project.yaml": "budget:\n  usd: 10\n  max_attempt_usd: 0\n"},
			want:  []wantErr{{"p/project.yaml", 3, "budget.max_attempt_usd must be positive, not 0"}},
		},
		{
			name:  "budget.max_attempt_usd is not a number",
			files: map[string]string{"p/S01.md": "# x\n", "p/project.yaml": "budget: {max_attempt_usd: lots}\n"},
			want:  []wantErr{{"p/project.yaml", 1, `budget.max_attempt_usd must be a number, not "lots"`}},
		},
		{
			name:  "base is absolute",
			files: map[string]string{"p/S01.md": "# x\n", "p/project.yaml": "base: /etc\n"},
			want:  []wantErr{{"p/project.yaml", 1, `base must be a relative path, not "/etc"`}},
		},
		{
			name:  "base is a file",
			files: map[string]string{"p/S01.md": "# x\n", "p/project.yaml": "\nbase: S01.md\n"},
			want:  []wantErr{{"p/project.yaml", 2, `base "S01.md" is not a directory`}},
		},
		{
			name:  "base does not exist",
			files: map[string]string{"p/S01.md": "# x\n", "p/project.yaml": "base: repo\n"},
			want:  []wantErr{{"p/project.yaml", 1, `base "repo" does not exist`}},
		},
		{
			name:  "base is the project",
			files: map[string]string{"p/S01.md": "# x\n", "p/project.yaml": "base: ./\n"},
			want:  []wantErr{{"p/project.yaml", 1, "not the project directory itself"}},
		},
		{
			name:  "base escapes through the middle",
			files: map[string]string{"p/S01.md": "# x\n", "p/project.yaml": "base: sub/../../q\n", "q/S01.md": "# x\n"},
			want:  []wantErr{{"p/project.yaml", 1, "is outside the project directory"}},
		},
		{
			name:  "integration_spec is a directory",
			files: map[string]string{"p/S01.md": "# x\n", "p/project.yaml": "integration_spec: sub\n", "p/sub/x.md": "x\n"},
			want:  []wantErr{{"p/project.yaml", 1, `integration_spec "sub" is not a regular file`}},
		},
		{
			name:  "project.yaml is not a mapping",
			files: map[string]string{"p/S01.md": "# x\n", "p/project.yaml": "- tool: codex\n"},
			want:  []wantErr{{"p/project.yaml", 1, "project.yaml must be a mapping of keys to values, not a list"}},
		},
		{
			name:  "project.yaml syntax",
			files: map[string]string{"p/S01.md": "# x\n", "p/project.yaml": "tool: codex\n\ttype: fix\n"},
			want:  []wantErr{{"p/project.yaml", 2, "invalid YAML in project.yaml"}},
		},
		{
			name:  "project.yaml unclosed flow mapping on line 1",
			files: map[string]string{"p/S01.md": "# x\n", "p/project.yaml": "halt: {fail: 1\n"},
			want:  []wantErr{{"p/project.yaml", 1, "invalid YAML in project.yaml: did not find expected ',' or '}'"}},
		},
		{
			name:  "project.yaml unclosed flow mapping on line 3",
			files: map[string]string{"p/S01.md": "# x\n", "p/project.yaml": "tool: codex\n\nhalt: {fail: 1\nbase: x\n"},
			want:  []wantErr{{"p/project.yaml", 3, "invalid YAML in project.yaml: did not find expected ',' or '}'"}},
		},
		{
			name:  "front matter bad indentation",
			files: map[string]string{"p/S01.md": "---\ntype: fix\n  priority: 2\n---\n# x\n"},
			want:  []wantErr{{"p/S01.md", 3, "invalid YAML in front matter: mapping values are not allowed"}},
		},
		{
			name: "limits",
			files: map[string]string{
				"p/project.yaml": "limits: {memory: 4096, pids: 0}\n",
				"p/S01-a.md":     "---\nlimits: {file_size: -1MiB, cpu: two}\n---\n# a\n",
				"p/S02-b.md":     "---\nlimits: {memroy: 1GiB}\n---\n# b\n",
				"p/S03-c.md":     "---\nlimits: 4GiB\n---\n# c\n",
			},
			want: []wantErr{
				{"p/S01-a.md", 2, `limits.file_size: "-1MiB" is not a size`},
				{"p/S01-a.md", 2, `limits.cpu must be a number, not "two"`},
				{"p/S02-b.md", 2, `limits: unknown key "memroy"`},
				{"p/S03-c.md", 2, `limits must be a mapping, not "4GiB"`},
				{"p/project.yaml", 1, "limits.memory: 4096 has no unit"},
				{"p/project.yaml", 1, "limits.pids must be a whole number from 1 to 4194304, not 0"},
			},
		},
		{
			name: "network",
			files: map[string]string{
				"p/project.yaml": "network: {allow: ['127.0.0.1:443']}\n",
				"p/S01-a.md":     "---\nnetwork: closed\n---\n# a\n",
				"p/S02-b.md":     "---\nsandbox: off\nnetwork: none\n---\n# b\n",
				"p/S03-c.md":     "---\nnetwork: {allow: []}\n---\n# c\n",
				"p/S04-d.md":     "---\nnetwork: {allow: [api.example.com]}\n---\n# d\n",
				"p/S05-e.md":     "---\nnetwork: {allow: ['a.com:443']}\nsandbox: off\n---\n# e\n",
			},
			want: []wantErr{
				{"p/S01-a.md", 2, `network must be open, none or {allow: [...]}, not "closed"`},
				{"p/S02-b.md", 3, "network: none needs the sandbox (it is what takes the network away), and sandbox is off"},
				{"p/S04-d.md", 2, `network.allow: "api.example.com" is not host:port`},
				{"p/S05-e.md", 2, "network: {allow: [...]} needs the sandbox (it is what takes the network away), and sandbox is off"},
			},
		},
		{
			name: "network none in project.yaml, sandbox off",
			files: map[string]string{
				"p/project.yaml": "network: none\nsandbox: off\n",
				"p/S01-a.md":     "# a\n",
			},
			want: []wantErr{{"p/project.yaml", 1, "network: none needs the sandbox"}},
		},
		{
			name:  "halt is not a mapping",
			files: map[string]string{"p/S01.md": "# x\n", "p/project.yaml": "halt: 3\n"},
			want:  []wantErr{{"p/project.yaml", 1, "halt must be a mapping, not 3"}},
		},
		{name: "gate without a command", files: map[string]string{"p/S01.md": "# x\n", "p/project.yaml": "gate: {timeout: 5m}\n"},
			want: []wantErr{{"p/project.yaml", 1, "gate has no command: give task:, project: or both"}}},
		{name: "gate empty", files: map[string]string{"p/S01.md": "# x\n", "p/project.yaml": "gate: ''\n"},
			want: []wantErr{{"p/project.yaml", 1, "gate is empty: a gate needs a command"}}},
		{name: "gate task empty", files: map[string]string{"p/S01.md": "# x\n", "p/project.yaml": "gate:\n  task: ' '\n"},
			want: []wantErr{{"p/project.yaml", 2, "gate.task is empty"}}},
		{name: "gate unknown key", files: map[string]string{"p/S01.md": "# x\n", "p/project.yaml": "gate:\n  project: make test\n  tasks: go vet\n"},
			want: []wantErr{{"p/project.yaml", 3, "tasks"}}},
		{name: "gate timeout", files: map[string]string{"p/S01.md": "# x\n", "p/project.yaml": "gate:\n  project: make test\n  timeout: soon\n"},
			want: []wantErr{{"p/project.yaml", 3, "gate.timeout"}}},
		{name: "gate timeout zero", files: map[string]string{"p/S01.md": "# x\n", "p/project.yaml": "gate: {project: make test, timeout: 0s}\n"},
			want: []wantErr{{"p/project.yaml", 1, "gate.timeout must be positive"}}},
		{name: "gate a list", files: map[string]string{"p/S01.md": "# x\n", "p/project.yaml": "gate: [make test]\n"},
			want: []wantErr{{"p/project.yaml", 1, "gate must be a command or a mapping"}}},
		{name: "gate baseline without project", files: map[string]string{"p/S01.md": "# x\n", "p/project.yaml": "gate: {task: make vet, baseline: true}\n"},
			want: []wantErr{{"p/project.yaml", 1, "gate.baseline needs gate.project"}}},
		{name: "gate baseline and a task G00", files: map[string]string{"p/S01.md": "# x\n", "p/G00-mine.md": "# mine\n",
			"p/project.yaml": "gate: {project: make test, baseline: true}\n"},
			want: []wantErr{{"p/G00-mine.md", 0, "G00 is the task gate.baseline adds"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join("testdata", tc.fixture, "specs")
			if tc.files != nil {
				dir = writeSpecs(t, tc.files)
			}
			p, err := Load(dir, "p")
			if p != nil {
				t.Errorf("Load returned a project along with errors")
			}
			checkErrors(t, dir, err, tc.want)
		})
	}
}

// TestLoadGate: gate: as a command is the project gate alone; as a
// mapping each command and the timeout as written, 10m by default.
func TestLoadGate(t *testing.T) {
	for _, tc := range []struct {
		yaml string
		want *Gate
	}{
		{"", nil},
		{"gate: make test\n", &Gate{Project: "make test", Timeout: DefaultGateTimeout}},
		{"gate: {task: go vet ./..., project: go test ./..., timeout: 90s, baseline: true}\n",
			&Gate{Task: "go vet ./...", Project: "go test ./...", Timeout: 90 * time.Second, Baseline: true}},
		{"gate:\n  task: make lint\n", &Gate{Task: "make lint", Timeout: DefaultGateTimeout}},
	} {
		dir := writeSpecs(t, map[string]string{"p/project.yaml": "tool: shell\n" + tc.yaml, "p/S01-a.md": "# a\n"})
		p, err := Load(dir, "p")
		if err != nil {
			t.Fatalf("%q: %v", tc.yaml, err)
		}
		if got := p.Config.Gate; !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%q: gate %+v, want %+v", tc.yaml, got, tc.want)
		}
		// gate.baseline adds G00, a shell task that changes nothing.
		baseline := p.Task(BaselineID)
		if want := tc.want != nil && tc.want.Baseline; (baseline != nil) != want || want && (baseline.Tool != "shell" || baseline.Priority != 1) {
			t.Errorf("%q: baseline task %+v, want one: %v", tc.yaml, baseline, want)
		}
	}
}

// TestLoadLimits: each limit of a task's front matter overrides the one
// of project.yaml; the others are the project's.
func TestLoadLimits(t *testing.T) {
	dir := writeSpecs(t, map[string]string{
		"p/project.yaml": "limits: {memory: 4GiB, pids: 512}\n",
		"p/S01-a.md":     "---\nlimits: {memory: 200MiB, file_size: 8GiB}\n---\n# a\n",
		"p/S02-b.md":     "# b\n",
	})
	p, err := Load(dir, "p")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]yamlval.Limits{
		"S01": {Memory: 200 << 20, Pids: 512, FileSize: 8 << 30},
		"S02": {Memory: 4 << 30, Pids: 512},
	}
	if len(p.Tasks) != len(want) {
		t.Fatalf("%d tasks, want %d", len(p.Tasks), len(want))
	}
	for _, task := range p.Tasks {
		if task.Limits != want[task.ID] {
			t.Errorf("%s: limits %+v, want %+v", task.ID, task.Limits, want[task.ID])
		}
	}
}

// TestLoadNetwork: a task's network is its front matter's, else
// project.yaml's, else "" (the node's); network: none over a project's
// sandbox: off is refused, sandbox: off over a project's network: none too.
func TestLoadNetwork(t *testing.T) {
	dir := writeSpecs(t, map[string]string{
		"p/project.yaml": "network: none\n",
		"p/S01-a.md":     "---\nnetwork: open\n---\n# a\n",
		"p/S02-b.md":     "# b\n",
	})
	p, err := Load(dir, "p")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"S01": "open", "S02": "none"}
	for _, task := range p.Tasks {
		if task.Network != want[task.ID] {
			t.Errorf("%s: network %q, want %q", task.ID, task.Network, want[task.ID])
		}
	}
	dir = writeSpecs(t, map[string]string{"p/S01-a.md": "# a\n"})
	if p, err := Load(dir, "p"); err != nil || p.Tasks[0].Network != "" {
		t.Errorf("no network anywhere: %v, %+v; want \"\" (the node's)", err, p)
	}
	dir = writeSpecs(t, map[string]string{
		"p/project.yaml": "network: none\n",
		"p/S01-a.md":     "---\nsandbox: off\n---\n# a\n",
	})
	_, err = Load(dir, "p")
	checkErrors(t, dir, err, []wantErr{{"p/S01-a.md", 2, "network: none needs the sandbox"}})
}

func TestLoadFixes(t *testing.T) {
	tests := []struct {
		name    string
		fixture string
		fix     string
	}{
		{"typo in a key", "front_matter", `did you mean "priority"?`},
		{"typo in a context", "unknown_context", `did you mean "Database"?`},
		{"abbreviated type", "project_yaml", `did you mean "implementation"?`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(filepath.Join("testdata", tc.fixture, "specs"), "p")
			if err == nil || !strings.Contains(err.Error(), tc.fix) {
				t.Errorf("Load error = %v\nwant a fix containing %q", err, tc.fix)
			}
		})
	}
}

func TestLoadValid(t *testing.T) {
	specs := filepath.Join("testdata", "valid", "specs")
	p, err := Load(specs, "shop")
	if err != nil {
		t.Fatal(err)
	}
	abs, _ := filepath.Abs(filepath.Join(specs, "shop"))
	if p.Name != "shop" || p.Dir != abs {
		t.Errorf("Name, Dir = %q, %q; want shop, %q", p.Name, p.Dir, abs)
	}
	c := p.Config
	if c.Integration == nil || !*c.Integration || c.Verification == nil || *c.Verification ||
		c.MaxFixRounds == nil || *c.MaxFixRounds != 3 || c.IntegrationSpec != "integration.md" ||
		c.Tool != "codex" || c.Type != "implementation" || c.Timeout != 45*time.Minute ||
		c.MaxRetries == nil || *c.MaxRetries != 1 || c.Base != "repo" ||
		c.Setup != "cp .env.example .env && npm ci" || c.Halt.Fail != 2 {
		t.Errorf("Config = %+v", c)
	}
	if !slices.Equal(p.Ignored, []string{"s05-lower.md"}) {
		t.Errorf("Ignored = %q, want [s05-lower.md]", p.Ignored)
	}

	type want struct {
		id, slug, title, typ, tool, model string
		priority                          int
		deps, tags, context               []string
		timeout                           time.Duration
		maxRetries                        int
		node                              string
	}
	tests := []want{
		{id: "S01", slug: "schema", title: "Create the database schema", typ: "implementation", tool: "claude", model: "sonnet",
			priority: 1, tags: []string{"glm", "fast"}, context: []string{"Database", "Conventions"},
			timeout: 30 * time.Minute, maxRetries: 3, node: "mac1"},
		{id: "S02", slug: "api", title: "Build the API", typ: "implementation", tool: "codex",
			priority: 5, deps: []string{"S01"}, context: []string{"API", "Database"},
			timeout: 45 * time.Minute, maxRetries: 1},
		{id: "S03", title: "S03", typ: "implementation", tool: "codex", priority: 5, timeout: 45 * time.Minute, maxRetries: 1},
		{id: "S04", slug: "add-login", title: "add login", typ: "test_debug", tool: "codex",
			priority: 9, deps: []string{"S01", "S02"}, tags: []string{"glm"}, timeout: 45 * time.Minute, maxRetries: 1},
	}
	if len(p.Tasks) != len(tests) {
		t.Fatalf("got %d tasks, want %d", len(p.Tasks), len(tests))
	}
	for i, w := range tests {
		t.Run(w.id, func(t *testing.T) {
			task := p.Tasks[i]
			if p.Task(w.id) != task {
				t.Errorf("Task(%q) is not Tasks[%d]", w.id, i)
			}
			got := want{id: task.ID, slug: task.Slug, title: task.Title, typ: task.Type, tool: task.Tool, model: task.Model,
				priority: task.Priority, deps: task.DependsOn, tags: task.Tags, context: task.Context,
				timeout: task.Timeout, maxRetries: -1, node: task.Node}
			if task.MaxRetries != nil {
				got.maxRetries = *task.MaxRetries
			}
			if got.id != w.id || got.slug != w.slug || got.title != w.title || got.typ != w.typ || got.tool != w.tool ||
				got.model != w.model || got.priority != w.priority || !slices.Equal(got.deps, w.deps) ||
				!slices.Equal(got.tags, w.tags) || !slices.Equal(got.context, w.context) ||
				got.timeout != w.timeout || got.maxRetries != w.maxRetries || got.node != w.node {
				t.Errorf("task = %+v\nwant   %+v", got, w)
			}
			if wantFile := filepath.Join(abs, filepath.Base(task.File)); task.File != wantFile || !strings.HasPrefix(filepath.Base(task.File), w.id) {
				t.Errorf("File = %q", task.File)
			}
			golden, err := os.ReadFile(filepath.Join("testdata", "valid", "want", w.id+".snapshot"))
			if err != nil {
				t.Fatal(err)
			}
			if snap := snapshot(t, p, task); string(snap) != string(golden) {
				t.Errorf("Snapshot =\n%s\nwant\n%s", snap, golden)
			}
			sum := sha256.Sum256(golden)
			if task.Hash != hex.EncodeToString(sum[:]) {
				t.Errorf("Hash = %s, want sha256 of the snapshot", task.Hash)
			}
		})
	}
	if p.Task("S99") != nil {
		t.Errorf("Task(S99) != nil")
	}
}

func TestLoadDefaults(t *testing.T) {
	// Without project.yaml the built-in defaults apply.
	p, err := Load(filepath.Join("testdata", "valid", "specs"), "blog")
	if err != nil {
		t.Fatal(err)
	}
	task := p.Task("S01")
	if task == nil || task.Type != DefaultType || task.Tool != "" || task.Priority != DefaultPriority ||
		task.Timeout != 0 || task.MaxRetries != nil || task.Title != "Hello" || task.Slug != "" {
		t.Errorf("task = %+v", task)
	}
	if p.Config.Integration != nil || p.Config.Base != "" || p.Config.Halt.Fail != 0 {
		t.Errorf("Config = %+v, want zero", p.Config)
	}
}

func TestSnapshotNormalisation(t *testing.T) {
	const shared = "## Rules\r\n\r\nBe brief.\r\n\r\n\r\n## Other\r\nx\r\n"
	const want = "# Title\n\nDo the thing.  \n  indented\n\n## Rules\n\nBe brief.\n"
	tests := []struct {
		name string
		spec string
	}{
		{"LF", "# Title\n\nDo the thing.  \n  indented\n@context: rules\n"},
		{"CRLF", "# Title\r\n\r\nDo the thing.  \r\n  indented\r\n@context: rules\r\n"},
		{"BOM and CRLF", "\xEF\xBB\xBF# Title\r\n\r\nDo the thing.  \r\n  indented\r\n@context: rules\r\n"},
		{"lone CR", "# Title\r\rDo the thing.  \r  indented\r@context: rules"},
		{"no final newline", "# Title\n\nDo the thing.  \n  indented\n@context: rules"},
		{"blank lines around", "\n\n  \n# Title\n\nDo the thing.  \n  indented\n\n\n@context: rules\n\n\t\n"},
		{"front matter", "---\r\npriority: 2\r\ncontext: [Rules]\r\n---\r\n\r\n# Title\r\n\r\nDo the thing.  \r\n  indented\r\n"},
		{"BOM and front matter", "\xEF\xBB\xBF---\npriority: 2\n---\n# Title\n\nDo the thing.  \n  indented\n@context: RULES , rules\n"},
	}
	wantSum := sha256.Sum256([]byte(want))
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeSpecs(t, map[string]string{"p/SHARED_CONTEXT.md": shared, "p/S01-x.md": tc.spec})
			p, err := Load(dir, "p")
			if err != nil {
				t.Fatal(err)
			}
			task := p.Task("S01")
			if snap := snapshot(t, p, task); string(snap) != want {
				t.Errorf("Snapshot = %q\nwant       %q", snap, want)
			}
			if task.Hash != hex.EncodeToString(wantSum[:]) {
				t.Errorf("Hash = %s, want %x", task.Hash, wantSum)
			}
			if task.Title != "Title" || !slices.Equal(task.Context, []string{"Rules"}) {
				t.Errorf("Title, Context = %q, %q", task.Title, task.Context)
			}
		})
	}
	t.Run("content change changes the hash", func(t *testing.T) {
		dir := writeSpecs(t, map[string]string{"p/SHARED_CONTEXT.md": shared, "p/S01-x.md": "# Title\n\nDo the other thing.\n@context: rules\n"})
		p, err := Load(dir, "p")
		if err != nil {
			t.Fatal(err)
		}
		if p.Task("S01").Hash == hex.EncodeToString(wantSum[:]) {
			t.Error("different content, same hash")
		}
	})
}

func TestLoadProjectName(t *testing.T) {
	// A directory with each bad name exists and holds a task, so only the
	// name check can stop Load from reading it.
	names := []struct{ name, problem string }{
		{"a/b", "contains a slash"},
		{"..", `contains ".."`},
		{"../valid", "contains a slash"},
		{"x;rm -rf", "contains shell metacharacter ';'"},
		{"$(id)", "contains shell metacharacter '$'"},
		{"", "empty"},
		{".hidden", "starts with a dot"},
	}
	files := map[string]string{}
	for _, n := range names {
		if n.name != "" && !strings.Contains(n.name, "..") {
			files[n.name+"/S01.md"] = "# x\n"
		}
	}
	specs := writeSpecs(t, files)
	for _, n := range names {
		t.Run(n.name, func(t *testing.T) {
			p, err := Load(specs, n.name)
			var ne *NameError
			if p != nil || !errors.As(err, &ne) {
				t.Fatalf("Load = %v, %v; want a *NameError", p, err)
			}
			if ne.Name != n.name || !strings.Contains(err.Error(), n.problem) || !strings.HasPrefix(err.Error(), "project name: ") {
				t.Errorf("error = %q, want name %q and %q", err, n.name, n.problem)
			}
		})
	}
}

func TestUnknownProject(t *testing.T) {
	valid := filepath.Join("testdata", "valid", "specs")
	tests := []struct {
		name    string
		specs   string
		project string
		known   []string
		msg     string
	}{
		{"lists the known ones", valid, "nope", []string{"blog", "shop"}, `unknown project "nope" in ` + valid + "; known projects: blog, shop"},
		{"suggests a near name", valid, "shp", []string{"blog", "shop"}, `(did you mean "shop"?)`},
		{"case must match", valid, "Shop", []string{"blog", "shop"}, "known projects: blog, shop"},
		{"a file is not a project", valid, "notes.txt", []string{"blog", "shop"}, "known projects: blog, shop"},
		{"no projects", t.TempDir(), "demo", nil, "has no projects; create one by writing "},
		{"no specs directory", filepath.Join(t.TempDir(), "specs"), "demo", nil, filepath.Join("specs", "demo", "S01-<title>.md")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(tc.specs, tc.project)
			var ue *UnknownProjectError
			if !errors.As(err, &ue) {
				t.Fatalf("Load error = %v (%T), want *UnknownProjectError", err, err)
			}
			if ue.Name != tc.project || ue.SpecsDir != tc.specs || !slices.Equal(ue.Known, tc.known) || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("error = %+v: %q\nwant known %q and %q", ue, err, tc.known, tc.msg)
			}
		})
	}
}

func TestProjects(t *testing.T) {
	tests := []struct {
		name  string
		specs string
		want  []string
	}{
		{"valid", filepath.Join("testdata", "valid", "specs"), []string{"blog", "shop"}},
		{"only bad task names", writeSpecs(t, map[string]string{"p/S01 x.md": "# x\n", "q/S01.md": "# x\n"}), []string{"q"}},
		{"bad directory name", writeSpecs(t, map[string]string{"a b/S01.md": "# x\n", ".git/S01.md": "# x\n", "ok/S1.md": "x\n"}), []string{"ok"}},
		{"missing", filepath.Join(t.TempDir(), "nope"), nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Projects(tc.specs)
			if err != nil || !slices.Equal(got, tc.want) {
				t.Errorf("Projects = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestErrorFormat(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"file and line", &Error{File: "specs/p/S01.md", Line: 3, Msg: "bad", Fix: "do better"}, "specs/p/S01.md:3: bad\n  fix: do better"},
		{"no line", &Error{File: "specs/p/S01.md", Msg: "bad"}, "specs/p/S01.md: bad"},
		{"no file", &Error{Msg: "bad"}, "bad"},
		{"list", Errors{{File: "a", Line: 1, Msg: "x", Fix: "y"}, {File: "b", Msg: "z"}}, "a:1: x\n  fix: y\nb: z"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.err.Error(); got != tc.want {
				t.Errorf("Error() = %q, want %q", got, tc.want)
			}
		})
	}
	var e *Error
	if !errors.As(Errors{{Msg: "x"}}, &e) || e.Msg != "x" {
		t.Errorf("errors.As does not reach the single errors")
	}
}
