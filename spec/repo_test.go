package spec

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dispatch-tool/dispatch/gitrepo"
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

// TestRepoProjectBranchNames: a git-native project whose name makes branch
// names git refuses (dispatch/x.lock/S01) is refused when it loads, with
// the rule and the fix; the same name without repo: makes no branch and
// loads. Every rule is checked in Go as git checks it.
func TestRepoProjectBranchNames(t *testing.T) {
	op := gittest.New(t)
	op.Write("a.txt", "a\n")
	op.Commit("first")
	dir := writeSpecs(t, map[string]string{"x.lock/S01.md": "# x\n", "x.lock/project.yaml": "repo: " + op.Dir + "\n",
		"y.lock/S01.md": "# y\n", "ok.v2/S01.md": "# ok\n", "ok.v2/project.yaml": "repo: " + op.Dir + "\n"})
	_, err := Load(dir, "x.lock")
	checkErrors(t, dir, err, []wantErr{{"x.lock", 0, `project name "x.lock" makes the branch dispatch/x.lock/final, which git refuses: ` +
		`a component of a ref name (between slashes) cannot end with ".lock"`}})
	if !strings.Contains(err.Error(), `rename the project's directory`) || !strings.Contains(err.Error(), `"x-lock"`) {
		t.Errorf("no fix in %v", err)
	}
	for _, name := range []string{"y.lock", "ok.v2"} {
		if _, err := Load(dir, name); err != nil {
			t.Errorf("Load %s: %v", name, err)
		}
	}
	git, err := exec.LookPath("git")
	if err != nil {
		t.Skip("git is needed to compare the rules with git's")
	}
	for _, b := range []string{"dispatch/x.lock/S01", "dispatch/x/S01", "dispatch/a.b/final", "dispatch/x./S01", "dispatch/.x/S01",
		"dispatch/x/S01.", "dispatch/a..b/S01", "dispatch/a b/S01", "dispatch/a@{b/S01", "dispatch/a~1/S01", "dispatch/a:b/S01",
		"dispatch/a?/S01", "dispatch/a*/S01", "dispatch/a[/S01", `dispatch/a\b/S01`, "dispatch//S01", "dispatch/x/", "@", "dispatch/a\x01/S01",
		"dispatch/a.lock.b/S01", "dispatch/x-/S01", "dispatch/a@b/S01"} {
		gitSays := exec.Command(git, "check-ref-format", "refs/heads/"+b).Run() == nil
		if goSays := gitrepo.BranchRule(b) == ""; goSays != gitSays {
			t.Errorf("%q: git takes it = %v, BranchRule takes it = %v (%q)", b, gitSays, goSays, gitrepo.BranchRule(b))
		}
	}
}
