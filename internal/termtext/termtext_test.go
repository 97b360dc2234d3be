package termtext

import (
	"strings"
	"testing"
)

func TestClean(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"plain", "exit status 3: no such file", "exit status 3: no such file"},
		{"empty", "", ""},
		{"newline and tab stay", "line one\n\tline two", "line one\n\tline two"},
		{"OSC title with BEL", "\x1b]0;pwned\x07", `\x1b]0;pwned\x07`},
		{"CSI clear screen", "\x1b[2J\x1b[H", `\x1b[2J\x1b[H`},
		{"issue 10 payload", "\x1b]0;pwned\x07\x1b[2J", `\x1b]0;pwned\x07\x1b[2J`},
		{"carriage return and backspace", "ok\r\bFAIL", `ok\x0d\x08FAIL`},
		{"NUL and DEL", "a\x00b\x7f", `a\x00b\x7f`},
		{"C1 CSI as a character", "a\u009b2Jb", `a\u009b2Jb`},
		{"C1 NEL", "a\u0085b", `a\u0085b`},
		{"raw C1 byte, not UTF-8", "a\x9b2Jb", `a\x9b2Jb`},
		{"invalid UTF-8", "caf\xe9", `caf\xe9`},
		{"unicode stays", "tâche — ✓ 完成", "tâche — ✓ 完成"},
		{"U+00A0 and above stay", "a\u00a0b", "a\u00a0b"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Clean(tc.in)
			if got != tc.want {
				t.Errorf("Clean(%q) = %q, want %q", tc.in, got, tc.want)
			}
			for _, r := range got {
				if r != '\n' && r != '\t' && (r < 0x20 || r == 0x7f || (r >= 0x80 && r <= 0x9f)) {
					t.Errorf("Clean(%q) left control %U", tc.in, r)
				}
			}
			if strings.ContainsRune(got, 0x1b) {
				t.Errorf("Clean(%q) left ESC", tc.in)
			}
		})
	}
}

// TestWriter: a stream cleaned in pieces reads as the whole cleaned at
// once, whichever byte the pieces are cut at (a character split between
// two writes is not escaped as broken bytes).
func TestWriter(t *testing.T) {
	in := "tâche ✓ 完成\x1b]52;c;aGVsbG8=\x07 done\xe9 end\xe2\x9c"
	want := Clean(in)
	for cut := 0; cut <= len(in); cut++ {
		var b strings.Builder
		w := NewWriter(&b)
		for _, part := range []string{in[:cut], in[cut:]} {
			if n, err := w.Write([]byte(part)); err != nil || n != len(part) {
				t.Fatalf("cut %d: Write = %d, %v", cut, n, err)
			}
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		if b.String() != want {
			t.Errorf("cut at %d: %q, want %q", cut, b.String(), want)
		}
	}
}
