package yamlval

import (
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// TestMapping: the one reader of a mapping's keys expands merge keys (a
// mapping or a list of them; a key written in the mapping wins) and
// reports non-word keys, duplicates and bad merged values the same way in
// every file, at their lines.
func TestMapping(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		want      string // key=value in order
		problems  string
	}{
		{"plain", "a: 1\nb: 2\n", "a=1 b=2", ""},
		{"merge", "base: &b {x: 1, y: 2}\nm:\n  <<: *b\n  y: 3\n", "y=3 x=1", ""},
		{"merge list", "one: &o {x: 1}\ntwo: &t {x: 2, z: 3}\nm:\n  <<: [*o, *t]\n", "x=1 z=3", ""},
		{"duplicate", "m:\n  a: 1\n  a: 2\n", "a=1", `f.yaml:4: m: duplicate key "a" (first on line 3)`},
		{"non-word key", "m:\n  [a]: 1\n  b: 2\n", "b=2", "f.yaml:3: m: keys must be plain words, not a list"},
		{"merged scalar", "m:\n  <<: 3\n  b: 2\n", "b=2", "f.yaml:3: a merged value (<<) in m must be a mapping, not 3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var doc yaml.Node
			if err := yaml.Unmarshal([]byte(tc.src), &doc); err != nil {
				t.Fatal(err)
			}
			root := doc.Content[0]
			var m *yaml.Node
			for i := 0; i+1 < len(root.Content); i += 2 {
				if root.Content[i].Value == "m" {
					m = root.Content[i+1]
				}
			}
			if m == nil {
				m = root
			}
			var ps Problems
			d := Doc{Problems: &ps, File: "f.yaml", Offset: 1}
			pairs, ok := d.Mapping(m, "m")
			var got []string
			for _, kv := range pairs {
				got = append(got, kv.Key.Value+"="+kv.Val.Value)
			}
			var probs []string
			for _, p := range ps {
				probs = append(probs, p.Error())
			}
			if !ok || strings.Join(got, " ") != tc.want || !strings.HasPrefix(strings.Join(probs, "\n"), tc.problems) || (tc.problems == "") != (len(probs) == 0) {
				t.Errorf("got %v %q, problems %q; want %q, %q", ok, got, probs, tc.want, tc.problems)
			}
		})
	}
}
