package yamlval

import (
	"slices"

	"gopkg.in/yaml.v3"
)

// Retention is how many of a project's ended runs are kept (issue 23):
// the newest Runs and any younger than Days days. A zero field does not
// keep by its rule; both zero (Set false) keeps every run.
type Retention struct {
	Runs, Days int
	// Set is true when the file wrote a retention: block.
	Set bool
}

// RetentionKeys are the keys of a retention mapping.
var RetentionKeys = []string{"runs", "days"}

const retentionFix = "write retention: {runs: 20, days: 30} (either or both; 0 does not keep by that rule)"

// Retention reads a retention mapping: runs and days are whole numbers
// from 0. Every problem is reported; ok is false when there was one.
func (d Doc) Retention(v *yaml.Node, where, key string) (Retention, bool) {
	v = Resolve(v)
	r := Retention{Set: true}
	if v.Kind != yaml.MappingNode {
		d.Errorf(v, retentionFix, "%s%s must be a mapping, not %s", prefix(where), key, Describe(v))
		return Retention{}, false
	}
	before := len(*d.Problems)
	seen := map[string]bool{}
	for i := 0; i+1 < len(v.Content); i += 2 {
		k, val := Resolve(v.Content[i]), Resolve(v.Content[i+1])
		name := k.Value
		switch {
		case k.Kind != yaml.ScalarNode || !slices.Contains(RetentionKeys, name):
			d.Unknown(k, prefix(where)+key+": ", RetentionKeys)
			continue
		case seen[name]:
			d.Errorf(k, "remove one of them", "%s%s: duplicate key %q", prefix(where), key, name)
			continue
		case IsNull(val):
			d.Errorf(val, retentionFix, "%s%s.%s is empty", prefix(where), key, name)
			continue
		}
		seen[name] = true
		switch name {
		case "runs":
			r.Runs, _ = d.Int(val, where, key+".runs", 0, MaxInt)
		case "days":
			r.Days, _ = d.Int(val, where, key+".days", 0, MaxInt)
		}
	}
	if len(*d.Problems) != before {
		return Retention{}, false
	}
	return r, true
}
