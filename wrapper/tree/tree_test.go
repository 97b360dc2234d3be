package tree

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dispatch-tool/dispatch/wrapper/internal/wtest"
)

func TestCopyTreeStops(t *testing.T) {
	t.Parallel()
	src, dst := t.TempDir(), t.TempDir()
	wtest.WriteTree(t, src, map[string]string{"a": "a", "b": "b", "c/d": "d", "e": "e"})
	calls := 0
	stop := func() bool {
		calls++
		return calls > 2
	}
	if err := CopyTree(src, dst, stop, func(string) {}); err != ErrStopped {
		t.Fatalf("copyTree = %v, want errStopped", err)
	}
	if _, err := os.Stat(filepath.Join(dst, "e")); err == nil {
		t.Error("the copy went on after the stop")
	}
	if _, err := os.Stat(filepath.Join(dst, "a")); err != nil {
		t.Errorf("nothing was copied before the stop: %v", err)
	}
}

// TestCheckBase: a base tree is a path strictly inside the task directory
// and none of the wrapper's own entries.
func TestCheckBase(t *testing.T) {
	t.Parallel()
	tests := []struct {
		base, wantErr string
	}{
		{"", ""},
		{"base", ""},
		{"src/base", ""},
		{"./base/", ""},
		{".", "inside the task directory"},
		{"../base", "inside the task directory"},
		{"/abs/base", "inside the task directory"},
		{"output", "belongs to the wrapper"},
		{"output/sub", "belongs to the wrapper"},
		{"attempts/1", "belongs to the wrapper"},
		{"status.json", "belongs to the wrapper"},
		{"task.log", "belongs to the wrapper"},
	}
	for _, tc := range tests {
		err := CheckBase(tc.base)
		if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("CheckBase(%q) = %v, want %q", tc.base, err, tc.wantErr)
		}
	}
}
