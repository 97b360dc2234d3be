//go:build unix

package spec

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A symbolic link that leaves the specs directory is refused for every file
// Load reads or names: dispatch would send its target to a node. Links
// that stay inside the project or the specs directory are fine.
func TestLoadSymlinks(t *testing.T) {
	outside := filepath.Join(t.TempDir(), "secret")
	if err := os.MkdirAll(filepath.Join(outside, "dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "id_ed25519"), []byte("PRIVATE KEY\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		files  map[string]string
		link   string // path of the link, relative to the specs directory
		target string // relative target; "OUT/x" is x in the outside directory
		want   []wantErr
	}{
		{"task file outside", map[string]string{"p/S01.md": "# a\n"}, "p/S02-key.md", "OUT/id_ed25519",
			[]wantErr{{"p/S02-key.md", 0, "outside the specs directory"}}},
		{"SHARED_CONTEXT.md outside", map[string]string{"p/S01.md": "# a\n"}, "p/SHARED_CONTEXT.md", "OUT/id_ed25519",
			[]wantErr{{"p/SHARED_CONTEXT.md", 0, "outside the specs directory"}}},
		{"project.yaml outside", map[string]string{"p/S01.md": "# a\n"}, "p/project.yaml", "OUT/id_ed25519",
			[]wantErr{{"p/project.yaml", 0, "outside the specs directory"}}},
		{"integration_spec outside", map[string]string{"p/S01.md": "# a\n", "p/project.yaml": "integration_spec: integrate.txt\n"},
			"p/integrate.txt", "OUT/id_ed25519", []wantErr{{"p/project.yaml", 1, `integration_spec "integrate.txt" is a symbolic link`}}},
		{"base outside", map[string]string{"p/S01.md": "# a\n", "p/project.yaml": "base: src\n"},
			"p/src", "OUT/dir", []wantErr{{"p/project.yaml", 1, `base "src" is a symbolic link`}}},
		{"task file inside the project", map[string]string{"p/S01.md": "# a\n", "p/drafts/one.md": "# one\n"},
			"p/S02.md", "drafts/one.md", nil},
		{"shared context of another project", map[string]string{"p/S01.md": "# a\n@context: x\n", "common/SHARED_CONTEXT.md": "## x\nshared\n"},
			"p/SHARED_CONTEXT.md", "../common/SHARED_CONTEXT.md", nil},
		{"base inside", map[string]string{"p/S01.md": "# a\n", "p/project.yaml": "base: src\n", "p/real/f.txt": "x\n"},
			"p/src", "real", nil},
		{"dangling link", map[string]string{"p/S01.md": "# a\n"}, "p/S02.md", "missing.md",
			[]wantErr{{"p/S02.md", 0, "does not exist"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeSpecs(t, tc.files)
			target := tc.target
			if rest, ok := strings.CutPrefix(target, "OUT/"); ok {
				target = filepath.Join(outside, rest)
			}
			if err := os.Symlink(target, filepath.Join(dir, tc.link)); err != nil {
				t.Fatal(err)
			}
			p, err := Load(dir, "p")
			if tc.want == nil {
				if err != nil {
					t.Fatalf("Load: %v", err)
				}
				for _, tk := range p.Tasks {
					if strings.Contains(string(snapshot(t, p, tk)), "PRIVATE") {
						t.Fatalf("%s holds the outside file", tk.ID)
					}
				}
				return
			}
			checkErrors(t, dir, err, tc.want)
		})
	}
}

// TestPlainSpecsResolveNoLink: a spec file of the project directory that
// is no symbolic link is inside it without resolving a path, at Load and
// at each Snapshot, from a relative specs directory too: resolving every
// spec's path and both roots cost 15 lstats a spec twice over (5 % of
// the controller's CPU for 200 no-op tasks, issue 35). A link is still
// resolved and judged (TestLoadSymlinks).
func TestPlainSpecsResolveNoLink(t *testing.T) {
	files := map[string]string{"p/project.yaml": "tool: shell\n", "p/SHARED_CONTEXT.md": "## Rules\nBe brief.\n"}
	for i := range 20 {
		files[fmt.Sprintf("p/S%02d.md", i)] = "---\ncontext: [Rules]\n---\ntrue\n"
	}
	dir := writeSpecs(t, files)
	if err := os.Symlink("S00.md", filepath.Join(dir, "p", "S99.md")); err != nil {
		t.Fatal(err)
	}
	t.Chdir(filepath.Dir(dir))
	var resolved []string
	real := evalSymlinks
	evalSymlinks = func(path string) (string, error) {
		resolved = append(resolved, path)
		return real(path)
	}
	t.Cleanup(func() { evalSymlinks = real })
	p, err := Load("specs", "p")
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Tasks) != 21 {
		t.Fatalf("%d tasks, want 21", len(p.Tasks))
	}
	for _, task := range p.Tasks {
		if !strings.Contains(string(snapshot(t, p, task)), "Be brief.") {
			t.Errorf("snapshot of %s lacks its context", task.ID)
		}
	}
	// The link, at Load and at its Snapshot: itself and the two roots.
	if len(resolved) != 6 {
		t.Errorf("resolved %d paths, want 6 (the link's, twice): %q…", len(resolved), resolved[:min(len(resolved), 6)])
	}
	for _, path := range resolved {
		if !filepath.IsAbs(path) {
			t.Errorf("resolved %q, not an absolute path", path)
		}
	}
}
