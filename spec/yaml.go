package spec

import (
	"github.com/dispatch-tool/dispatch/internal/yamlval"

	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// yamlFile decodes YAML from one file, reporting problems with lines of
// that file (see yamlval.Doc).
type yamlFile struct{ yamlval.Doc }

// parse returns the top-level mapping, an empty mapping for an empty
// document, or nil after reporting a syntax error.
func (y yamlFile) parse(src string, what string) *yaml.Node {
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(src), &doc); err != nil {
		line, msg := yamlval.SyntaxError(err, []byte(src))
		y.ErrorAt(line+y.Offset, "write "+what+" as YAML key: value lines", "invalid YAML in %s: %s", what, msg)
		return nil
	}
	if len(doc.Content) == 0 {
		return &yaml.Node{Kind: yaml.MappingNode}
	}
	root := yamlval.Resolve(doc.Content[0])
	if yamlval.IsNull(root) {
		return &yaml.Node{Kind: yaml.MappingNode}
	}
	if root.Kind != yaml.MappingNode {
		y.Errorf(root, "write "+what+" as YAML key: value lines", "%s must be a mapping of keys to values, not %s", what, yamlval.Describe(root))
		return nil
	}
	return root
}

// fields calls set for each known key of m and reports unknown and
// duplicate keys.
func (y yamlFile) fields(m *yaml.Node, what string, known []string, set func(key string, v *yaml.Node)) {
	seen := map[string]int{}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := yamlval.Resolve(m.Content[i]), yamlval.Resolve(m.Content[i+1])
		if k.Kind != yaml.ScalarNode {
			y.Errorf(k, "", "%s: keys must be plain words, not %s", what, yamlval.Describe(k))
			continue
		}
		key := k.Value
		if first, dup := seen[key]; dup {
			y.Errorf(k, "remove one of them", "%s: duplicate key %q (first on line %d)", what, key, first)
			continue
		}
		seen[key] = k.Line + y.Offset
		if !slices.Contains(known, key) {
			y.Unknown(k, what+": ", known)
			continue
		}
		set(key, v)
	}
}

// str decodes a string. ok is false for null (not set) and for errors,
// which are reported.
func (y yamlFile) str(key string, v *yaml.Node) (string, bool) {
	if yamlval.IsNull(v) {
		return "", false
	}
	if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!str" {
		y.Errorf(v, "put the value in quotes if it is meant as text", "%s must be a string, not %s", key, yamlval.Describe(v))
		return "", false
	}
	return v.Value, true
}

func (y yamlFile) integer(key string, v *yaml.Node, lo, hi int) (int, bool) {
	if yamlval.IsNull(v) {
		return 0, false
	}
	rng := fmt.Sprintf("a whole number from %d to %d", lo, hi)
	if hi == maxInt {
		rng = fmt.Sprintf("a whole number, at least %d", lo)
	}
	var n int
	if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!int" || v.Decode(&n) != nil {
		y.Errorf(v, "write "+rng+", without quotes", "%s must be %s, not %s", key, rng, yamlval.Describe(v))
		return 0, false
	}
	if n < lo || n > hi {
		y.Errorf(v, "write "+rng, "%s must be %s, not %d", key, rng, n)
		return 0, false
	}
	return n, true
}

const maxInt = int(^uint(0) >> 1)

// number decodes a positive number (a whole one or with decimals).
func (y yamlFile) number(key string, v *yaml.Node) (float64, bool) {
	if yamlval.IsNull(v) {
		return 0, false
	}
	const fix = "write a positive number without quotes, e.g. 20 or 12.5"
	var f float64
	if v.Kind != yaml.ScalarNode || (v.ShortTag() != "!!int" && v.ShortTag() != "!!float") || v.Decode(&f) != nil {
		y.Errorf(v, fix, "%s must be a number, not %s", key, yamlval.Describe(v))
		return 0, false
	}
	if !(f > 0) || math.IsInf(f, 0) {
		y.Errorf(v, fix, "%s must be positive, not %s", key, v.Value)
		return 0, false
	}
	return f, true
}

func (y yamlFile) boolean(key string, v *yaml.Node) (bool, bool) {
	if yamlval.IsNull(v) {
		return false, false
	}
	var b bool
	if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!bool" || v.Decode(&b) != nil {
		y.Errorf(v, "write true or false", "%s must be true or false, not %s", key, yamlval.Describe(v))
		return false, false
	}
	return b, true
}

func (y yamlFile) duration(key string, v *yaml.Node) (time.Duration, bool) {
	if yamlval.IsNull(v) {
		return 0, false
	}
	if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!str" {
		y.Errorf(v, yamlval.DurationFix, "%s must be a duration, not %s", key, yamlval.Describe(v))
		return 0, false
	}
	d, bad := yamlval.Duration(key, v.Value)
	if bad != "" {
		y.Errorf(v, yamlval.DurationFix, "%s", bad)
		return 0, false
	}
	return d, true
}

// item is one entry of a list value with its line in the file.
type item struct {
	val  string
	line int
}

// list decodes a list of strings. A single string is accepted too and split
// at commas, so "tags: glm" and "context: database, conventions" work.
func (y yamlFile) list(key string, v *yaml.Node) []item {
	if yamlval.IsNull(v) {
		return nil
	}
	var nodes []*yaml.Node
	switch v.Kind {
	case yaml.ScalarNode:
		nodes = []*yaml.Node{v}
	case yaml.SequenceNode:
		nodes = v.Content
	default:
		y.Errorf(v, "write a list, e.g. [a, b]", "%s must be a list of names, not %s", key, yamlval.Describe(v))
		return nil
	}
	var out []item
	for _, n := range nodes {
		n = yamlval.Resolve(n)
		if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
			y.Errorf(n, "write a list of names, e.g. [a, b]", "%s: each entry must be a name, not %s", key, yamlval.Describe(n))
			continue
		}
		for _, s := range splitNames(n.Value) {
			if s == "" {
				y.Errorf(n, "remove the empty entry", "%s: empty name", key)
				continue
			}
			out = append(out, item{val: s, line: n.Line + y.Offset})
		}
	}
	return out
}

func (y yamlFile) typ(key string, v *yaml.Node) (string, bool) {
	s, ok := y.str(key, v)
	if !ok {
		return "", false
	}
	if !slices.Contains(Types, s) {
		fix := "use one of: " + strings.Join(Types, ", ")
		if g := yamlval.Suggest(s, Types); g != "" {
			fix = fmt.Sprintf("did you mean %q? %s", g, fix)
		}
		y.Errorf(v, fix, "%s: unknown type %q", key, s)
		return "", false
	}
	return s, true
}

// name decodes a string that must pass ValidName (tool, node).
func (y yamlFile) name(key string, v *yaml.Node) (string, bool) {
	s, ok := y.str(key, v)
	if !ok {
		return "", false
	}
	if p := nameProblem(s); p != "" {
		y.Errorf(v, "names match "+namePattern, "%s: invalid name %q: %s", key, s, p)
		return "", false
	}
	return s, true
}
