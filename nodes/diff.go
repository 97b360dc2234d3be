package nodes

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
)

// ConfigDiff is what changed from one nodes.yaml to the next, as a running
// controller that re-reads the file sees it.
type ConfigDiff struct {
	Added, Removed []string // node names, in file order
	Changed        []NodeChange
	// Sections lists the other parts of the file that changed: controller,
	// api_modes, routes, tools, notify.
	Sections []string
}

// NodeChange is a node present in both files whose settings differ.
type NodeChange struct {
	Name   string
	Fields []string // the keys of nodes.yaml that changed
	// Reach is set when how the node is reached changed (ssh,
	// strict_host_key_checking, work_dir): its attempts running under
	// the old settings can only be followed with the old connection.
	Reach bool
}

// Empty reports whether nothing changed.
func (d ConfigDiff) Empty() bool {
	return len(d.Added) == 0 && len(d.Removed) == 0 && len(d.Changed) == 0 && len(d.Sections) == 0
}

// String says what changed, in one line.
func (d ConfigDiff) String() string {
	if d.Empty() {
		return "no change"
	}
	var parts []string
	if len(d.Added) > 0 {
		parts = append(parts, "added "+strings.Join(d.Added, ", "))
	}
	if len(d.Removed) > 0 {
		parts = append(parts, "removed "+strings.Join(d.Removed, ", "))
	}
	for _, c := range d.Changed {
		parts = append(parts, fmt.Sprintf("changed %s (%s)", c.Name, strings.Join(c.Fields, ", ")))
	}
	if len(d.Sections) > 0 {
		parts = append(parts, "changed "+strings.Join(d.Sections, ", "))
	}
	return strings.Join(parts, "; ")
}

// Diff compares two parsed nodes.yaml files. It does no I/O.
func Diff(old, new *Config) ConfigDiff {
	var d ConfigDiff
	for _, n := range new.Nodes {
		o, ok := old.Node(n.Name)
		if !ok {
			d.Added = append(d.Added, n.Name)
			continue
		}
		if c := NodeDiff(o, n); len(c.Fields) > 0 {
			d.Changed = append(d.Changed, c)
		}
	}
	for _, o := range old.Nodes {
		if _, ok := new.Node(o.Name); !ok {
			d.Removed = append(d.Removed, o.Name)
		}
	}
	for _, s := range []struct {
		name     string
		old, new any
	}{
		{"controller", old.Controller, new.Controller},
		{"api_modes", old.APIModes, new.APIModes},
		{"routes", old.Routes, new.Routes},
		{"tools", old.Tools, new.Tools},
		{"notify", old.Notify, new.Notify},
	} {
		if !reflect.DeepEqual(s.old, s.new) {
			d.Sections = append(d.Sections, s.name)
		}
	}
	return d
}

// NodeDiff lists the keys of a node that differ between two files.
func NodeDiff(o, n Node) NodeChange {
	c := NodeChange{Name: n.Name}
	diff := func(key string, reach, differs bool) {
		if differs {
			c.Fields = append(c.Fields, key)
			c.Reach = c.Reach || reach
		}
	}
	diff("ssh", true, o.SSH != n.SSH)
	diff("strict_host_key_checking", true, o.StrictHostKeyChecking != n.StrictHostKeyChecking)
	diff("work_dir", true, o.WorkDir != n.WorkDir)
	diff("slots", false, o.Slots != n.Slots)
	diff("spares", false, o.Spares != n.Spares)
	diff("api_mode", false, o.APIMode != n.APIMode)
	diff("api_modes", false, !slices.Equal(o.APIModes, n.APIModes))
	diff("tool", false, o.Tool != n.Tool)
	diff("min_free_mem", false, o.MinFreeMem != n.MinFreeMem)
	diff("tags", false, !slices.Equal(o.Tags, n.Tags))
	diff("dangerous", false, o.Dangerous != n.Dangerous)
	diff("stall_timeout", false, o.Stall != n.Stall)
	diff("sandbox_paths", false, !slices.Equal(o.SandboxPaths.RO, n.SandboxPaths.RO) || !slices.Equal(o.SandboxPaths.RW, n.SandboxPaths.RW))
	return c
}
