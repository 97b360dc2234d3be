package spec

import (
	"testing"

	"github.com/dispatch-tool/dispatch/internal/gittest"
)

// TestLoadStackedSettings: on_conflict: is markers or fail, in front
// matter or project.yaml, and only in a git project; a git project
// refuses start_from: inputs (its dependents start on their dependencies'
// commits), each at its line with the fix.
func TestLoadStackedSettings(t *testing.T) {
	op := gittest.New(t)
	op.Write("a.txt", "a\n")
	op.Commit("first")
	repo := "repo: " + op.Dir + "\n"
	cases := []struct {
		name    string
		files   map[string]string
		want    map[string][2]string // task → start_from, on_conflict
		wantErr []wantErr
	}{
		{name: "defaults and overrides", files: map[string]string{
			"p/project.yaml": repo + "on_conflict: fail\n",
			"p/S01-one.md":   "# One\n",
			"p/S02-two.md":   "---\ndepends_on: [S01]\non_conflict: markers\nstart_from: dependencies\n---\n# Two\n",
			"p/S03-three.md": "---\ndepends_on: [S01]\nstart_from: base\n---\n# Three\n",
		}, want: map[string][2]string{"S01": {"", "fail"}, "S02": {"dependencies", "markers"}, "S03": {"base", "fail"}}},
		{name: "bad values", files: map[string]string{
			"p/project.yaml": repo + "start_from: inputs\non_conflict: abort\n",
			"p/S01-one.md":   "# One\n",
			"p/S02-two.md":   "---\ndepends_on: [S01]\nstart_from: inputs\non_conflict: ours\n---\n# Two\n",
		}, wantErr: []wantErr{
			{"p/S02-two.md", 3, "start_from: inputs is for projects without repo:"},
			{"p/S02-two.md", 4, `on_conflict: unknown value "ours"`},
			{"p/project.yaml", 2, "start_from: inputs is for projects without repo:"},
			{"p/project.yaml", 3, `on_conflict: unknown value "abort"`},
		}},
		{name: "on_conflict in a plain project", files: map[string]string{
			"p/project.yaml": "on_conflict: fail\n",
			"p/S01-one.md":   "# One\n",
			"p/S02-two.md":   "---\ndepends_on: [S01]\non_conflict: fail\n---\n# Two\n",
		}, wantErr: []wantErr{
			{"p/S02-two.md", 3, "on_conflict: is for projects with repo:"},
			{"p/project.yaml", 1, "on_conflict: is for projects with repo:"},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeSpecs(t, tc.files)
			p, err := Load(dir, "p")
			if tc.wantErr != nil {
				checkErrors(t, dir, err, tc.wantErr)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, task := range p.Tasks {
				if got := [2]string{task.StartFrom, task.OnConflict}; got != tc.want[task.ID] {
					t.Errorf("%s: start_from, on_conflict = %q, want %q", task.ID, got, tc.want[task.ID])
				}
			}
		})
	}
}
