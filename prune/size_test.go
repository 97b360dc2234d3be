package prune

import (
	"os"
	"path/filepath"
	"testing"
)

// TestSizeOf: a file with two names frees its bytes once both go, and
// nothing while a name outside the pruned paths stays.
func TestSizeOf(t *testing.T) {
	dir := t.TempDir()
	a, b, kept := filepath.Join(dir, "attempts", "1"), filepath.Join(dir, "run-1"), filepath.Join(dir, "S01")
	for _, d := range []string{a, b, kept} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	log := make([]byte, 1<<20)
	if err := os.WriteFile(filepath.Join(a, "task.log"), log, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(a, "task.log"), filepath.Join(b, "task.log")); err != nil {
		t.Skip("no hard links here:", err)
	}
	if err := os.WriteFile(filepath.Join(b, "report.md"), []byte("12345"), 0o644); err != nil {
		t.Fatal(err)
	}
	files, bytes, err := sizeOf([]string{a, b})
	if err != nil || files != 3 || bytes != 1<<20+5 {
		t.Errorf("both names pruned: %d files, %d bytes, %v; want 3 files, %d bytes", files, bytes, err, 1<<20+5)
	}
	if err := os.Link(filepath.Join(a, "task.log"), filepath.Join(kept, "task.log")); err != nil {
		t.Fatal(err)
	}
	if _, bytes, _ := sizeOf([]string{a, b}); bytes != 5 {
		t.Errorf("a third name kept: %d bytes, want 5 (the log stays)", bytes)
	}
	if _, bytes, _ := sizeOf([]string{filepath.Join(dir, "missing")}); bytes != 0 {
		t.Errorf("a missing path: %d bytes", bytes)
	}
}
