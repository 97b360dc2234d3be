package plan

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/dispatch-tool/dispatch/control"
	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/spec"
	"github.com/dispatch-tool/dispatch/store"
)

// addFixture is a home with one local node and project p: S01 with a
// shared context, S02 after it, S03 a matrix of two tasks.
func addFixture(t *testing.T) (specsDir string, cfg *nodes.Config, st *store.Store) {
	t.Helper()
	dir := t.TempDir()
	specsDir = filepath.Join(dir, "specs")
	files := map[string]string{
		"p/project.yaml":      "tool: shell\nintegration: false\n",
		"p/SHARED_CONTEXT.md": "## Rules\nBe brief.\n",
		"p/S01-first.md":      "---\ncontext: [Rules]\n---\n# First\necho one\n",
		"p/S02-second.md":     "---\ndepends_on: [S01]\n---\necho two\n",
		"p/S03-each.md":       "---\nmatrix: {x: [a, b]}\n---\necho {{x}}\n",
	}
	for name, text := range files {
		path := filepath.Join(specsDir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := nodes.Parse(filepath.Join(dir, "nodes.yaml"), []byte("nodes:\n  - name: local\n    ssh: null\n    work_dir: "+filepath.Join(dir, "work")+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	st, err = store.Open(t.Context(), filepath.Join(dir, "dispatch.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return specsDir, cfg, st
}

// TestAddProjectStoresEachSpecAsLoaded: AddProject writes each task's
// snapshot, read from its spec file as it stores the task (a loaded
// project keeps only the hashes), and a spec edited between loading and
// storing fails the start, naming the file, with nothing written: on a
// first start and when a finished project begins its next run.
func TestAddProjectStoresEachSpecAsLoaded(t *testing.T) {
	ctx := t.Context()
	want := map[string]string{
		"S01":   "# First\necho one\n\n## Rules\nBe brief.\n",
		"S02":   "echo two\n",
		"S03.1": "echo a\n",
		"S03.2": "echo b\n",
	}
	for _, tc := range []struct {
		name    string
		nextRun bool   // the project finished: AddProject begins run 2
		edit    string // the spec file edited after Load; "" for none
	}{
		{name: "first start"},
		{name: "first start, a spec edited after loading", edit: "S02-second.md"},
		{name: "a matrix spec edited after loading", edit: "S03-each.md"},
		{name: "next run", nextRun: true},
		{name: "next run, a spec edited after loading", nextRun: true, edit: "S01-first.md"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			specsDir, cfg, st := addFixture(t)
			run := 0
			if tc.nextRun {
				// Run 1 with other texts, finished: every task runs again.
				for _, f := range []string{"S01-first.md", "S02-second.md"} {
					path := filepath.Join(specsDir, "p", f)
					old, _ := os.ReadFile(path)
					if err := os.WriteFile(path, append(old, "# run 1\n"...), 0o644); err != nil {
						t.Fatal(err)
					}
				}
				if err := add(t, specsDir, cfg, st, nil); err != nil {
					t.Fatal(err)
				}
				if err := st.Update(ctx, func(tx *store.Tx) error {
					return tx.SetProject(ctx, "p", store.ProjectPatch{State: new(domain.ProjectDone), Result: new(domain.ResultFailed)}, "")
				}); err != nil {
					t.Fatal(err)
				}
				for _, f := range []string{"S01-first.md", "S02-second.md"} {
					path := filepath.Join(specsDir, "p", f)
					old, _ := os.ReadFile(path)
					if err := os.WriteFile(path, []byte(strings.TrimSuffix(string(old), "# run 1\n")), 0o644); err != nil {
						t.Fatal(err)
					}
				}
				run = 1
			}
			var edited string
			if tc.edit != "" {
				edited = filepath.Join(specsDir, "p", tc.edit)
			}
			err := add(t, specsDir, cfg, st, func() {
				if edited != "" {
					if err := os.WriteFile(edited, []byte("echo edited\n"), 0o644); err != nil {
						t.Fatal(err)
					}
				}
			})
			if edited != "" {
				var ce *spec.ChangedError
				if !errors.As(err, &ce) || !strings.HasSuffix(ce.File, tc.edit) || !strings.Contains(err.Error(), "run the command again") {
					t.Fatalf("AddProject = %v, want a *spec.ChangedError naming %s", err, tc.edit)
				}
				if p, err := st.Project(ctx, "p"); run == 0 && !errors.Is(err, store.ErrNotFound) || run > 0 && p.Run != run {
					t.Errorf("after the failed start: project %+v, %v; want what was there before (run %d)", p, err, run)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p, err := st.Project(ctx, "p"); err != nil || p.Run != run+1 {
				t.Errorf("project %+v, %v; want run %d", p, err, run+1)
			}
			for id, text := range want {
				got, err := st.Snapshot(ctx, "p", id)
				if err != nil {
					t.Fatal(err)
				}
				task, err := st.Task(ctx, "p", id)
				if err != nil {
					t.Fatal(err)
				}
				sum := sha256.Sum256(got)
				if string(got) != text || task.SpecHash != hex.EncodeToString(sum[:]) || task.Status != domain.Pending {
					t.Errorf("%s: stored %q (hash %s, %s), want %q with its hash, pending", id, got, task.SpecHash, task.Status, text)
				}
			}
		})
	}
}

// add loads project p, plans it, calls between (when given) and adds the
// project to st, as `dispatch start` does.
func add(t *testing.T, specsDir string, cfg *nodes.Config, st *store.Store, between func()) error {
	t.Helper()
	p, err := spec.Load(specsDir, "p")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Plan(cfg, p, nil, control.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	if between != nil {
		between()
	}
	_, err = AddProject(t.Context(), st, cfg, filepath.Dir(specsDir), p, control.StartOptions{})
	return err
}

// TestAddOptionsReadsIntegrationSpecAsChecked: a start reads the
// integration_spec Load checked, and fails naming it when it became a
// link out of the specs directory (to a key) or a FIFO since: the key is
// not stored as S99's spec, the FIFO not waited on.
func TestAddOptionsReadsIntegrationSpecAsChecked(t *testing.T) {
	for _, tc := range []struct {
		name string
		swap string // "", "link" or "fifo"
		want string // in the error; "" for none
	}{
		{name: "unchanged"},
		{name: "became a link out", swap: "link", want: "outside the specs directory"},
		{name: "became a FIFO", swap: "fifo", want: "not a regular file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			specsDir, cfg, _ := addFixture(t)
			file := filepath.Join(specsDir, "p", "integrate.md")
			key := filepath.Join(t.TempDir(), "id_ed25519")
			for path, text := range map[string]string{file: "merge them\n", key: "PRIVATE KEY\n",
				filepath.Join(specsDir, "p", "project.yaml"): "tool: shell\nintegration_spec: integrate.md\n"} {
				if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			p, err := spec.Load(specsDir, "p")
			if err != nil {
				t.Fatal(err)
			}
			if tc.swap != "" {
				if err := os.Remove(file); err != nil {
					t.Fatal(err)
				}
				if tc.swap == "link" {
					err = os.Symlink(key, file)
				} else {
					err = syscall.Mkfifo(file, 0o644)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			opts, _, err := addOptions(cfg, p, control.StartOptions{})
			snap := string(opts.Overrides[domain.IntegrationID].Snapshot)
			if tc.want == "" {
				if err != nil || snap != "merge them\n" {
					t.Fatalf("addOptions: S99's snapshot %q, %v; want the file's text", snap, err)
				}
				return
			}
			var ce *spec.ChangedError
			if !errors.As(err, &ce) || ce.File != file || !strings.Contains(ce.Problem, tc.want) || !strings.Contains(err.Error(), "run the command again") {
				t.Fatalf("addOptions = %v (snapshot %q), want a *spec.ChangedError naming %s: ...%s...", err, snap, file, tc.want)
			}
		})
	}
}
