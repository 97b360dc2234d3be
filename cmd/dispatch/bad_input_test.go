package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBadInput checks SPEC §10 for everything that needs no SSH and no
// database: exit 2, a message on stderr naming the file, the line and the fix,
// nothing on stdout, and a home (and $HOME) left byte for byte as it was.
func TestBadInput(t *testing.T) {
	tests := []struct {
		name    string
		fixture string            // under testdata/
		files   map[string]string // written into the home after copying the fixture
		cmds    []string          // each replaces {cmd} in args; nil runs args once
		args    []string          // after --home <home>
		want    []string          // substrings of stderr; {home} is the home, {cmd} the command
	}{
		{
			name:    "nodes.yaml missing",
			fixture: "bad/nodes-missing",
			cmds:    []string{"validate", "start"},
			args:    []string{"{cmd}", "p"},
			want:    []string{"{home}/nodes.yaml", "does not exist", "fix:", "dispatch init", "--config"},
		},
		{
			name:    "nodes.yaml tab in indentation",
			fixture: "bad/nodes-syntax-tab",
			cmds:    []string{"validate", "start"},
			args:    []string{"{cmd}", "p"},
			want:    []string{"{home}/nodes.yaml:4:", "invalid YAML", "tab", "fix:", "spaces, not tabs"},
		},
		{
			name:    "nodes.yaml mapping value in a scalar",
			fixture: "bad/nodes-syntax-colon",
			cmds:    []string{"validate", "start"},
			args:    []string{"{cmd}", "p"},
			want:    []string{"{home}/nodes.yaml:4:", "invalid YAML", "fix:", "quoting"},
		},
		{
			// yaml.v3 names the line of the enclosing "- name:" (4);
			// the line to fix is the one indented one space short.
			name:    "nodes.yaml mis-indented key",
			fixture: "bad/valid",
			files: map[string]string{"nodes.yaml": "controller:\n  poll_interval: 1s\nnodes:\n" +
				"  - name: local\n    ssh: null\n    slots: 1\n    work_dir: ~/dispatch-work\n" +
				"  - name: b\n   slots: 2\n    ssh: null\n"},
			cmds: []string{"validate", "start"},
			args: []string{"{cmd}", "p"},
			want: []string{"{home}/nodes.yaml:9:", "invalid YAML", "fix:", "indentation"},
		},
		{
			name:    "nodes.yaml unknown key",
			fixture: "bad/nodes-unknown-key",
			cmds:    []string{"validate", "start"},
			args:    []string{"{cmd}", "p"},
			want:    []string{"{home}/nodes.yaml:4:", `unknown key "slotz"`, "fix:", `did you mean "slots"?`},
		},
		{
			name:    "nodes.yaml slots 0",
			fixture: "bad/nodes-slots-zero",
			cmds:    []string{"validate", "start"},
			args:    []string{"{cmd}", "p"},
			want:    []string{"{home}/nodes.yaml:4:", `node "local"`, "slots must be at least 1", "fix:", "1 or more"},
		},
		{
			name:    "nodes.yaml gcloud compute ssh",
			fixture: "bad/nodes-gcloud",
			cmds:    []string{"validate", "start"},
			args:    []string{"{cmd}", "p"},
			want:    []string{"{home}/nodes.yaml:3:", `node "cloud"`, "gcloud", "fix:", "gcloud compute config-ssh", "Host alias"},
		},
		{
			name:    "unknown project lists the known ones",
			fixture: "bad/two-projects",
			cmds:    []string{"validate", "start"},
			args:    []string{"{cmd}", "gamma"},
			want:    []string{`unknown project "gamma"`, "{home}/specs", "known projects: alpha, beta"},
		},
		{
			name:    "unknown project without any project",
			fixture: "bad/no-projects",
			cmds:    []string{"validate", "start"},
			args:    []string{"{cmd}", "p"},
			want:    []string{`unknown project "p"`, "{home}/specs has no projects", "{home}/specs/p/S01-<title>.md"},
		},
		{
			name:    "--config names a missing file",
			fixture: "bad/valid",
			cmds:    []string{"validate", "start"},
			args:    []string{"--config", "{home}/other.yaml", "{cmd}", "p"},
			want:    []string{"{home}/other.yaml", "does not exist", "fix:"},
		},
		{
			name:    "duplicate task IDs",
			fixture: "bad/duplicate-id",
			cmds:    []string{"validate", "start"},
			args:    []string{"{cmd}", "p"},
			want:    []string{"{home}/specs/p/S01-b.md", "duplicate task ID S01", "S01-a.md and S01-b.md", "fix:", "rename S01-b.md"},
		},
		{
			name:    "dependency cycle",
			fixture: "bad/cycle",
			cmds:    []string{"validate", "start"},
			args:    []string{"{cmd}", "p"},
			want:    []string{"{home}/specs/p/S01-a.md:2:", "dependency cycle: S01 → S02 → S03 → S01", "fix:", "remove one of these depends_on"},
		},
		{
			name:    "unknown dependency",
			fixture: "bad/unknown-dependency",
			cmds:    []string{"validate", "start"},
			args:    []string{"{cmd}", "p"},
			want:    []string{"{home}/specs/p/S02-b.md:3:", "unknown task S07", "known tasks: S01, S02", "fix:", "add a spec file for S07"},
		},
		{
			name:    "files: outside the spec directory",
			fixture: "bad/valid",
			files:   map[string]string{"specs/p/S01-a.md": "---\nfiles:\n  - ../../nodes.yaml\n---\n# A\n"},
			cmds:    []string{"validate", "start"},
			args:    []string{"{cmd}", "p"},
			want:    []string{"{home}/specs/p/S01-a.md:3:", `files "../../nodes.yaml" is outside the project directory`, "fix:", "relative to it"},
		},
		{
			name:    "files: a missing file",
			fixture: "bad/valid",
			files:   map[string]string{"specs/p/S01-a.md": "---\nfiles: [data/in.csv]\n---\n# A\n"},
			cmds:    []string{"validate", "start"},
			args:    []string{"{cmd}", "p"},
			want:    []string{"{home}/specs/p/S01-a.md:2:", `files "data/in.csv" does not exist`, "fix:"},
		},
		{
			name:    "unknown @context name",
			fixture: "bad/unknown-context-line",
			cmds:    []string{"validate", "start"},
			args:    []string{"{cmd}", "p"},
			want:    []string{"{home}/specs/p/S01-a.md:3:", `unknown context "databse"`, "Database, Conventions", "fix:", `did you mean "Database"?`},
		},
		{
			name:    "context without SHARED_CONTEXT.md",
			fixture: "bad/unknown-context-no-shared",
			cmds:    []string{"validate", "start"},
			args:    []string{"{cmd}", "p"},
			want:    []string{"{home}/specs/p/S01-a.md:2:", `unknown context "conventions"`, "no SHARED_CONTEXT.md", "fix:", `"## conventions" section`},
		},
		{
			name:    "invalid UTF-8 in a spec",
			fixture: "bad/valid",
			files:   map[string]string{"specs/p/S03-latin1.md": "# Caf\xe9\n\necho caf\xe9 \xff\n"},
			cmds:    []string{"validate", "start"},
			args:    []string{"{cmd}", "p"},
			want:    []string{"{home}/specs/p/S03-latin1.md:1:", "invalid UTF-8", "fix:", "save the file as UTF-8"},
		},
		{
			name:    "spec with only front matter",
			fixture: "bad/empty-spec",
			cmds:    []string{"validate", "start"},
			args:    []string{"{cmd}", "p"},
			want:    []string{"{home}/specs/p/S02-empty.md", "empty spec", "fix:", "write the task's instructions"},
		},
		{
			name:    "empty spec file",
			fixture: "bad/empty-file",
			cmds:    []string{"validate", "start"},
			args:    []string{"{cmd}", "p"},
			want:    []string{"{home}/specs/p/S01-empty.md", "empty spec", "fix:"},
		},
		{
			name:    "project name with slash",
			fixture: "bad/valid",
			cmds:    []string{"validate", "start"},
			args:    []string{"{cmd}", "specs/p"},
			want:    []string{`invalid name "specs/p"`, "slash", "Try: dispatch {cmd} <project>"},
		},
		{
			name:    "project name with dot-dot",
			fixture: "bad/valid",
			cmds:    []string{"validate", "start"},
			args:    []string{"{cmd}", ".."},
			want:    []string{`invalid name ".."`, `contains ".."`, "Try: dispatch {cmd} <project>"},
		},
		{
			name:    "project name escaping the specs directory",
			fixture: "bad/valid",
			cmds:    []string{"validate", "start"},
			args:    []string{"{cmd}", "../specs/p"},
			want:    []string{`invalid name "../specs/p"`, "Try: dispatch {cmd} <project>"},
		},
		{
			name:    "project name with semicolon",
			fixture: "bad/valid",
			cmds:    []string{"validate", "start"},
			args:    []string{"{cmd}", "x;rm"},
			want:    []string{`invalid name "x;rm"`, "shell metacharacter ';'", "Try: dispatch {cmd} <project>"},
		},
		{
			name:    "project name with command substitution",
			fixture: "bad/valid",
			cmds:    []string{"validate", "start"},
			args:    []string{"{cmd}", "$(id)"},
			want:    []string{`invalid name "$(id)"`, "shell metacharacter '$'", "Try: dispatch {cmd} <project>"},
		},
		{
			// A project directory with a bad name is never built into a path.
			name:    "project directory with semicolon",
			fixture: "bad/valid",
			files:   map[string]string{"specs/x;rm/S01-a.md": "# A\necho a\n"},
			cmds:    []string{"validate", "start"},
			args:    []string{"{cmd}", "x;rm"},
			want:    []string{`invalid name "x;rm"`, "shell metacharacter ';'"},
		},
		{
			name:    "task file name with semicolon",
			fixture: "bad/valid",
			files:   map[string]string{"specs/p/S03-x;rm.md": "# X\necho x\n"},
			cmds:    []string{"validate", "start"},
			args:    []string{"{cmd}", "p"},
			want:    []string{"{home}/specs/p/S03-x;rm.md", "invalid task file name", "shell metacharacter ';'", "fix:", "rename it"},
		},
		{
			name:    "task file name with command substitution",
			fixture: "bad/valid",
			files:   map[string]string{"specs/p/S03-$(id).md": "# X\necho x\n"},
			cmds:    []string{"validate", "start"},
			args:    []string{"{cmd}", "p"},
			want:    []string{"{home}/specs/p/S03-$(id).md", "invalid task file name", "shell metacharacter '$'", "fix:", "rename it"},
		},
		{
			name:    "task file name with dot-dot",
			fixture: "bad/valid",
			files:   map[string]string{"specs/p/S03-a..b.md": "# X\necho x\n"},
			cmds:    []string{"validate", "start"},
			args:    []string{"{cmd}", "p"},
			want:    []string{"{home}/specs/p/S03-a..b.md", "invalid task file name", `contains ".."`, "fix:", "rename it"},
		},
		{
			name:    "unknown project.yaml key",
			fixture: "bad/project-yaml-key",
			cmds:    []string{"validate", "start"},
			args:    []string{"{cmd}", "p"},
			want:    []string{"{home}/specs/p/project.yaml:2:", `unknown key "integraton"`, "fix:", `did you mean "integration"?`},
		},
		{
			name:    "nodes.yaml preemption priority_gap out of range",
			fixture: "bad/valid",
			files:   map[string]string{"nodes.yaml": "controller:\n  preemption:\n    priority_gap: 9\n    grace: 30s\nnodes:\n  - name: local\n    ssh: null\n    work_dir: ~/w\n"},
			cmds:    []string{"validate", "start"},
			args:    []string{"{cmd}", "p"},
			want:    []string{"{home}/nodes.yaml:3:", "controller.preemption: priority_gap must be a whole number from 1 to 8, not 9", "fix:"},
		},
		{
			name:    "nodes.yaml preemption grace without a unit",
			fixture: "bad/valid",
			files:   map[string]string{"nodes.yaml": "controller:\n  preemption: {priority_gap: 3, grace: 30}\nnodes:\n  - name: local\n    ssh: null\n    work_dir: ~/w\n"},
			cmds:    []string{"validate", "start"},
			args:    []string{"{cmd}", "p"},
			want:    []string{"{home}/nodes.yaml:2:", "grace must be a duration, not 30", "fix:", "grace: 30s"},
		},
		{
			name:    "preemptible not a boolean",
			fixture: "bad/valid",
			files:   map[string]string{"specs/p/S01-a.md": "---\npreemptible: sometimes\n---\n# A\n"},
			cmds:    []string{"validate", "start"},
			args:    []string{"{cmd}", "p"},
			want:    []string{"{home}/specs/p/S01-a.md:2:", "preemptible must be true or false", "fix:"},
		},
		{
			name:    "nodes.yaml negative retention",
			fixture: "bad/valid",
			files:   map[string]string{"nodes.yaml": "controller:\n  retention: {runs: -1}\nnodes:\n  - name: local\n    ssh: null\n    work_dir: ~/w\n"},
			cmds:    []string{"validate", "start", "prune"},
			args:    []string{"{cmd}", "p"},
			want:    []string{"{home}/nodes.yaml:2:", "controller: retention.runs must be at least 0, not -1", "fix:"},
		},
		{
			name:    "nodes.yaml unknown retention key",
			fixture: "bad/valid",
			files:   map[string]string{"nodes.yaml": "controller:\n  retention:\n    run: 5\nnodes:\n  - name: local\n    ssh: null\n    work_dir: ~/w\n"},
			cmds:    []string{"validate", "start", "prune"},
			args:    []string{"{cmd}", "p"},
			want:    []string{"{home}/nodes.yaml:3:", `unknown key "run"`, "fix:", `did you mean "runs"?`},
		},
		{
			name:    "nodes.yaml log_max_size that does not parse",
			fixture: "bad/valid",
			files:   map[string]string{"nodes.yaml": "controller:\n  poll_interval: 1s\n  log_max_size: lots\nnodes:\n  - name: local\n    ssh: null\n    work_dir: ~/w\n"},
			cmds:    []string{"validate", "start", "prune"},
			args:    []string{"{cmd}", "p"},
			want:    []string{"{home}/nodes.yaml:3:", "controller: log_max_size", "is not a size", "fix:", "512MiB"},
		},
		{
			name:    "project.yaml negative retention days",
			fixture: "bad/valid",
			files:   map[string]string{"specs/p/project.yaml": "tool: shell\nretention: {runs: 3, days: -2}\n"},
			cmds:    []string{"validate", "start"},
			args:    []string{"{cmd}", "p"},
			want:    []string{"{home}/specs/p/project.yaml:2:", "retention.days must be at least 0, not -2", "fix:"},
		},
		{
			name:    "project.yaml retention not a mapping",
			fixture: "bad/valid",
			files:   map[string]string{"specs/p/project.yaml": "tool: shell\nretention: 5\n"},
			cmds:    []string{"validate", "start"},
			args:    []string{"{cmd}", "p"},
			want:    []string{"{home}/specs/p/project.yaml:2:", "retention must be a mapping", "fix:", "retention: {runs: 20, days: 30}"},
		},
		{
			name:    "missing project argument",
			fixture: "bad/valid",
			cmds:    []string{"validate", "start", "report"},
			args:    []string{"{cmd}"},
			want:    []string{"missing project name", "Try: dispatch {cmd} <project>"},
		},
		{
			name:    "extra arguments",
			fixture: "bad/valid",
			cmds:    []string{"validate", "start", "report"},
			args:    []string{"{cmd}", "p", "q"},
			want:    []string{"unexpected arguments: q", "Try: dispatch {cmd} <project>"},
		},
		{
			name:    "unknown flag before the project",
			fixture: "bad/valid",
			cmds:    []string{"validate", "start", "status", "report"},
			args:    []string{"{cmd}", "--bogus", "p"},
			want:    []string{"flag provided but not defined: -bogus", "Try: dispatch {cmd} --help"},
		},
		{
			name:    "unknown flag after the project",
			fixture: "bad/valid",
			cmds:    []string{"validate", "start", "status", "report"},
			args:    []string{"{cmd}", "p", "--bogus"},
			want:    []string{"flag provided but not defined: -bogus", "Try: dispatch {cmd} --help"},
		},
		{
			name:    "unknown global flag",
			fixture: "bad/valid",
			args:    []string{"--bogus", "validate", "p"},
			want:    []string{"flag provided but not defined: -bogus", "Try: dispatch --help"},
		},
		{
			name:    "unknown command",
			fixture: "bad/valid",
			args:    []string{"bogus", "p"},
			want:    []string{`unknown command "bogus"`, "Try: dispatch --help"},
		},
		{
			name:    "negative poll",
			fixture: "bad/valid",
			args:    []string{"start", "--poll", "-1s", "p"},
			want:    []string{"--poll must be positive", "Try: dispatch start --poll 5s p"},
		},
		{
			name:    "negative poll after the project",
			fixture: "bad/valid",
			args:    []string{"start", "p", "--poll", "-1s"},
			want:    []string{"--poll must be positive", "Try: dispatch start --poll 5s p"},
		},
		{
			name:    "poll not a duration",
			fixture: "bad/valid",
			args:    []string{"start", "p", "--poll", "soon"},
			want:    []string{"soon", "poll", "Try: dispatch start --help"},
		},
		{
			name:    "unknown node in --nodes",
			fixture: "bad/valid",
			args:    []string{"start", "p", "--nodes", "nosuch"},
			want:    []string{`no node "nosuch"`, "{home}/nodes.yaml", "Try: --nodes local"},
		},
		{
			name:    "report format xml",
			fixture: "bad/valid",
			args:    []string{"report", "p", "--format", "xml"},
			want:    []string{`unknown format "xml"`, "md or json", "Try: dispatch report p --format json"},
		},
		{
			name:    "unknown log format",
			fixture: "bad/valid",
			cmds:    []string{"validate", "start"},
			args:    []string{"--log-format", "xml", "{cmd}", "p"},
			want:    []string{`unknown log format "xml"`, "Try: --log-format json"},
		},
		{
			name:    "status before any start",
			fixture: "bad/valid",
			cmds:    []string{"status", "report"},
			args:    []string{"{cmd}", "p"},
			want:    []string{"no project has been started in {home}", "Try: dispatch start <project>"},
		},
	}
	for _, tc := range tests {
		cmds := tc.cmds
		if cmds == nil {
			cmds = []string{""}
		}
		for _, cmd := range cmds {
			name := tc.name
			if cmd != "" {
				name += "/" + cmd
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				home := copyFixture(t, tc.fixture)
				for rel, content := range tc.files {
					writeFile(t, filepath.Join(home, rel), content)
				}
				// An own HOME shows that nothing is written outside the
				// dispatch home either (the fixtures' work_dir is under it).
				userHome := t.TempDir()
				expand := strings.NewReplacer("{home}", home, "{cmd}", cmd).Replace
				args := []string{"--home", home}
				for _, a := range tc.args {
					args = append(args, expand(a))
				}
				before, beforeUser := tree(t, home), tree(t, userHome)

				r := runDispatch(t, []string{"HOME=" + userHome}, args...)

				if r.code != 2 {
					t.Errorf("dispatch %s: exit %d, want 2\n%s", strings.Join(args, " "), r.code, r)
				}
				for _, w := range tc.want {
					if w = expand(w); !strings.Contains(r.stderr, w) {
						t.Errorf("stderr does not contain %q\n%s", w, r)
					}
				}
				if !strings.HasPrefix(r.stderr, "dispatch: ") {
					t.Errorf("stderr does not start with \"dispatch: \"\n%s", r)
				}
				if strings.Contains(r.stderr, "\x1b[") || strings.Contains(r.stderr, "Incorrect Usage") {
					t.Errorf("stderr is not one plain message\n%s", r)
				}
				if r.stdout != "" {
					t.Errorf("stdout is not empty\n%s", r)
				}
				assertTreeUnchanged(t, home, before)
				assertTreeUnchanged(t, userHome, beforeUser)
				for _, f := range []string{"dispatch.db", "dispatch.lock", "runs"} {
					if _, err := os.Lstat(filepath.Join(home, f)); err == nil {
						t.Errorf("%s was created", f)
					}
				}
			})
		}
	}
}

// TestValidateFlagsMistypedAlias: an ssh: alias that no Host of
// ~/.ssh/config names (and no user@, no domain, not in /etc/hosts) is
// flagged by validate, naming the alias, the config's aliases and the fix.
func TestValidateFlagsMistypedAlias(t *testing.T) {
	home := copyFixture(t, "bad/valid")
	opHome := t.TempDir()
	writeFile(t, filepath.Join(opHome, ".ssh", "config"), "Host box1\n  HostName 127.0.0.1\n  Port 1\n")
	writeFile(t, filepath.Join(home, "nodes.yaml"), "nodes:\n  - name: b\n    ssh: bx1\n    work_dir: /tmp/dispatch-nowhere\n")
	env := []string{"HOME=" + opHome, "SSH_AUTH_SOCK="}
	r := runDispatch(t, env, "--home", home, "validate", "p")
	want := `warning: node "b" (` + filepath.Join(home, "nodes.yaml") + `): ssh: "bx1" is no Host in ` + filepath.Join(opHome, ".ssh", "config") + ` (its Host aliases: box1)`
	if !strings.Contains(r.stderr, want) || !strings.Contains(r.stderr, "fix: correct the alias") {
		t.Fatalf("validate with a mistyped alias: want %q and the fix: %s", want, r)
	}
	writeFile(t, filepath.Join(home, "nodes.yaml"), "nodes:\n  - name: b\n    ssh: box1\n    work_dir: /tmp/dispatch-nowhere\n")
	if r := runDispatch(t, env, "--home", home, "validate", "p"); strings.Contains(r.stderr, "is no Host") {
		t.Fatalf("validate with the alias fixed still flags it: %s", r)
	}
}
