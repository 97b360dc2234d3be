package spec

import "testing"

// TestLoadPreemptible: preemptible: false protects a task from preemption;
// the front matter's word wins over project.yaml's, and a word that is
// not a boolean is refused at its line.
func TestLoadPreemptible(t *testing.T) {
	cases := []struct {
		name    string
		files   map[string]string
		want    map[string]bool // task ID → NotPreemptible
		wantErr []wantErr
	}{
		{name: "default: preemptible", files: map[string]string{
			"p/S01-one.md": "# One\n",
		}, want: map[string]bool{"S01": false}},
		{name: "front matter", files: map[string]string{
			"p/S01-one.md": "---\npreemptible: false\n---\n# One\n",
			"p/S02-two.md": "---\npreemptible: true\n---\n# Two\n",
		}, want: map[string]bool{"S01": true, "S02": false}},
		{name: "project.yaml, overridden by a task", files: map[string]string{
			"p/project.yaml": "preemptible: false\n",
			"p/S01-one.md":   "# One\n",
			"p/S02-two.md":   "---\npreemptible: true\n---\n# Two\n",
		}, want: map[string]bool{"S01": true, "S02": false}},
		{name: "not a boolean", files: map[string]string{
			"p/project.yaml": "preemptible: never\n",
			"p/S01-one.md":   "---\npreemptible: 0\n---\n# One\n",
		}, wantErr: []wantErr{{"p/S01-one.md", 2, "preemptible must be true or false"}, {"p/project.yaml", 1, "preemptible must be true or false"}}},
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
				if want, ok := tc.want[task.ID]; ok && task.NotPreemptible != want {
					t.Errorf("%s: NotPreemptible = %v, want %v", task.ID, task.NotPreemptible, want)
				}
			}
		})
	}
}
