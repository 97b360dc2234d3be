package yamlval

import (
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
	r := Retention{Set: true}
	ok := d.Fields(v, where, key, retentionFix, RetentionKeys, func(name string, val *yaml.Node) {
		switch name {
		case "runs":
			r.Runs, _ = d.Int(val, where, key+".runs", 0, MaxInt)
		case "days":
			r.Days, _ = d.Int(val, where, key+".days", 0, MaxInt)
		}
	})
	if !ok {
		return Retention{}, false
	}
	return r, true
}
