package yamlval

import (
	"fmt"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// Limits is a task's resource limits as written (issue 20): zero fields
// are not set. The wrapper enforces them (see wrapper/limits.go).
type Limits struct {
	Memory   int64   // bytes of resident memory of the task's processes
	CPU      float64 // cores; enforced only with cgroups
	Pids     int     // processes and threads
	FileSize int64   // bytes of any one file written
}

// LimitsKeys are the keys of a limits mapping.
var LimitsKeys = []string{"memory", "cpu", "pids", "file_size"}

// Zero reports whether no limit is set.
func (l Limits) Zero() bool { return l == Limits{} }

// Over returns l with the limits it does not set taken from base: a task's
// limits over its project's, a project's over its node's.
func (l Limits) Over(base Limits) Limits {
	if l.Memory == 0 {
		l.Memory = base.Memory
	}
	if l.CPU == 0 {
		l.CPU = base.CPU
	}
	if l.Pids == 0 {
		l.Pids = base.Pids
	}
	if l.FileSize == 0 {
		l.FileSize = base.FileSize
	}
	return l
}

const limitsFix = "write limits: {memory: 4GiB, cpu: 2, pids: 512, file_size: 8GiB} (any of them)"

// Limits reads a limits mapping: memory and file_size are positive sizes
// with a unit (200MiB, 4GiB), cpu a positive number of cores, pids a whole
// number from 1. Every problem is reported; ok is false when there was one.
func (d Doc) Limits(v *yaml.Node, where, key string) (Limits, bool) {
	var l Limits
	ok := d.Fields(v, where, key, limitsFix, LimitsKeys, func(name string, val *yaml.Node) {
		path := key + "." + name
		switch name {
		case "memory":
			l.Memory, _ = d.limitSize(val, where, path)
		case "file_size":
			l.FileSize, _ = d.limitSize(val, where, path)
		case "cpu":
			l.CPU, _ = d.Number(val, where, path)
		case "pids":
			l.Pids, _ = d.Int(val, where, path, 1, 1<<22)
		}
	})
	return l, ok
}

// Fields reads the mapping v of key (under where) whose keys are known:
// each is called for every known key with a value, once; a key not known,
// twice or empty, or v not a mapping, is reported with fix. ok is false
// when there was a problem.
func (d Doc) Fields(v *yaml.Node, where, key, fix string, known []string, each func(name string, val *yaml.Node)) bool {
	v = Resolve(v)
	if v.Kind != yaml.MappingNode {
		d.Errorf(v, fix, "%s%s must be a mapping, not %s", prefix(where), key, Describe(v))
		return false
	}
	before := len(*d.Problems)
	seen := map[string]bool{}
	for i := 0; i+1 < len(v.Content); i += 2 {
		k, val := Resolve(v.Content[i]), Resolve(v.Content[i+1])
		name := k.Value
		switch {
		case k.Kind != yaml.ScalarNode || !slices.Contains(known, name):
			d.Unknown(k, prefix(where)+key+": ", known)
			continue
		case seen[name]:
			d.Errorf(k, "remove one of them", "%s%s: duplicate key %q", prefix(where), key, name)
			continue
		case IsNull(val):
			d.Errorf(val, fix, "%s%s.%s is empty", prefix(where), key, name)
			continue
		}
		seen[name] = true
		each(name, val)
	}
	return len(*d.Problems) == before
}

// limitSize reads a positive size with a unit: a bare number of a limit
// is refused rather than taken as bytes (memory: 4 is not four bytes).
func (d Doc) limitSize(v *yaml.Node, where, key string) (int64, bool) {
	const fix = "write a positive size with a unit, e.g. 512MiB or 4GiB (KiB/MiB/GiB/TiB are powers of 1024, KB/MB/GB/TB of 1000)"
	if v.Kind == yaml.ScalarNode && (v.ShortTag() == "!!int" || v.ShortTag() == "!!float") {
		d.Errorf(v, fix, "%s%s: %s has no unit", prefix(where), key, v.Value)
		return 0, false
	}
	if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!str" {
		d.Errorf(v, fix, "%s%s must be a size, not %s", prefix(where), key, Describe(v))
		return 0, false
	}
	s := strings.TrimSpace(v.Value)
	if strings.TrimLeft(s, "0123456789. ") == "" {
		d.Errorf(v, fix, "%s%s: %q has no unit", prefix(where), key, v.Value)
		return 0, false
	}
	n, err := parseSize(s)
	switch {
	case err != nil:
		d.Errorf(v, fix, "%s%s: %v", prefix(where), key, err)
		return 0, false
	case n <= 0:
		d.Errorf(v, fix, "%s%s must be positive, not %s", prefix(where), key, v.Value)
		return 0, false
	}
	return n, true
}

// String writes the limits as they would be written in YAML, for
// messages and `nodes check`: "memory 4 GiB, pids 512"; "" when none.
func (l Limits) String() string {
	var parts []string
	if l.Memory > 0 {
		parts = append(parts, "memory "+sizeText(l.Memory))
	}
	if l.CPU > 0 {
		parts = append(parts, fmt.Sprintf("cpu %g", l.CPU))
	}
	if l.Pids > 0 {
		parts = append(parts, fmt.Sprintf("pids %d", l.Pids))
	}
	if l.FileSize > 0 {
		parts = append(parts, "file_size "+sizeText(l.FileSize))
	}
	return strings.Join(parts, ", ")
}

func sizeText(n int64) string {
	for _, u := range []struct {
		name string
		size int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.size && n%u.size == 0 {
			return fmt.Sprintf("%d%s", n/u.size, u.name)
		}
	}
	return fmt.Sprintf("%dB", n)
}
