package spec

import (
	"fmt"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/dispatch-tool/dispatch/internal/yamlval"
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

// fields calls set for each known key of m that has a value and reports
// unknown and duplicate keys. A key left empty is not set.
func (y yamlFile) fields(m *yaml.Node, what string, known []string, set func(key string, v *yaml.Node)) {
	if yamlval.Resolve(m).Kind != yaml.MappingNode {
		return // reported by the caller
	}
	pairs, _ := y.Mapping(m, what)
	for _, kv := range pairs {
		if !slices.Contains(known, kv.Key.Value) {
			y.Unknown(kv.Key, what+": ", known)
			continue
		}
		if !yamlval.IsNull(kv.Val) {
			set(kv.Key.Value, kv.Val)
		}
	}
}

// item is one entry of a list value with its line in the file.
type item struct {
	val  string
	line int
}

// list decodes a list of strings. A single string is accepted too and split
// at commas, so "tags: glm" and "context: database, conventions" work.
func (y yamlFile) list(key string, v *yaml.Node) []item {
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
	s, ok := y.String(v, "", key)
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
	s, ok := y.String(v, "", key)
	if !ok {
		return "", false
	}
	if p := nameProblem(s); p != "" {
		y.Errorf(v, "names match "+namePattern, "%s: invalid name %q: %s", key, s, p)
		return "", false
	}
	return s, true
}
