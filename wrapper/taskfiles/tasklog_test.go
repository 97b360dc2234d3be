package taskfiles

import (
	"strings"
	"testing"
)

func TestLineWatcher(t *testing.T) {
	t.Parallel()
	var got []string
	w := &LineWatcher{On: func(prev, line []byte) { got = append(got, string(prev)+"|"+string(line)) }}
	long := strings.Repeat("x", maxWatchedLine+1)
	for _, chunk := range []string{"a", "b\nc\n", long[:10], long[10:], "\nd", "\n", "unfinished"} {
		w.Write([]byte(chunk))
	}
	want := []string{"|ab", "ab|c", "|d"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("lines %q, want %q", got, want)
	}
}

func TestCutMarker(t *testing.T) {
	t.Parallel()
	for _, n := range []int64{0, 1, 12345, 1 << 40} {
		m := CutMarker(n)
		got, size := ParseCutMarker([]byte(m + "rest"))
		if got != n || size != len(m) {
			t.Errorf("parseCutMarker(%q) = %d, %d; want %d, %d", m, got, size, n, len(m))
		}
	}
	for _, s := range []string{"", "plain output\n", "[dispatch: x bytes cut]\n", "[dispatch: 12 bytes cut]"} {
		if _, size := ParseCutMarker([]byte(s)); size != 0 {
			t.Errorf("parseCutMarker(%q) found a marker", s)
		}
	}
}
