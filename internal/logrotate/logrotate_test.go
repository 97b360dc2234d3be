package logrotate

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRotate: a log written past its maximum is rotated, three old logs
// are kept, and the descriptor the process writes through follows the
// new file.
func TestRotate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dispatch.log")
	out, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	f := New(path, 1<<20, 3, out, int(out.Fd()))
	f.SetMax(100)
	line := strings.Repeat("x", 39) + "\n" // 40 bytes: two lines a log
	for i := 0; i < 12; i++ {
		if _, err := fmt.Fprint(f, line); err != nil {
			t.Fatal(err)
		}
	}
	// A write not through f (a panic) goes to the current log too.
	fmt.Fprint(out, "direct\n")
	for _, name := range []string{"dispatch.log", "dispatch.log.1", "dispatch.log.2", "dispatch.log.3"} {
		b, err := os.ReadFile(filepath.Join(filepath.Dir(path), name))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(b) > 100 {
			t.Errorf("%s holds %d bytes, over the maximum of 100", name, len(b))
		}
		if name == "dispatch.log" && !strings.HasSuffix(string(b), "direct\n") {
			t.Errorf("the direct write is not in the current log: %q", b)
		}
	}
	if _, err := os.Stat(path + ".4"); !os.IsNotExist(err) {
		t.Errorf("dispatch.log.4 exists (%v): only three old logs are kept", err)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("the new log's mode is %v, want 0600", fi.Mode().Perm())
	}
}

// TestNoRotationUnderMax: a log under its maximum is left alone.
func TestNoRotationUnderMax(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dispatch.log")
	out, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	f := New(path, 1000, 3, out, int(out.Fd()))
	f.SetMax(0) // ignored
	for i := 0; i < 10; i++ {
		fmt.Fprintln(f, "short")
	}
	if _, err := os.Stat(path + ".1"); !os.IsNotExist(err) {
		t.Errorf("rotated under the maximum")
	}
}
