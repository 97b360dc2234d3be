package spec

import (
	"bytes"
	"regexp"
	"strings"
	"unicode/utf8"
)

// maxFileSize guards against reading a huge or binary file by mistake; a
// spec is a prompt, not a data set.
const maxFileSize = 8 << 20

var bom = []byte("\xEF\xBB\xBF")

// decodeText checks that raw is UTF-8 and normalises it: BOM removed, CRLF
// and lone CR turned into LF. On invalid UTF-8 it returns the 1-based line
// of the first bad byte.
func decodeText(raw []byte) (text string, badLine int) {
	if !utf8.Valid(raw) {
		off := 0
		for off < len(raw) {
			r, size := utf8.DecodeRune(raw[off:])
			if r == utf8.RuneError && size <= 1 {
				break
			}
			off += size
		}
		return "", bytes.Count(raw[:off], []byte("\n")) + 1
	}
	raw = bytes.TrimPrefix(raw, bom)
	s := strings.ReplaceAll(string(raw), "\r\n", "\n")
	return strings.ReplaceAll(s, "\r", "\n"), 0
}

// splitLines splits normalised text into lines without their LF; a final LF
// does not start another line.
func splitLines(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(strings.TrimSuffix(s, "\n"), "\n")
}

// trimBlank drops leading and trailing lines that are empty or whitespace.
func trimBlank(lines []string) []string {
	for len(lines) > 0 && strings.TrimSpace(lines[0]) == "" {
		lines = lines[1:]
	}
	for len(lines) > 0 && strings.TrimSpace(lines[len(lines)-1]) == "" {
		lines = lines[:len(lines)-1]
	}
	return lines
}

// joinLines joins lines with LF and ends the text with exactly one LF.
func joinLines(lines []string) string {
	if len(lines) == 0 {
		return ""
	}
	return strings.Join(lines, "\n") + "\n"
}

// isDelimiter reports whether a line opens or closes front matter.
func isDelimiter(line string) bool {
	return strings.TrimRight(line, " \t") == "---"
}

// heading returns the text of an ATX heading of exactly the given level
// ("# " for 1, "## " for 2), without a closing run of '#'.
func heading(line string, level int) (string, bool) {
	rest, ok := strings.CutPrefix(line, strings.Repeat("#", level)+" ")
	if !ok {
		return "", false
	}
	rest = strings.TrimSpace(rest)
	if t := strings.TrimRight(rest, "#"); t != rest && (t == "" || strings.HasSuffix(t, " ") || strings.HasSuffix(t, "\t")) {
		rest = strings.TrimSpace(t)
	}
	return rest, true
}

// fence follows fenced code blocks (``` or ~~~) so that headings and
// @context lines inside examples are left alone.
type fence struct {
	ch byte
	n  int
}

// code reports whether line is a fence line or inside a fenced block.
func (f *fence) code(line string) bool {
	t := strings.TrimLeft(line, " ")
	if len(line)-len(t) > 3 {
		return f.n > 0
	}
	ch, n := fenceRun(t)
	if f.n == 0 {
		if n >= 3 {
			f.ch, f.n = ch, n
			return true
		}
		return false
	}
	if ch == f.ch && n >= f.n && strings.TrimSpace(t[n:]) == "" {
		f.n = 0
	}
	return true
}

func fenceRun(s string) (byte, int) {
	if s == "" || s[0] != '`' && s[0] != '~' {
		return 0, 0
	}
	n := 0
	for n < len(s) && s[n] == s[0] {
		n++
	}
	return s[0], n
}

// contextLine matches the seed's "@context: a, b" line.
var contextLine = regexp.MustCompile(`^\s*@context\s*:(.*)$`)

// splitNames splits a comma-separated list, trimming each name. Empty
// entries are returned as "" so the caller can complain.
func splitNames(s string) []string {
	parts := strings.Split(s, ",")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	return parts
}

// section is one "## " section of SHARED_CONTEXT.md.
type section struct {
	name string // heading text as written
	line int
	text string // normalised, from the heading line, ending in one LF
}

// parseSections splits SHARED_CONTEXT.md into its "## " sections. Text
// before the first one is not selectable.
func parseSections(lines []string) []section {
	var out []section
	var cur *section
	var body []string
	var f fence
	flush := func() {
		if cur != nil {
			cur.text = joinLines(trimBlank(body))
			out = append(out, *cur)
		}
		cur, body = nil, nil
	}
	for i, line := range lines {
		if !f.code(line) {
			if name, ok := heading(line, 2); ok {
				flush()
				if name != "" {
					cur = &section{name: name, line: i + 1}
				}
			} else if _, ok := heading(line, 1); ok {
				flush()
			}
		}
		if cur != nil {
			body = append(body, line)
		}
	}
	flush()
	return out
}

// contextKey is how context names are compared: trimmed, case-insensitive.
func contextKey(name string) string {
	return strings.ToLower(strings.TrimSpace(name))
}
