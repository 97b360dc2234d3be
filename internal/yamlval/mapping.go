package yamlval

import (
	"gopkg.in/yaml.v3"
)

// Pair is one key and its value in a mapping, both resolved.
type Pair struct {
	Key, Val *yaml.Node
}

// Mapping is the one reader of a mapping's keys for nodes.yaml,
// project.yaml, front matter and their sections: it returns n's pairs in
// order with "<<" merge keys expanded (a mapping, or a list of them; a key
// written in n wins over a merged one), and reports each key that is not a
// plain word and each duplicate, the same way everywhere. what names the
// mapping in messages ("front matter", "notify", `node "a"`). false when n
// is not a mapping (reported).
func (d Doc) Mapping(n *yaml.Node, what string) ([]Pair, bool) {
	n = Resolve(n)
	if n.Kind != yaml.MappingNode {
		d.Errorf(n, "write "+what+" as key: value lines", "%s must be a mapping, not %s", what, Describe(n))
		return nil, false
	}
	var pairs, merged []Pair
	seen := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := Resolve(n.Content[i]), Resolve(n.Content[i+1])
		if k.Tag == "!!merge" {
			srcs := []*yaml.Node{v}
			if v.Kind == yaml.SequenceNode {
				srcs = v.Content
			}
			for _, src := range srcs {
				if sub, ok := d.Mapping(src, "a merged value (<<) in "+what); ok {
					merged = append(merged, sub...)
				}
			}
			continue
		}
		if k.Kind != yaml.ScalarNode {
			d.Errorf(k, "use plain words as keys", "%s: keys must be plain words, not %s", what, Describe(k))
			continue
		}
		if first, dup := seen[k.Value]; dup {
			d.Errorf(k, "remove one of them", "%s: duplicate key %q (first on line %d)", what, k.Value, first.Line+d.Offset)
			continue
		}
		seen[k.Value] = k
		pairs = append(pairs, Pair{k, v})
	}
	for _, kv := range merged {
		if _, dup := seen[kv.Key.Value]; !dup {
			seen[kv.Key.Value] = kv.Key
			pairs = append(pairs, kv)
		}
	}
	return pairs, true
}
