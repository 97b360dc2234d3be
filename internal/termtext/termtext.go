// Package termtext makes text that came from a node or a task safe to print
// on the operator's terminal.
package termtext

import (
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// Clean returns s with every character that a terminal would act on
// written out as a visible escape: C0 controls (ESC, BEL, CR, backspace,
// ...) other than newline and tab as \xNN, DEL as \x7f, C1 controls (U+0080
// to U+009F, among them the one-character CSI) as \u00NN, and bytes that
// are not UTF-8 as \xNN. A task error, a node error or a log excerpt then
// cannot set the window title, clear the screen or move the cursor.
// Newlines and tabs stay: callers that print one line take the first line
// or fold the whitespace themselves.
func Clean(s string) string {
	i := 0
	for i < len(s) {
		r, size := utf8.DecodeRuneInString(s[i:])
		if unsafe(r, size) {
			break
		}
		i += size
	}
	if i == len(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	b.WriteString(s[:i])
	for i < len(s) {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case unsafe(r, size) && r < 0x80:
			fmt.Fprintf(&b, `\x%02x`, r)
		case unsafe(r, size):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

func unsafe(r rune, size int) bool {
	switch {
	case r == utf8.RuneError && size == 1:
		return true
	case r == '\n' || r == '\t':
		return false
	case r < 0x20 || r == 0x7f:
		return true
	case r >= 0x80 && r <= 0x9f:
		return true
	}
	return false
}

// Writer cleans a stream (a log followed as it grows) on its way to an
// io.Writer: each write is passed through Clean, except that a character
// split between two writes is held back until its end comes, rather than
// escaped as broken bytes. Flush writes what is held at the end.
type Writer struct {
	w    io.Writer
	held []byte
}

// NewWriter returns a Writer to w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// Write cleans p and writes it, but for an unfinished character at its end.
func (c *Writer) Write(p []byte) (int, error) {
	b := append(c.held, p...)
	cut := len(b)
	for i := 1; i < utf8.UTFMax && i <= len(b); i++ {
		x := b[len(b)-i]
		if x >= 0x80 && x < 0xc0 {
			continue // a continuation byte: look for its start
		}
		if x >= 0xc0 && !utf8.FullRune(b[len(b)-i:]) {
			cut = len(b) - i
		}
		break
	}
	c.held = append([]byte(nil), b[cut:]...)
	if _, err := io.WriteString(c.w, Clean(string(b[:cut]))); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Flush writes what is held back, cleaned.
func (c *Writer) Flush() error {
	if len(c.held) == 0 {
		return nil
	}
	s := Clean(string(c.held))
	c.held = nil
	_, err := io.WriteString(c.w, s)
	return err
}
