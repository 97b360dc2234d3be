// Package yamlval is the one vocabulary of dispatch's YAML files
// (nodes.yaml, project.yaml, a spec's front matter): the Problem an
// operator is shown, with its file, line and fix, and the helpers that
// read YAML values and describe what was found instead.
package yamlval

import (
	"cmp"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Problem is one thing wrong in an input file, with where it is and how to
// fix it.
type Problem struct {
	File string // the file's path as the operator named it; may be empty
	Line int    // 1-based; 0 when the problem is not on one line
	Msg  string // what is wrong
	Fix  string // how to fix it; may be empty
	// Err is the underlying error, such as fs.ErrNotExist for a missing
	// file; nil for a problem in the content.
	Err error
}

// BadInput marks a problem as the operator's to fix (exit 2).
func (p *Problem) BadInput() bool { return true }

// Error formats the problem as "FILE:LINE: MSG" ("line N: MSG" without a
// file), followed by an indented "fix:" line when there is a fix.
func (p *Problem) Error() string {
	var b strings.Builder
	b.WriteString(p.File)
	if p.Line > 0 {
		if p.File != "" {
			b.WriteString(":")
		} else {
			b.WriteString("line ")
		}
		b.WriteString(strconv.Itoa(p.Line))
	}
	if b.Len() > 0 {
		b.WriteString(": ")
	}
	b.WriteString(p.Msg)
	if p.Fix != "" {
		b.WriteString("\n  fix: ")
		b.WriteString(p.Fix)
	}
	return b.String()
}

// Unwrap returns the underlying error.
func (p *Problem) Unwrap() error { return p.Err }

// Problems is every problem found in a set of files.
type Problems []*Problem

// BadInput marks the problems as the operator's to fix (exit 2).
func (ps Problems) BadInput() bool { return true }

// Error lists the problems, one per line (each followed by its fix line).
func (ps Problems) Error() string {
	parts := make([]string, len(ps))
	for i, p := range ps {
		parts[i] = p.Error()
	}
	return strings.Join(parts, "\n")
}

// Unwrap exposes the single problems to errors.Is and errors.As.
func (ps Problems) Unwrap() []error {
	out := make([]error, len(ps))
	for i, p := range ps {
		out[i] = p
	}
	return out
}

// Sort orders the problems by file, then line, keeping the order of those
// on one line.
func (ps Problems) Sort() {
	slices.SortStableFunc(ps, func(a, b *Problem) int {
		return cmp.Or(cmp.Compare(a.File, b.File), cmp.Compare(a.Line, b.Line))
	})
}

// Doc reports problems of one YAML text: Offset is added to the YAML's own
// line numbers (1 for front matter, which starts after the opening "---").
type Doc struct {
	Problems *Problems
	File     string
	Offset   int
}

// Errorf reports a problem at n's line (none for a nil n).
func (d Doc) Errorf(n *yaml.Node, fix, format string, args ...any) {
	line := 0
	if n != nil && n.Line > 0 {
		line = n.Line + d.Offset
	}
	d.ErrorAt(line, fix, format, args...)
}

// ErrorAt reports a problem at a line of the file.
func (d Doc) ErrorAt(line int, fix, format string, args ...any) {
	*d.Problems = append(*d.Problems, &Problem{File: d.File, Line: line, Msg: fmt.Sprintf(format, args...), Fix: fix})
}

// Unknown reports a key that is not one of known, with the likely one when
// it looks like a typo. where prefixes the message ("controller: ").
func (d Doc) Unknown(k *yaml.Node, where string, known []string) {
	fix := "known keys: " + strings.Join(known, ", ")
	if s := Suggest(k.Value, known); s != "" {
		fix = fmt.Sprintf("did you mean %q? %s", s, fix)
	}
	d.Errorf(k, fix, "%sunknown key %q", where, k.Value)
}

var yamlLineRE = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// SyntaxError returns the 1-based line and the message of a yaml.v3
// syntax error in src. yaml.v3 prints 0-based lines for parser errors and
// 1-based ones for scanner errors, and the line of the enclosing block for
// some problems (a tab in the indentation: the tab's own line is given; a
// block broken by a mis-indented line: that line is given), so the line is
// where to start looking.
func SyntaxError(err error, src []byte) (line int, msg string) {
	line, msg = 1, strings.TrimPrefix(err.Error(), "yaml: ")
	m := yamlLineRE.FindStringSubmatch(err.Error())
	if m == nil {
		return line, msg
	}
	line, _ = strconv.Atoi(m[1])
	msg = m[2]
	lines := strings.Split(strings.TrimSuffix(string(src), "\n"), "\n")
	if isParserProblem(msg) {
		line++
		// The parser names the line of the block it was in (a node's
		// "- name:" line for a key indented one space too far five lines
		// below). The offending line is the first one whose addition
		// makes the document fail with the same problem.
		for k := line; k <= len(lines); k++ {
			var n yaml.Node
			err := yaml.Unmarshal([]byte(strings.Join(lines[:k], "\n")+"\n"), &n)
			if err == nil {
				continue
			}
			if m := yamlLineRE.FindStringSubmatch(err.Error()); m != nil && m[2] == msg {
				line = k
			}
			break
		}
	}
	if strings.Contains(msg, "tab") {
		for i, l := range lines {
			indent := l[:len(l)-len(strings.TrimLeft(l, " \t"))]
			if i+1 >= line && strings.Contains(indent, "\t") {
				line = i + 1
				break
			}
		}
	}
	// A problem found at the end of input is on the last line, not after it.
	return max(1, min(line, len(lines))), msg
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

// Resolve follows aliases to the node they name.
func Resolve(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

// IsNull reports whether n (or what it aliases) is YAML's null: a key
// written with no value, ~ or null.
func IsNull(n *yaml.Node) bool {
	n = Resolve(n)
	return n != nil && n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// Describe names what a node is, for "must be X, not Y" messages: a list,
// a mapping, empty, a string quoted, another scalar (a number, a bool) as
// written.
func Describe(n *yaml.Node) string {
	n = Resolve(n)
	if n == nil {
		return "nothing"
	}
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

var sizeUnits = map[string]float64{
	"": 1, "b": 1,
	"k": 1e3, "kb": 1e3, "m": 1e6, "mb": 1e6, "g": 1e9, "gb": 1e9, "t": 1e12, "tb": 1e12,
	"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
}

var sizeRE = regexp.MustCompile(`^([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)$`)

// parseSize reads a byte count: plain bytes, or a number with a unit where
// K/M/G/T and KB/MB/GB/TB are powers of 1000 and KiB/MiB/GiB/TiB powers of
// 1024. Units are case-insensitive; fractions of a byte are dropped.
func parseSize(s string) (int64, error) {
	m := sizeRE.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return 0, fmt.Errorf("%q is not a size", s)
	}
	mult, ok := sizeUnits[strings.ToLower(m[2])]
	if !ok {
		return 0, fmt.Errorf("%q has an unknown unit %q", s, m[2])
	}
	if !strings.Contains(m[1], ".") {
		n, err := strconv.ParseInt(m[1], 10, 64)
		if err == nil && (mult == 1 || n <= math.MaxInt64/int64(mult)) {
			return n * int64(mult), nil
		}
		return 0, fmt.Errorf("%q is too large", s)
	}
	f, err := strconv.ParseFloat(m[1], 64)
	if err != nil || f*mult >= math.MaxInt64 {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return int64(f * mult), nil
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
