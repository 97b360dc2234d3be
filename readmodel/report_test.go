package readmodel

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/dispatch-tool/dispatch/domain"
)

func TestShortenLine(t *testing.T) {
	long := strings.Repeat("é", maxTailLine) // two bytes each
	tests := []struct{ in, want string }{
		{"short", "short"},
		{strings.Repeat("x", maxTailLine), strings.Repeat("x", maxTailLine)},
		{strings.Repeat("x", maxTailLine+1), strings.Repeat("x", maxTailLine) + fmt.Sprintf("… (%d bytes)", maxTailLine+1)},
		{long, strings.Repeat("é", maxTailLine/2) + fmt.Sprintf("… (%d bytes)", 2*maxTailLine)},
		{"x" + long, "x" + strings.Repeat("é", (maxTailLine-1)/2) + fmt.Sprintf("… (%d bytes)", 2*maxTailLine+1)},
	}
	for _, tt := range tests {
		if got := shortenLine(tt.in); got != tt.want {
			t.Errorf("shortenLine(%d bytes) = %q…, want %q…", len(tt.in), got[:min(len(got), 20)], tt.want[:min(len(tt.want), 20)])
		}
		if got := shortenLine(tt.in); !utf8.ValidString(got) {
			t.Errorf("shortenLine cut a character: %q", got)
		}
	}
}

// TestLaunchBatchesAreCutBySize: a node's launches of one tick go in as few
// calls as the document size allows, never in one over maxLaunchDoc.

func TestReportFirstScreenIsShort(t *testing.T) {
	r := &Report{Project: "big", Result: domain.ResultFailed}
	long := strings.Repeat("a very long error message that goes on and on ", 10)
	for i := 1; i <= 20; i++ {
		tv := TaskView{ID: fmt.Sprintf("S%02d", i), Title: "A task with a rather long descriptive title number " + fmt.Sprint(i), Status: domain.Completed, Node: "node-with-a-long-name"}
		if i%2 == 0 {
			tv.Status, tv.ErrorClass, tv.Error = domain.Failed, "exit", long
		}
		r.Tasks = append(r.Tasks, ReportTask{TaskView: tv, LogTail: long})
	}
	pass := false
	r.Verification = VerificationResult{Rounds: 2, Pass: &pass}
	for i := 0; i < 20; i++ {
		r.Verification.Issues = append(r.Verification.Issues, long)
	}
	r.Totals = Totals{Tasks: 20, Completed: 10, Failed: 10}
	md := r.Markdown()
	first := md[:strings.Index(md, "## Tasks")]
	if len(first) >= 2048 {
		t.Fatalf("first screen is %d bytes:\n%s", len(first), first)
	}
	for _, want := range []string{"**FAILED**", "dispatch retry big S02", "S02", "and 5 more", "Verification failed"} {
		if !strings.Contains(first, want) {
			t.Errorf("first screen lacks %q:\n%s", want, first)
		}
	}
}

// TestReportMarkdownInjection: what a task or a node wrote — a log tail
// that closes a code fence and writes a section, a verdict issue, an
// error, a conflict path — stays inside its block in report.md: the
// report's sections are its own, and the failing log's text is shown.
func TestReportMarkdownInjection(t *testing.T) {
	const forged = "## Verification\n\n1 round(s); the last one passed."
	pass := false
	r := &Report{Project: "p", Result: domain.ResultFailed,
		Totals:       Totals{Tasks: 2, Completed: 1, Failed: 1},
		Verification: VerificationResult{Rounds: 1, Pass: &pass, Issues: []string{"# Injected heading", "line one\n## Conflicts\n\nNone.", "1. ordered"}},
		Conflicts:    []Conflict{{Path: "a`b\n## Nodes\n", Tasks: []string{"S01", "S02"}}},
		Tasks: []ReportTask{
			{TaskView: TaskView{ID: "S01", Title: "ok", Status: domain.Completed}},
			{TaskView: TaskView{ID: "S02", Title: "evil\n## Tokens and cost", Status: domain.Failed, ErrorClass: "exit", Error: "boom\n" + forged},
				Attempts: []AttemptView{{Attempt: 1}}, LogTail: "compiling\n```\n" + forged + "\n````\n~~~"},
		}}
	md := r.Markdown()
	want := []string{"# dispatch report: p", "## Tasks", "## Failures", "### S02 — evil ## Tokens and cost", "## Conflicts", "## Verification", "## Nodes", "## Tokens and cost"}
	if got := mdHeadings(md); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("headings outside code blocks:\n%s\nwant:\n%s\nin:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"), md)
	}
	if !strings.Contains(md, "`````\ncompiling\n```\n## Verification\n") {
		t.Errorf("the log tail is not in a fence longer than its own:\n%s", md)
	}
	for _, want := range []string{"- \\# Injected heading", "- line one ## Conflicts  None.", "- 1\\. ordered", "- ``a`b ## Nodes ``: kept S01"} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
}

// mdHeadings lists the lines of md that CommonMark reads as headings: those
// starting with # outside fenced code blocks (a fence closes on a line of
// at least as many of its characters and nothing else).
func mdHeadings(md string) []string {
	var out []string
	fence := ""
	for _, l := range strings.Split(md, "\n") {
		trimmed := strings.TrimLeft(l, " ")
		if len(l)-len(trimmed) > 3 {
			continue // indented code
		}
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) && strings.Trim(trimmed, fence[:1]+" ") == "" {
				fence = ""
			}
			continue
		}
		if n := len(trimmed) - len(strings.TrimLeft(trimmed, "`")); n >= 3 {
			fence = trimmed[:n]
			continue
		}
		if n := len(trimmed) - len(strings.TrimLeft(trimmed, "~")); n >= 3 {
			fence = trimmed[:n]
			continue
		}
		if strings.HasPrefix(trimmed, "#") {
			out = append(out, trimmed)
		}
	}
	return out
}
