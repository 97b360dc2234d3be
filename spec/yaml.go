package spec

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// yamlFile decodes YAML from one file, reporting problems with lines of
// that file: offset is added to the YAML's own line numbers (1 for front
// matter, which starts after the opening "---").
type yamlFile struct {
	errs   *Errors
	file   string
	offset int
}

func (y yamlFile) errorf(n *yaml.Node, fix, format string, args ...any) {
	line := 0
	if n != nil && n.Line > 0 {
		line = n.Line + y.offset
	}
	*y.errs = append(*y.errs, &Error{File: y.file, Line: line, Msg: fmt.Sprintf(format, args...), Fix: fix})
}

var yamlLineRE = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// YAMLSyntaxError returns the 1-based line and the message of a yaml.v3
// syntax error in src. yaml.v3 prints 0-based lines for parser errors and
// 1-based ones for scanner errors, and the line of the enclosing block for
// some problems, so the line is where to start looking.
func YAMLSyntaxError(err error, src []byte) (line int, msg string) {
	line, msg = 1, strings.TrimPrefix(err.Error(), "yaml: ")
	if m := yamlLineRE.FindStringSubmatch(err.Error()); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = m[2]
		if isParserProblem(msg) {
			line++
		}
		// A problem found at the end of input is on the last line, not after it.
		line = max(1, min(line, len(splitLines(string(src)))))
	}
	return line, msg
}

// parse returns the top-level mapping, an empty mapping for an empty
// document, or nil after reporting a syntax error.
func (y yamlFile) parse(src string, what string) *yaml.Node {
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(src), &doc); err != nil {
		line, msg := YAMLSyntaxError(err, []byte(src))
		*y.errs = append(*y.errs, &Error{File: y.file, Line: line + y.offset, Msg: "invalid YAML in " + what + ": " + msg,
			Fix: "write " + what + " as YAML key: value lines"})
		return nil
	}
	if len(doc.Content) == 0 {
		return &yaml.Node{Kind: yaml.MappingNode}
	}
	root := deref(doc.Content[0])
	if isNull(root) {
		return &yaml.Node{Kind: yaml.MappingNode}
	}
	if root.Kind != yaml.MappingNode {
		y.errorf(root, "write "+what+" as YAML key: value lines", "%s must be a mapping of keys to values, not %s", what, describe(root))
		return nil
	}
	return root
}

// isParserProblem reports whether a yaml.v3 message comes from its parser
// (as opposed to its scanner); see parserc.go.
func isParserProblem(msg string) bool {
	for _, p := range []string{"did not find expected", "found undefined tag handle", "found duplicate %", "found incompatible YAML document"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// fields calls set for each known key of m and reports unknown and
// duplicate keys.
func (y yamlFile) fields(m *yaml.Node, what string, known []string, set func(key string, v *yaml.Node)) {
	seen := map[string]int{}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := deref(m.Content[i]), deref(m.Content[i+1])
		if k.Kind != yaml.ScalarNode {
			y.errorf(k, "", "%s: keys must be plain words, not %s", what, describe(k))
			continue
		}
		key := k.Value
		if first, dup := seen[key]; dup {
			y.errorf(k, "remove one of them", "%s: duplicate key %q (first on line %d)", what, key, first)
			continue
		}
		seen[key] = k.Line + y.offset
		if !slices.Contains(known, key) {
			fix := "known keys: " + strings.Join(known, ", ")
			if s := Suggest(key, known); s != "" {
				fix = fmt.Sprintf("did you mean %q? %s", s, fix)
			}
			y.errorf(k, fix, "%s: unknown key %q", what, key)
			continue
		}
		set(key, v)
	}
}

func deref(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// describe names what a node is, for "must be X, not Y" messages.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.SequenceNode:
		return "a list"
	case yaml.MappingNode:
		return "a mapping"
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!str":
			return strconv.Quote(n.Value)
		case "!!null":
			return "empty"
		}
		return n.Value
	}
	return "that"
}

// str decodes a string. ok is false for null (not set) and for errors,
// which are reported.
func (y yamlFile) str(key string, v *yaml.Node) (string, bool) {
	if isNull(v) {
		return "", false
	}
	if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!str" {
		y.errorf(v, "put the value in quotes if it is meant as text", "%s must be a string, not %s", key, describe(v))
		return "", false
	}
	return v.Value, true
}

func (y yamlFile) integer(key string, v *yaml.Node, lo, hi int) (int, bool) {
	if isNull(v) {
		return 0, false
	}
	rng := fmt.Sprintf("a whole number from %d to %d", lo, hi)
	if hi == maxInt {
		rng = fmt.Sprintf("a whole number, at least %d", lo)
	}
	var n int
	if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!int" || v.Decode(&n) != nil {
		y.errorf(v, "write "+rng+", without quotes", "%s must be %s, not %s", key, rng, describe(v))
		return 0, false
	}
	if n < lo || n > hi {
		y.errorf(v, "write "+rng, "%s must be %s, not %d", key, rng, n)
		return 0, false
	}
	return n, true
}

const maxInt = int(^uint(0) >> 1)

// number decodes a positive number (a whole one or with decimals).
func (y yamlFile) number(key string, v *yaml.Node) (float64, bool) {
	if isNull(v) {
		return 0, false
	}
	const fix = "write a positive number without quotes, e.g. 20 or 12.5"
	var f float64
	if v.Kind != yaml.ScalarNode || (v.ShortTag() != "!!int" && v.ShortTag() != "!!float") || v.Decode(&f) != nil {
		y.errorf(v, fix, "%s must be a number, not %s", key, describe(v))
		return 0, false
	}
	if !(f > 0) || math.IsInf(f, 0) {
		y.errorf(v, fix, "%s must be positive, not %s", key, v.Value)
		return 0, false
	}
	return f, true
}

func (y yamlFile) boolean(key string, v *yaml.Node) (bool, bool) {
	if isNull(v) {
		return false, false
	}
	var b bool
	if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!bool" || v.Decode(&b) != nil {
		y.errorf(v, "write true or false", "%s must be true or false, not %s", key, describe(v))
		return false, false
	}
	return b, true
}

func (y yamlFile) duration(key string, v *yaml.Node) (time.Duration, bool) {
	if isNull(v) {
		return 0, false
	}
	const fix = "write a positive duration with a unit, e.g. 45s, 30m or 1h30m"
	if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!str" {
		y.errorf(v, fix, "%s must be a duration, not %s", key, describe(v))
		return 0, false
	}
	d, err := time.ParseDuration(strings.TrimSpace(v.Value))
	if err != nil {
		y.errorf(v, fix, "%s: %q is not a duration", key, v.Value)
		return 0, false
	}
	if d <= 0 {
		y.errorf(v, fix, "%s must be positive, not %s", key, v.Value)
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
	if isNull(v) {
		return nil
	}
	var nodes []*yaml.Node
	switch v.Kind {
	case yaml.ScalarNode:
		nodes = []*yaml.Node{v}
	case yaml.SequenceNode:
		nodes = v.Content
	default:
		y.errorf(v, "write a list, e.g. [a, b]", "%s must be a list of names, not %s", key, describe(v))
		return nil
	}
	var out []item
	for _, n := range nodes {
		n = deref(n)
		if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
			y.errorf(n, "write a list of names, e.g. [a, b]", "%s: each entry must be a name, not %s", key, describe(n))
			continue
		}
		for _, s := range splitNames(n.Value) {
			if s == "" {
				y.errorf(n, "remove the empty entry", "%s: empty name", key)
				continue
			}
			out = append(out, item{val: s, line: n.Line + y.offset})
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
		if g := Suggest(s, Types); g != "" {
			fix = fmt.Sprintf("did you mean %q? %s", g, fix)
		}
		y.errorf(v, fix, "%s: unknown type %q", key, s)
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
		y.errorf(v, "names match "+namePattern, "%s: invalid name %q: %s", key, s, p)
		return "", false
	}
	return s, true
}
