package spec

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestLoadFiles: files: in front matter and project.yaml names regular
// files inside the spec directory; the task's list is its own, else the
// project's, and every bad path is refused at its line with a fix.
func TestLoadFiles(t *testing.T) {
	cases := []struct {
		name    string
		files   map[string]string
		link    string // a symbolic link p/out.txt to this file outside the project, if set
		want    map[string][]string
		wantErr []wantErr
	}{
		{name: "front matter and project default", files: map[string]string{
			"p/project.yaml":  "files: [data/a.csv]\n",
			"p/data/a.csv":    "1\n",
			"p/b.txt":         "2\n",
			"p/S01-one.md":    "# One\n",
			"p/S02-two.md":    "---\nfiles:\n  - b.txt\n  - ./data/a.csv\n  - b.txt\n---\n# Two\n",
			"p/S03-three.md":  "---\nfiles: []\n---\n# Three\n",
			"p/S04-scalar.md": "---\nfiles: b.txt\n---\n# Four\n",
		}, want: map[string][]string{"S01": {"data/a.csv"}, "S02": {"b.txt", "data/a.csv"}, "S03": {}, "S04": {"b.txt"}}},
		{name: "bad paths", files: map[string]string{
			"p/S01-one.md": "---\nfiles:\n  - ../q/x.txt\n  - /etc/passwd\n  - missing.txt\n  - data\n  - {a: b}\n---\n# One\n",
			"p/data/x":     "1\n",
			"q/x.txt":      "1\n",
			"q/S01-q.md":   "# Q\n",
		}, wantErr: []wantErr{
			{"p/S01-one.md", 3, `files "../q/x.txt" is outside the project directory`},
			{"p/S01-one.md", 4, "files must be a relative path"},
			{"p/S01-one.md", 5, `files "missing.txt" does not exist`},
			{"p/S01-one.md", 6, `files "data" is not a regular file`},
			{"p/S01-one.md", 7, "files: each entry must be a path"},
		}},
		{name: "link leaving the project", files: map[string]string{
			"p/project.yaml": "files: [out.txt]\n",
			"p/S01-one.md":   "# One\n",
			"q/secret.txt":   "k\n",
			"q/S01-q.md":     "# Q\n",
		}, link: "q/secret.txt", wantErr: []wantErr{
			{"p/project.yaml", 1, `files "out.txt" is a symbolic link to`},
		}},
		{name: "git-native project", files: map[string]string{
			"p/project.yaml": "repo: nothere\n",
			"p/b.txt":        "2\n",
			"p/S01-one.md":   "---\nfiles: [b.txt]\n---\n# One\n",
		}, wantErr: []wantErr{
			{"p/S01-one.md", 2, "files: is for projects without repo:"},
			{"p/project.yaml", 1, "nothere"},
		}},
		{name: "start_from", files: map[string]string{
			"p/project.yaml": "start_from: dependencies\n",
			"p/S01-one.md":   "# One\n",
			"p/S02-two.md":   "---\ndepends_on: [S01]\nstart_from: base\n---\n# Two\n",
			"p/S03-bad.md":   "---\ndepends_on: [S01]\nstart_from: outputs\n---\n# Three\n",
		}, wantErr: []wantErr{{"p/S03-bad.md", 3, `start_from: unknown value "outputs"`}}},
		{name: "not a list", files: map[string]string{
			"p/S01-one.md": "---\nfiles: {a: b}\n---\n# One\n",
		}, wantErr: []wantErr{{"p/S01-one.md", 2, "files must be a list of paths"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeSpecs(t, tc.files)
			if tc.link != "" {
				if err := os.Symlink(filepath.Join(dir, tc.link), filepath.Join(dir, "p", "out.txt")); err != nil {
					t.Fatal(err)
				}
			}
			p, err := Load(dir, "p")
			if tc.wantErr != nil {
				checkErrors(t, dir, err, tc.wantErr)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, task := range p.Tasks {
				if want, ok := tc.want[task.ID]; ok && !slices.Equal(task.Files, want) {
					t.Errorf("%s: Files = %q, want %q", task.ID, task.Files, want)
				}
			}
		})
	}
}
