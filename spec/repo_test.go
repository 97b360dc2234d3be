package spec

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/dispatch-tool/dispatch/internal/gittest"
)

// TestLoadRepo: project.yaml's repo: and ref: are checked against the
// repository itself, each bad input at its line with the fix.
func TestLoadRepo(t *testing.T) {
	op := gittest.New(t)
	op.Write("a.txt", "a\n")
	first := op.Commit("first")
	op.Git("tag", "v1")
	op.Write("a.txt", "b\n")
	head := op.Commit("second")
	empty := gittest.New(t)
	plain := t.TempDir()

	t.Run("errors", func(t *testing.T) {
		tests := []struct {
			name  string
			yaml  string
			want  wantErr
			extra map[string]string
		}{
			{"not a directory", "repo: " + filepath.Join(plain, "missing") + "\n",
				wantErr{"p/project.yaml", 1, "is not a directory"}, nil},
			{"not a git repository", "tool: shell\nrepo: " + plain + "\n",
				wantErr{"p/project.yaml", 2, "is not a git repository"}, nil},
			{"no commits", "repo: " + empty.Dir + "\n",
				wantErr{"p/project.yaml", 1, "has no commits"}, nil},
			{"unknown ref", "repo: " + op.Dir + "\nref: no-such-branch\n",
				wantErr{"p/project.yaml", 2, `ref: "no-such-branch" names no commit`}, nil},
			{"ref that reads as an option", "repo: " + op.Dir + "\nref: --all\n",
				wantErr{"p/project.yaml", 2, `ref "--all" is not a branch, tag or commit`}, nil},
			{"ref without repo", "ref: main\n",
				wantErr{"p/project.yaml", 1, "ref: is set without repo:"}, nil},
			{"repo and base", "base: src\nrepo: " + op.Dir + "\n",
				wantErr{"p/project.yaml", 1, "base: and repo: both set"}, map[string]string{"p/src/f.txt": "x\n"}},
			{"empty repo", "repo: ''\n",
				wantErr{"p/project.yaml", 1, "repo is empty"}, nil},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				files := map[string]string{"p/S01.md": "# x\n", "p/project.yaml": tc.yaml}
				for k, v := range tc.extra {
					files[k] = v
				}
				dir := writeSpecs(t, files)
				p, err := Load(dir, "p")
				if p != nil {
					t.Errorf("Load returned a project along with errors")
				}
				checkErrors(t, dir, err, []wantErr{tc.want})
			})
		}
	})

	t.Run("HEAD by default, a tag, a path relative to the project", func(t *testing.T) {
		dir := writeSpecs(t, map[string]string{"p/S01.md": "# x\n", "p/project.yaml": "repo: " + op.Dir + "\n"})
		p, err := Load(dir, "p")
		if err != nil {
			t.Fatal(err)
		}
		if src := p.Config.Source; src == nil || src.Commit != head || src.Ref != "HEAD" || len(src.Notes) != 0 {
			t.Fatalf("source %+v, want HEAD at %s and no notes", src, head)
		}
		dir = writeSpecs(t, map[string]string{"p/S01.md": "# x\n", "p/project.yaml": "repo: code\nref: v1\n"})
		if err := os.Symlink(op.Dir, filepath.Join(dir, "p", "code")); err != nil {
			t.Fatal(err)
		}
		p, err = Load(dir, "p")
		if err != nil {
			t.Fatal(err)
		}
		if src := p.Config.Source; src == nil || src.Commit != first || src.Ref != "v1" {
			t.Fatalf("source %+v, want v1 at %s", src, first)
		}
	})
}
