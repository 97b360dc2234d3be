package nodes

import (
	"reflect"
	"testing"
)

func TestDiff(t *testing.T) {
	const base = `
nodes:
  - name: a
    ssh: alice@a.example
    slots: 2
  - name: b
    slots: 1
`
	tests := []struct {
		name, next string
		want       ConfigDiff
		says       string
	}{
		{name: "same file", next: base, says: "no change"},
		{name: "renamed node", next: `
nodes:
  - name: a2
    ssh: alice@a.example
    slots: 2
  - name: b
    slots: 1
`, want: ConfigDiff{Added: []string{"a2"}, Removed: []string{"a"}}, says: "added a2; removed a"},
		{name: "slots and tags: same connection", next: `
nodes:
  - name: a
    ssh: alice@a.example
    slots: 4
    tags: [gpu]
  - name: b
    slots: 1
`, want: ConfigDiff{Changed: []NodeChange{{Name: "a", Fields: []string{"slots", "spares", "tags"}}}}, says: "changed a (slots, spares, tags)"},
		{name: "new host and work_dir: reached anew", next: `
nodes:
  - name: a
    ssh: alice@a2.example
    slots: 2
  - name: b
    slots: 1
    work_dir: /srv/dispatch
`, want: ConfigDiff{Changed: []NodeChange{{Name: "a", Fields: []string{"ssh"}, Reach: true}, {Name: "b", Fields: []string{"work_dir"}, Reach: true}}}},
		{name: "sandbox_paths", next: `
nodes:
  - name: a
    ssh: alice@a.example
    slots: 2
    sandbox_paths: {ro: [~/go/pkg/mod]}
  - name: b
    slots: 1
`, want: ConfigDiff{Changed: []NodeChange{{Name: "a", Fields: []string{"sandbox_paths"}}}}, says: "changed a (sandbox_paths)"},
		{name: "controller section and an api_mode", next: `
controller:
  poll_interval: 5s
api_modes:
  team: {}
nodes:
  - name: a
    ssh: alice@a.example
    slots: 2
  - name: b
    slots: 1
`, want: ConfigDiff{Sections: []string{"controller", "api_modes"}}, says: "changed controller, api_modes"},
	}
	old, err := Parse("nodes.yaml", []byte(base))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			next, err := Parse("nodes.yaml", []byte(tc.next))
			if err != nil {
				t.Fatal(err)
			}
			got := Diff(old, next)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Diff = %+v, want %+v", got, tc.want)
			}
			if tc.says != "" && got.String() != tc.says {
				t.Errorf("String() = %q, want %q", got.String(), tc.says)
			}
		})
	}
}
