package spec

import (
	"fmt"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/dispatch-tool/dispatch/internal/yamlval"
)

// Broadcast is a spec's nodes: all, or {tags: [...]}: one task per
// eligible node.
type Broadcast struct {
	All  bool     // nodes: all
	Tags []string // nodes: {tags: [...]}: the nodes with all of these
	Line int      // where nodes: is written
}

// Node is what ExpandBroadcast needs to know of a node of nodes.yaml.
type Node struct {
	Name string
	Tags []string
}

const broadcastExample = "write nodes: all, or nodes: {tags: [gpu]}"

// broadcast reads nodes: all or nodes: {tags: [...]}.
func (y yamlFile) broadcast(v *yaml.Node) *Broadcast {
	b := &Broadcast{Line: v.Line + y.Offset}
	switch yamlval.Resolve(v).Kind {
	case yaml.ScalarNode:
		if v.Value != "all" {
			y.Errorf(v, broadcastExample, "nodes: %q is neither all nor {tags: [...]}", v.Value)
			return nil
		}
		b.All = true
		return b
	case yaml.MappingNode:
	default:
		y.Errorf(v, broadcastExample, "nodes must be all or a mapping, not %s", yamlval.Describe(v))
		return nil
	}
	y.fields(v, "nodes", []string{"tags"}, func(key string, n *yaml.Node) {
		for _, it := range y.list("nodes.tags", n) {
			if pr := nameProblem(it.val); pr != "" {
				y.ErrorAt(it.line, "tags match "+namePattern, "nodes.tags: invalid tag %q: %s", it.val, pr)
				continue
			}
			if !slices.Contains(b.Tags, it.val) {
				b.Tags = append(b.Tags, it.val)
			}
		}
	})
	if len(b.Tags) == 0 {
		y.Errorf(v, broadcastExample, "nodes: {} names no tags")
		return nil
	}
	return b
}

// ExpandBroadcast replaces each task with a Broadcast by one task per
// eligible node — every node, or those with all of nodes.tags, that also
// has all of the task's tags: — in the order of nodes, pinned to it, with
// the ID <ID>@<node>, and points depends_on at its spec (or at one of
// its matrix's tasks) to all of them. A broadcast no node is eligible for
// is an error at its line. Tasks are sorted again; a project without
// broadcasts is left as it is.
func (p *Project) ExpandBroadcast(nodes []Node) error {
	if !slices.ContainsFunc(p.Tasks, func(t *Task) bool { return t.Broadcast != nil }) {
		return nil
	}
	var errs Errors
	groups := map[string][]string{}
	var out []*Task
	for _, t := range p.Tasks {
		b := t.Broadcast
		if b == nil {
			out = append(out, t)
			continue
		}
		for _, n := range nodes {
			if !hasAll(n.Tags, b.Tags) || !hasAll(n.Tags, t.Tags) {
				continue
			}
			c := *t
			c.ID, c.Node, c.Broadcast = t.ID+"@"+n.Name, n.Name, nil
			c.Parent = cmpOr(t.Parent, t.ID)
			c.DependsOn, c.Tags = slices.Clone(t.DependsOn), slices.Clone(t.Tags)
			groups[t.ID] = append(groups[t.ID], c.ID)
			out = append(out, &c)
		}
		if groups[t.ID] == nil && (t.Parent == "" || !slices.ContainsFunc(errs, func(e *Error) bool { return e.File == t.File && e.Line == b.Line })) {
			errs = append(errs, &Error{File: t.File, Line: b.Line, Msg: fmt.Sprintf("nodes: no node is eligible for %s (%s)", cmpOr(t.Parent, t.ID), b.want(t)),
				Fix: fmt.Sprintf("give a node of nodes.yaml the tags, or change nodes:; the nodes: %s", nodeList(nodes))})
		}
	}
	if len(errs) > 0 {
		return errs
	}
	for _, t := range out {
		t.DependsOn, _ = expandDeps(t.DependsOn, nil, groups)
	}
	slices.SortFunc(out, func(a, b *Task) int { return strings.Compare(a.ID, b.ID) })
	p.Tasks = out
	return nil
}

func (b *Broadcast) want(t *Task) string {
	tags := append(slices.Clone(b.Tags), t.Tags...)
	if len(tags) == 0 {
		return "nodes: all"
	}
	return "needs the tags " + strings.Join(tags, ", ")
}

func nodeList(nodes []Node) string {
	var out []string
	for _, n := range nodes {
		s := n.Name
		if len(n.Tags) > 0 {
			s += " [" + strings.Join(n.Tags, ", ") + "]"
		}
		out = append(out, s)
	}
	if len(out) == 0 {
		return "(none)"
	}
	return strings.Join(out, ", ")
}

func hasAll(have, want []string) bool {
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}
