package controller

import (
	"os"
	"path/filepath"
	"testing"
)

// TestPlaceCollected: an attempt that left no output file gets an empty
// output/ in place, its task.log under attempts/<N>/ and beside output/,
// an older attempts/<N>/task.log replaced, not appended to.
func TestPlaceCollected(t *testing.T) {
	dir := t.TempDir()
	tmp, dest := filepath.Join(dir, ".S01.2.collecting"), filepath.Join(dir, "S01")
	attemptDir := filepath.Join(dest, "attempts", "2")
	for _, d := range []string{tmp, attemptDir, filepath.Join(dest, "output")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(p, s string) {
		t.Helper()
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(tmp, "task.log"), "new log\n")
	write(filepath.Join(attemptDir, "task.log"), "a partial log of an earlier collection\n")
	write(filepath.Join(dest, "output", "old.txt"), "the previous attempt's output\n")
	if err := placeCollected(tmp, dest, attemptDir, true, false); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(attemptDir, "task.log"), filepath.Join(dest, "task.log")} {
		if b, err := os.ReadFile(p); err != nil || string(b) != "new log\n" {
			t.Errorf("%s = %q, %v; want the collected log", p, b, err)
		}
	}
	entries, err := os.ReadDir(filepath.Join(dest, "output"))
	if err != nil || len(entries) != 0 {
		t.Errorf("output/ = %v, %v; want an empty directory", entries, err)
	}
}

// TestPlaceCollectedWithoutALog: an attempt collected again whose node
// sent no task.log this time keeps the log collected before under
// attempts/<N>/.
func TestPlaceCollectedWithoutALog(t *testing.T) {
	dir := t.TempDir()
	tmp, dest := filepath.Join(dir, ".S01.1.collecting"), filepath.Join(dir, "S01")
	attemptDir := filepath.Join(dest, "attempts", "1")
	for _, d := range []string{tmp, attemptDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(attemptDir, "task.log"), []byte("collected before\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := placeCollected(tmp, dest, attemptDir, false, false); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(attemptDir, "task.log")); err != nil || string(b) != "collected before\n" {
		t.Errorf("attempts/1/task.log = %q, %v; want the log collected before", b, err)
	}
}
