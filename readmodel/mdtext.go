package readmodel

import "strings"

// mdCode puts text that came from a node, a task or an error into an inline
// code span of report.md: on one line, fenced with more backticks than it
// holds, so nothing in it can close the span or start a section.
func mdCode(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	longest, run := 0, 0
	for _, r := range s {
		if r == '`' {
			run++
			longest = max(longest, run)
		} else {
			run = 0
		}
	}
	fence := strings.Repeat("`", longest+1)
	return fence + " " + s + " " + fence
}
