//go:build unix

package spec

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
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

// swapOutside is a directory outside the specs directory holding a secret
// (id_ed25519 and dir/one.md) and a FIFO.
func swapOutside(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "secret")
	if err := os.MkdirAll(filepath.Join(out, "dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"id_ed25519", "dir/one.md"} {
		if err := os.WriteFile(filepath.Join(out, f), []byte("PRIVATE KEY\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mkfifo(filepath.Join(out, "fifo"), 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	return out
}

// replace puts at path (under dir) a symbolic link to target ("OUT/x": x
// in out), or a FIFO when target is "FIFO".
func replace(t *testing.T, dir, out, path, target string) {
	t.Helper()
	full := filepath.Join(dir, filepath.FromSlash(path))
	if err := os.Rename(full, full+".old"); err != nil {
		t.Fatal(err)
	}
	if target == "FIFO" {
		if err := syscall.Mkfifo(full, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if rest, ok := strings.CutPrefix(target, "OUT/"); ok {
		target = filepath.Join(out, rest)
	}
	if err := os.Symlink(target, full); err != nil {
		t.Fatal(err)
	}
}

// swapAt sets testHookChecked to replace (once) what is at path with
// target when name, a file of the specs directory, has been checked and
// is about to be opened.
func swapAt(t *testing.T, dir, out, name, path, target string) {
	t.Helper()
	done := false
	testHookChecked = func(p string) {
		if !done && p == filepath.Join(dir, filepath.FromSlash(name)) {
			done = true
			replace(t, dir, out, path, target)
		}
	}
	t.Cleanup(func() { testHookChecked = nil })
}

// Between Load's check of a spec file and its read, a writer of the specs
// directory swaps the file, or what a link inside resolves to, for a link
// out of it (to a key, a FIFO): dispatch reads nothing outside and says
// what happened and how to go on, instead of storing the key as a spec
// or blocking on the FIFO.
func TestLoadSwappedAfterTheCheck(t *testing.T) {
	files := map[string]string{"p/S01.md": "# a\n", "p/S02.md": "# b\n", "p/project.yaml": "tool: shell\n",
		"p/SHARED_CONTEXT.md": "## x\ny\n", "common/one.md": "# one\n"}
	tests := []struct {
		name   string
		link   string // made before Load: p/S03.md, a link to this (relative to p)
		check  string // the file whose check the swap follows
		path   string // what is swapped
		target string
		msg    string
	}{
		{"task file for a link out", "", "p/S02.md", "p/S02.md", "OUT/id_ed25519", "became a symbolic link while dispatch was reading it"},
		{"project.yaml for a link out", "", "p/project.yaml", "p/project.yaml", "OUT/id_ed25519", "became a symbolic link"},
		{"SHARED_CONTEXT.md for a link out", "", "p/SHARED_CONTEXT.md", "p/SHARED_CONTEXT.md", "OUT/id_ed25519", "became a symbolic link"},
		{"task file for a FIFO", "", "p/S02.md", "p/S02.md", "FIFO", "not a regular file"},
		{"a link's target for a link out", "../common/one.md", "p/S03.md", "common/one.md", "OUT/id_ed25519", "changed while dispatch was reading it"},
		{"a link's directory for a link out", "../common/one.md", "p/S03.md", "common", "OUT/dir", "changed while dispatch was reading it"},
		{"a link's target for a FIFO out", "../common/one.md", "p/S03.md", "common/one.md", "OUT/fifo", "changed while dispatch was reading it"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out := swapOutside(t)
			dir := writeSpecs(t, files)
			if tc.link != "" {
				if err := os.Symlink(tc.link, filepath.Join(dir, "p", "S03.md")); err != nil {
					t.Fatal(err)
				}
			}
			swapAt(t, dir, out, tc.check, tc.path, tc.target)
			_, err := Load(dir, "p")
			checkErrors(t, dir, err, []wantErr{{tc.check, 0, tc.msg}})
			if strings.Contains(err.Error(), "PRIVATE") {
				t.Errorf("the error shows the outside file: %v", err)
			}
		})
	}
}

// The same swap between Snapshot's check and its read, after a Load that
// saw the files as they were: Snapshot reads nothing outside either, not
// even a file that holds the text Load hashed.
func TestSnapshotSwappedAfterTheCheck(t *testing.T) {
	tests := []struct {
		name   string
		task   string // whose spec is checked, then swapped
		path   string // what is swapped, for a link to target
		target string
		msg    string
	}{
		{"task file for a link out", "S02", "p/S02.md", "OUT/same-b.md", "became a symbolic link"},
		{"a link's target for a link out", "S03", "common/one.md", "OUT/same-one.md", "changed while dispatch was reading it"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out := swapOutside(t)
			dir := writeSpecs(t, map[string]string{"p/S01.md": "# a\n", "p/S02.md": "# b\n", "common/one.md": "# one\n"})
			if err := os.Symlink("../common/one.md", filepath.Join(dir, "p", "S03.md")); err != nil {
				t.Fatal(err)
			}
			for name, text := range map[string]string{"same-b.md": "# b\n", "same-one.md": "# one\n"} {
				if err := os.WriteFile(filepath.Join(out, name), []byte(text), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			p, err := Load(dir, "p")
			if err != nil {
				t.Fatal(err)
			}
			task := p.Tasks[slices.IndexFunc(p.Tasks, func(t *Task) bool { return t.ID == tc.task })]
			swapAt(t, dir, out, "p/"+tc.task+".md", tc.path, tc.target)
			snap, err := p.Snapshot(task)
			var changed *ChangedError
			if !errors.As(err, &changed) || !strings.Contains(changed.Problem, tc.msg) {
				t.Fatalf("Snapshot = %q, %v; want a ChangedError: ...%s...", snap, err, tc.msg)
			}
		})
	}
}

// TestIntegrationSpecReadAtLoad: an integration_spec that a start could
// not read (larger than the 8 MiB a spec may be) is refused by Load,
// naming the file, not by the start as a file that changed meanwhile.
func TestIntegrationSpecReadAtLoad(t *testing.T) {
	dir := writeSpecs(t, map[string]string{"p/S01.md": "# a\n", "p/project.yaml": "integration_spec: int.md\n"})
	if err := os.WriteFile(filepath.Join(dir, "p", "int.md"), []byte(strings.Repeat("x", maxFileSize+1)), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Load(dir, "p")
	checkErrors(t, dir, err, []wantErr{{"p/int.md", 0, "larger than 8 MiB"}})
}
