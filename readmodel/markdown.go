package readmodel

import "strings"

// What tasks and nodes wrote (log tails, errors, verdict issues, conflict
// paths) goes into report.md through these, so that none of it can close
// the report's code blocks or begin a section of its own.

// longestRun is the length of the longest run of c in s.
func longestRun(s string, c byte) int {
	longest, n := 0, 0
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			n++
			longest = max(longest, n)
		} else {
			n = 0
		}
	}
	return longest
}

// mdFence returns text as a fenced code block whose fence is longer than
// any run of backticks in text: no line of text closes it (a closing
// fence is at least as long as the opening one).
func mdFence(text string) string {
	fence := strings.Repeat("`", max(3, longestRun(text, '`')+1))
	return fence + "\n" + text + "\n" + fence + "\n"
}

// mdCode returns s as one inline code span on one line: its delimiter is
// longer than any run of backticks in s, and newlines (which would end the
// span's paragraph and let the next line begin a block) become spaces.
func mdCode(s string) string {
	s = oneLine(s)
	delim := strings.Repeat("`", longestRun(s, '`')+1)
	if strings.HasPrefix(s, "`") || strings.HasSuffix(s, "`") || (strings.HasPrefix(s, " ") && strings.HasSuffix(s, " ")) {
		s = " " + s + " "
	}
	return delim + s + delim
}

// mdLine returns s as text on one line that begins no block of its own:
// newlines become spaces and a leading character that could begin one (a
// heading's #, a quote, a list, a fence, HTML) is escaped.
func mdLine(s string) string {
	s = strings.TrimLeft(oneLine(s), " ")
	if s == "" {
		return s
	}
	if c := s[0]; c < 0x80 && strings.IndexByte("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~", c) >= 0 {
		return `\` + s
	}
	// An ordered list marker: 1. or 1)
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	if i > 0 && i < len(s) && (s[i] == '.' || s[i] == ')') {
		return s[:i] + `\` + s[i:]
	}
	return s
}

// oneLine replaces line breaks with spaces.
func oneLine(s string) string {
	return strings.NewReplacer("\r\n", " ", "\n", " ", "\r", " ").Replace(s)
}
