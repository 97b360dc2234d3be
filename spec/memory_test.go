package spec

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestLoadKeepsNoSpecText: a loaded project holds what the plan needs of
// each spec (IDs, dependencies, settings, the snapshot's hash), not its
// text: 2,000 specs of 4 KiB (8 MiB of text) leave less than a third of
// that live after Load, where holding every snapshot left 1.3× the
// text (issue 35: 10,000 such specs peaked at 150 MiB RSS in start). The
// text is read again, one spec at a time, when it is stored
// (Project.Snapshot).
func TestLoadKeepsNoSpecText(t *testing.T) {
	const n, size = 2000, 4096
	files := map[string]string{"p/project.yaml": "tool: shell\n", "p/SHARED_CONTEXT.md": "## Rules\nBe brief.\n"}
	for i := 1; i <= n; i++ {
		var b strings.Builder
		fmt.Fprintf(&b, "---\npriority: %d\ncontext: [Rules]\n---\n# Task %d\ntrue\n", 1+i%9, i)
		for b.Len() < size {
			b.WriteString("# Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut labore.\n")
		}
		files[fmt.Sprintf("p/S%05d-task.md", i)] = b.String()
	}
	dir := writeSpecs(t, files)
	text := int64(n * size)

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	p, err := Load(dir, "p")
	if err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	live := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	if len(p.Tasks) != n {
		t.Fatalf("%d tasks, want %d", len(p.Tasks), n)
	}
	t.Logf("%d specs, %d KiB of text: %d KiB live after Load", n, text>>10, live>>10)
	if live > text/3 {
		t.Errorf("the loaded project keeps %d KiB live for %d KiB of spec text; want under a third of it", live>>10, text>>10)
	}
	// Each text can still be had, one at a time.
	last := p.Tasks[n-1]
	snap, err := p.Snapshot(last)
	if err != nil || !strings.HasPrefix(string(snap), fmt.Sprintf("# Task %d\ntrue\n", n)) || len(snap) != last.Size {
		t.Errorf("Snapshot(%s) = %.40q…, %v", last.ID, snap, err)
	}
	runtime.KeepAlive(p)
}

// TestSnapshotOfAChangedSpec: Project.Snapshot gives what Load hashed or
// fails naming the file: edited, removed or replaced since.
func TestSnapshotOfAChangedSpec(t *testing.T) {
	for _, tc := range []struct {
		name    string
		change  func(path string) error
		changed bool   // Snapshot fails
		problem string // in its error; "" when the file reads but differs
	}{
		{"unchanged", func(string) error { return nil }, false, ""},
		// The settings stored are those the plan was made with.
		{"front matter only", func(path string) error { return os.WriteFile(path, []byte("---\npriority: 2\n---\necho one\n"), 0o644) }, false, ""},
		{"edited", func(path string) error { return os.WriteFile(path, []byte("echo two\n"), 0o644) }, true, ""},
		{"removed", os.Remove, true, "cannot be read as text"},
		{"not UTF-8", func(path string) error { return os.WriteFile(path, []byte("echo \xff\n"), 0o644) }, true, "invalid UTF-8"},
		{"a link outside", func(path string) error {
			out := filepath.Join(t.TempDir(), "secret")
			if err := os.WriteFile(out, []byte("echo one\n"), 0o600); err != nil {
				return err
			}
			if err := os.Remove(path); err != nil {
				return err
			}
			return os.Symlink(out, path)
		}, true, "outside the specs directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeSpecs(t, map[string]string{"p/S01.md": "echo one\n"})
			p, err := Load(dir, "p")
			if err != nil {
				t.Fatal(err)
			}
			task := p.Task("S01")
			if err := tc.change(task.File); err != nil {
				t.Fatal(err)
			}
			snap, err := p.Snapshot(task)
			if !tc.changed {
				if err != nil || string(snap) != "echo one\n" {
					t.Fatalf("Snapshot = %q, %v; want the loaded text", snap, err)
				}
				return
			}
			var ce *ChangedError
			if !errors.As(err, &ce) || ce.File != task.File || !strings.Contains(ce.Problem, tc.problem) || snap != nil {
				t.Fatalf("Snapshot = %q, %v; want a *ChangedError for %s (%q)", snap, err, task.File, tc.problem)
			}
			if !strings.Contains(err.Error(), task.File) || !strings.Contains(err.Error(), "run the command again") {
				t.Errorf("error %q does not name the file and the fix", err)
			}
		})
	}
}
