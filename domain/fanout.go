package domain

import (
	"cmp"
	"strconv"
	"strings"
)

// SpecID is the ID of the spec a task was made from: S01 for S01.2 (a
// matrix's), S01@mac1 (a broadcast's) and S01.2@mac1; a task's own ID
// otherwise.
func SpecID(id string) string {
	if i := strings.IndexAny(id, ".@"); i > 0 {
		return id[:i]
	}
	return id
}

// CompareIDs orders task IDs as people read them: by spec, then by matrix
// number as a number (S01.2 before S01.10), then by node.
func CompareIDs(a, b string) int {
	if c := strings.Compare(SpecID(a), SpecID(b)); c != 0 {
		return c
	}
	na, nodeA := idParts(a)
	nb, nodeB := idParts(b)
	if c := cmp.Compare(na, nb); c != 0 {
		return c
	}
	if c := strings.Compare(nodeA, nodeB); c != 0 {
		return c
	}
	return strings.Compare(a, b)
}

// idParts splits a task ID's matrix number (0 for none) and node.
func idParts(id string) (n int, node string) {
	rest := id[len(SpecID(id)):]
	rest, node, _ = strings.Cut(rest, "@")
	if num, ok := strings.CutPrefix(rest, "."); ok {
		n, _ = strconv.Atoi(num)
	}
	return n, node
}
