package readmodel

import (
	"fmt"
	"github.com/dispatch-tool/dispatch/store"
	"strings"
	"testing"
	"unicode/utf8"
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
	r := &Report{Project: "big", Result: store.ResultFailed}
	long := strings.Repeat("a very long error message that goes on and on ", 10)
	for i := 1; i <= 20; i++ {
		tv := TaskView{ID: fmt.Sprintf("S%02d", i), Title: "A task with a rather long descriptive title number " + fmt.Sprint(i), Status: store.Completed, Node: "node-with-a-long-name"}
		if i%2 == 0 {
			tv.Status, tv.ErrorClass, tv.Error = store.Failed, "exit", long
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
