package spec

import (
	"cmp"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Error is one problem in a project's files.
type Error struct {
	File string // path of the file, as built from the specsDir given to Load
	Line int    // 1-based line in File; 0 when the problem is not on one line
	Msg  string // what is wrong
	Fix  string // how to fix it; may be empty
}

// Error formats the problem as "FILE:LINE: MSG", followed by an indented
// "fix:" line when there is a fix.
// BadInput marks a spec problem as the operator's to fix (exit 2).
func (e *Error) BadInput() bool { return true }

func (e *Error) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		if e.Line > 0 {
			b.WriteString(":")
			b.WriteString(strconv.Itoa(e.Line))
		}
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	if e.Fix != "" {
		b.WriteString("\n  fix: ")
		b.WriteString(e.Fix)
	}
	return b.String()
}

// Errors is every problem Load found, ordered by file and line.
type Errors []*Error

// Error lists the problems, one per line (each followed by its fix line).
// BadInput marks spec problems as the operator's to fix (exit 2).
func (es Errors) BadInput() bool { return true }

func (es Errors) Error() string {
	parts := make([]string, len(es))
	for i, e := range es {
		parts[i] = e.Error()
	}
	return strings.Join(parts, "\n")
}

// Unwrap exposes the single problems to errors.Is and errors.As.
func (es Errors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}

func (es Errors) sort() {
	slices.SortStableFunc(es, func(a, b *Error) int {
		return cmp.Or(cmp.Compare(a.File, b.File), cmp.Compare(a.Line, b.Line))
	})
}

// UnknownProjectError is returned by Load when specs/<Name> is not a
// project directory.
type UnknownProjectError struct {
	Name     string   // the requested project
	SpecsDir string   // where it was looked for
	Known    []string // the projects that do exist, sorted; see Projects
}

// Error names the project and lists the known ones, or says how to create
// a project when there are none.
// BadInput marks an unknown project as the operator's to fix (exit 2).
func (e *UnknownProjectError) BadInput() bool { return true }

func (e *UnknownProjectError) Error() string {
	if len(e.Known) == 0 {
		return fmt.Sprintf("unknown project %q: %s has no projects; create one by writing %s",
			e.Name, e.SpecsDir, examplePath(e.SpecsDir, e.Name))
	}
	msg := fmt.Sprintf("unknown project %q in %s; known projects: %s",
		e.Name, e.SpecsDir, strings.Join(e.Known, ", "))
	if s := Suggest(e.Name, e.Known); s != "" {
		msg += fmt.Sprintf(" (did you mean %q?)", s)
	}
	return msg
}

func examplePath(specsDir, name string) string {
	return filepath.Join(specsDir, name, "S01-<title>.md")
}

// Suggest returns the candidate closest to s when it is close enough to be
// a likely typo or the only one s abbreviates, else "". The "did you mean"
// of every configuration error uses it.
func Suggest(s string, candidates []string) string {
	best, bestD := "", 3
	ls := strings.ToLower(s)
	var prefixed []string
	for _, c := range candidates {
		if len(s) >= 3 && strings.HasPrefix(strings.ToLower(c), ls) {
			prefixed = append(prefixed, c)
		}
	}
	if len(prefixed) == 1 {
		return prefixed[0]
	}
	for _, c := range candidates {
		if d := editDistance(ls, strings.ToLower(c)); d < bestD && d <= len(s)/3+1 {
			best, bestD = c, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
