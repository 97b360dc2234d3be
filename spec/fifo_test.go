//go:build unix

package spec

import (
	"path/filepath"
	"syscall"
	"testing"
)

// A FIFO named like a spec must be reported, not opened: opening it would
// block Load forever.
func TestLoadFIFO(t *testing.T) {
	tests := []struct {
		name string
		fifo string
	}{
		{"task file", "p/S02.md"},
		{"project.yaml", "p/project.yaml"},
		{"SHARED_CONTEXT.md", "p/SHARED_CONTEXT.md"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeSpecs(t, map[string]string{"p/S01.md": "# x\n"})
			if err := syscall.Mkfifo(filepath.Join(dir, tc.fifo), 0o644); err != nil {
				t.Skipf("mkfifo: %v", err)
			}
			_, err := Load(dir, "p")
			checkErrors(t, dir, err, []wantErr{{tc.fifo, 0, "not a regular file"}})
		})
	}
}
