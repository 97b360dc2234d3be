package spec

import (
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/internal/yamlval"
)

// MaxMatrix is the most tasks one spec's matrix may make.
const MaxMatrix = 10000

// TaskIDPattern matches the ID of any task of a loaded project: a spec's
// (S01), or one its matrix (S01.2), its broadcast (S01@mac1) or both
// (S01.2@mac1) made.
var TaskIDPattern = regexp.MustCompile(`^[A-Z][0-9]+(\.[1-9][0-9]*)?(@[A-Za-z0-9][A-Za-z0-9._-]*)?$`)

// depPattern is what depends_on may name: a spec, or one task of a matrix.
// A broadcast's tasks are made at start, so only its spec can be named.
var depPattern = regexp.MustCompile(`^[A-Z][0-9]+(\.[1-9][0-9]*)?$`)

// matrixKeyRE is a matrix key, as {{key}} names it.
var matrixKeyRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// placeholderRE is a {{key}} in a matrix spec's body.
var placeholderRE = regexp.MustCompile(`\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}`)

const matrixExample = "write matrix: {pkg: [net/http, strings]} and use {{pkg}} in the title and body"

// matrix is a spec's matrix: its keys with their values, in the order
// written until checkMatrix sorts them.
type matrix struct {
	keys   []string
	values [][]string
}

func (m *matrix) set(key string, vals []string) {
	if i := slices.Index(m.keys, key); i >= 0 {
		m.values[i] = vals
		return
	}
	m.keys, m.values = append(m.keys, key), append(m.values, vals)
}

// size is the number of combinations, as a float so that it cannot
// overflow.
func (m *matrix) size() float64 {
	n := 1.0
	for _, v := range m.values {
		n *= float64(len(v))
	}
	return n
}

func (m *matrix) placeholders() string {
	var out []string
	for _, k := range m.keys {
		out = append(out, "{{"+k+"}}")
	}
	return strings.Join(out, ", ")
}

// fanKey reads the front matter keys of fan-out (matrix, matrix_file,
// nodes) and the per-task settings env and retry_backoff.
func (l *loader) fanKey(y yamlFile, p *parsed, key string, v *yaml.Node) {
	t := p.task
	switch key {
	case "matrix":
		p.matrixAt = v
		l.matrixValues(y, p, v)
	case "matrix_file":
		p.matrixFileAt = v
		l.matrixFiles(y, p, v)
	case "nodes":
		t.Broadcast = y.broadcast(v)
	case "env":
		t.Env = y.Env(v, "env")
	case "retry_backoff":
		if d, ok := y.Duration(v, "", key); ok {
			if d <= 0 {
				y.Errorf(v, "write a duration such as 30s", "retry_backoff must be positive")
			} else {
				t.RetryBackoff = d
			}
		}
	}
}

func cmpNode(a, b *yaml.Node) *yaml.Node {
	if a != nil {
		return a
	}
	return b
}

// matrixLine is the line of the spec's matrix (or matrix_file).
func (p *parsed) matrixLine() int {
	for _, at := range []*yaml.Node{p.matrixAt, p.matrixFileAt} {
		if at != nil {
			return at.Line + 1 // the front matter starts on line 2
		}
	}
	return 0
}

func (p *parsed) matrixOf() *matrix {
	if p.matrix == nil {
		p.matrix = &matrix{}
	}
	return p.matrix
}

// matrixValues reads matrix: {key: [values], ...}.
func (l *loader) matrixValues(y yamlFile, p *parsed, v *yaml.Node) {
	pairs, ok := y.Mapping(v, "matrix")
	if !ok {
		return
	}
	m := p.matrixOf()
	if len(pairs) == 0 {
		y.Errorf(v, matrixExample, "matrix has no keys")
	}
	for _, kv := range pairs {
		key := kv.Key.Value
		if !matrixKeyRE.MatchString(key) {
			y.Errorf(kv.Key, "use letters, digits and '_', not starting with a digit", "matrix: %q cannot be a key ({{%s}})", key, key)
			continue
		}
		var vals []string
		switch seq := kv.Val; {
		case seq.Kind != yaml.SequenceNode:
			y.Errorf(seq, fmt.Sprintf("write %s: [a, b]", key), "matrix.%s must be a list of values, not %s", key, yamlval.Describe(seq))
		case len(seq.Content) == 0:
			y.Errorf(seq, "give it at least one value, or remove the key", "matrix.%s is an empty list", key)
		default:
			for _, n := range seq.Content {
				n = yamlval.Resolve(n)
				if n.Kind != yaml.ScalarNode || yamlval.IsNull(n) {
					y.Errorf(n, "write each value as text (quote it if it holds ': ' or starts with '{' or '[')",
						"matrix.%s: each value must be a single value, not %s", key, yamlval.Describe(n))
					continue
				}
				vals = append(vals, n.Value)
			}
		}
		m.set(key, vals)
	}
}

// matrixFiles reads matrix_file: FILE (the key is the file's name without
// its extension) or {key: FILE, ...}: one value a line, blank lines and
// lines starting with '#' skipped.
func (l *loader) matrixFiles(y yamlFile, p *parsed, v *yaml.Node) {
	type entry struct {
		key string
		at  *yaml.Node
	}
	var entries []entry
	switch yamlval.Resolve(v).Kind {
	case yaml.ScalarNode:
		s, ok := y.String(v, "", "matrix_file")
		if !ok {
			return
		}
		key := strings.TrimSuffix(filepath.Base(s), filepath.Ext(s))
		if !matrixKeyRE.MatchString(key) {
			y.Errorf(v, fmt.Sprintf("name the key: matrix_file: {pkg: %s}", s),
				"matrix_file: the key would be %q (the file's name without its extension), which cannot be a {{key}}", key)
			return
		}
		entries = append(entries, entry{key, v})
	case yaml.MappingNode:
		pairs, _ := y.Mapping(v, "matrix_file")
		for _, kv := range pairs {
			if !matrixKeyRE.MatchString(kv.Key.Value) {
				y.Errorf(kv.Key, "use letters, digits and '_', not starting with a digit", "matrix_file: %q cannot be a key ({{%s}})", kv.Key.Value, kv.Key.Value)
				continue
			}
			entries = append(entries, entry{kv.Key.Value, kv.Val})
		}
	default:
		y.Errorf(v, "write matrix_file: pkgs.txt or matrix_file: {pkg: pkgs.txt}", "matrix_file must be a file name or a mapping, not %s", yamlval.Describe(v))
		return
	}
	m := p.matrixOf()
	for _, e := range entries {
		m.set(e.key, l.matrixFileValues(y, e.key, e.at))
	}
}

// matrixFileValues reads the values of one matrix file.
func (l *loader) matrixFileValues(y yamlFile, key string, at *yaml.Node) []string {
	s, ok := y.String(at, "", "matrix_file")
	if !ok {
		return nil
	}
	rel, ok := l.inside(y, "matrix_file", at, s, false)
	if !ok {
		return nil
	}
	text, _, ok := l.readText(l.path(filepath.FromSlash(rel)))
	if !ok {
		return nil
	}
	var vals []string
	for _, line := range splitLines(text) {
		line = strings.TrimSpace(line)
		if line != "" && !strings.HasPrefix(line, "#") {
			vals = append(vals, line)
		}
	}
	if len(vals) == 0 {
		y.Errorf(at, "write one value a line in "+rel, "matrix_file %s has no values for {{%s}} (blank lines and # lines are skipped)", rel, key)
	}
	return vals
}

// checkMatrix checks what fan-out keys say together, once the front
// matter is read.
func (l *loader) checkMatrix(y yamlFile, p *parsed) {
	t := p.task
	if b := t.Broadcast; b != nil && t.Node != "" {
		y.ErrorAt(b.Line, "remove node: (nodes: pins one task to each node) or nodes: (to run once on that node)", "nodes: and node: are both set")
	}
	if at := cmpNode(p.matrixAt, p.matrixFileAt); domain.IsPhaseID(t.ID) && (at != nil || t.Broadcast != nil) {
		line := p.matrixLine()
		if line == 0 {
			line = t.Broadcast.Line
		}
		y.ErrorAt(line, "fan out an author task (S01…) instead", "%s is a task of the integration phase, which runs once: it cannot have matrix:, matrix_file: or nodes:", t.ID)
	}
	if p.matrixAt != nil && p.matrixFileAt != nil {
		y.Errorf(p.matrixFileAt, "keep one: the values under matrix:, or every key in a file with matrix_file: {key: FILE, ...}",
			"matrix and matrix_file are both set")
	}
	m := p.matrix
	if m == nil {
		return
	}
	at := cmpNode(p.matrixAt, p.matrixFileAt)
	if n := m.size(); n > MaxMatrix {
		y.Errorf(at, fmt.Sprintf("make at most %d tasks from one spec: split it, or shorten the lists", MaxMatrix),
			"matrix makes %.0f tasks, more than %d", n, MaxMatrix)
	}
	order := make([]int, len(m.keys))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return strings.Compare(m.keys[a], m.keys[b]) })
	sorted := &matrix{}
	for _, i := range order {
		sorted.set(m.keys[i], m.values[i])
	}
	p.matrix = sorted
}

// checkPlaceholders reports each {{name}} on a line of a matrix spec's
// body that is not one of its keys.
func (l *loader) checkPlaceholders(path string, line int, text string, m *matrix) {
	for _, sm := range placeholderRE.FindAllStringSubmatch(text, -1) {
		if slices.Contains(m.keys, sm[1]) {
			continue
		}
		fix := "use one of the matrix's keys, or add " + sm[1] + " to matrix:"
		if g := yamlval.Suggest(sm[1], m.keys); g != "" {
			fix = fmt.Sprintf("did you mean {{%s}}? ", g) + fix
		}
		l.add(path, line, fmt.Sprintf("unknown {{%s}}: the matrix has %s", sm[1], m.placeholders()), fix)
	}
}

// substitute replaces each {{key}} of s with its value, in one pass: a
// value holding "{{" is not expanded again.
func substitute(s string, vars map[string]string) string {
	if !strings.Contains(s, "{{") {
		return s
	}
	return placeholderRE.ReplaceAllStringFunc(s, func(ph string) string {
		if v, ok := vars[placeholderRE.FindStringSubmatch(ph)[1]]; ok {
			return v
		}
		return ph
	})
}

// expandMatrix makes the tasks of a matrix spec: one per combination of
// its values (the first key, in sorted order, varying slowest), IDs
// <ID>.1 ... <ID>.N, {{key}} substituted in the title and body.
func expandMatrix(p *parsed) []*parsed {
	m := p.matrix
	n := int(m.size())
	out := make([]*parsed, 0, n)
	idx := make([]int, len(m.keys))
	for i := 1; i <= n; i++ {
		vars := make(map[string]string, len(m.keys))
		vals := make([]string, len(m.keys))
		for k, key := range m.keys {
			vars[key], vals[k] = m.values[k][idx[k]], m.values[k][idx[k]]
		}
		for k := len(idx) - 1; k >= 0; k-- {
			if idx[k]++; idx[k] < len(m.values[k]) {
				break
			}
			idx[k] = 0
		}
		c := *p.task
		c.ID, c.Parent, c.Vars = fmt.Sprintf("%s.%d", p.task.ID, i), p.task.ID, vars
		c.DependsOn, c.Tags = slices.Clone(p.task.DependsOn), slices.Clone(p.task.Tags)
		body := make([]string, len(p.body))
		for j, line := range p.body {
			body[j] = substitute(line, vars)
		}
		if c.Title = title(body, p.file); c.Title == p.task.Title {
			c.Title += " (" + strings.Join(vals, ", ") + ")"
		}
		setHash(&c, body, p.sections)
		out = append(out, &parsed{task: &c, depLines: p.depLines, file: p.file})
	}
	return out
}

// expandMatrices replaces each matrix spec of all by its tasks (adding
// their IDs to known) and points depends_on at a matrix spec to every
// one of its tasks.
func (l *loader) expandMatrices(all []*parsed, known map[string]string) []*parsed {
	groups := map[string][]string{}
	out := make([]*parsed, 0, len(all))
	for _, p := range all {
		if p.matrix == nil {
			out = append(out, p)
			continue
		}
		for _, c := range expandMatrix(p) {
			if first, dup := known[c.task.ID]; dup {
				l.add(l.path(p.file.name), p.matrixLine(), fmt.Sprintf("duplicate task ID %s: made by this matrix, and by %s", c.task.ID, first),
					"give one of the specs another ID")
				continue
			}
			known[c.task.ID] = p.file.name
			groups[p.task.ID] = append(groups[p.task.ID], c.task.ID)
			out = append(out, c)
		}
	}
	for _, p := range out {
		p.task.DependsOn, p.depLines = expandDeps(p.task.DependsOn, p.depLines, groups)
	}
	return out
}

// expandDeps replaces each dependency on a group's spec by its tasks,
// each at the line the spec was named on.
func expandDeps(deps []string, lines map[string]int, groups map[string][]string) ([]string, map[string]int) {
	if !slices.ContainsFunc(deps, func(d string) bool { return groups[d] != nil }) {
		return deps, lines
	}
	var out []string
	at := map[string]int{}
	for _, d := range deps {
		kids := groups[d]
		if kids == nil {
			kids = []string{d}
		}
		for _, k := range kids {
			if _, dup := at[k]; !dup {
				at[k] = lines[d]
				out = append(out, k)
			}
		}
	}
	return out, at
}
