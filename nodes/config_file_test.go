//go:build unix

package nodes

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Load reads only a regular nodes.yaml of at most MaxConfigSize: a FIFO, a
// directory or a device is reported at once (never waited on) and an
// oversized file is refused before it is parsed.
func TestLoadFileKinds(t *testing.T) {
	valid := "nodes:\n  - name: local\n"
	tests := []struct {
		name    string
		make    func(t *testing.T, path string)
		wantMsg string // "" means it loads
	}{
		{"regular", func(t *testing.T, path string) { writeConfigFile(t, path, valid) }, ""},
		{"at the cap", func(t *testing.T, path string) {
			writeConfigFile(t, path, valid+"#"+strings.Repeat("x", MaxConfigSize-len(valid)-2)+"\n")
		}, ""},
		{"one byte over the cap", func(t *testing.T, path string) {
			writeConfigFile(t, path, valid+"#"+strings.Repeat("x", MaxConfigSize-len(valid)-1)+"\n")
		}, "larger than 1 MiB"},
		{"25 MB", func(t *testing.T, path string) {
			writeConfigFile(t, path, valid+strings.Repeat("# filler line of a huge file\n", 25<<20/29))
		}, "larger than 1 MiB"},
		{"FIFO", func(t *testing.T, path string) {
			if err := syscall.Mkfifo(path, 0o644); err != nil {
				t.Skipf("mkfifo: %v", err)
			}
		}, "not a regular file"},
		{"directory", func(t *testing.T, path string) {
			if err := os.Mkdir(path, 0o755); err != nil {
				t.Fatal(err)
			}
		}, "not a regular file"},
		{"character device", func(t *testing.T, path string) {
			if err := os.Symlink("/dev/zero", path); err != nil {
				t.Fatal(err)
			}
		}, "not a regular file"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "nodes.yaml")
			tc.make(t, path)
			done := make(chan error, 1)
			go func() {
				_, err := Load(path)
				done <- err
			}()
			var err error
			select {
			case err = <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("Load blocked")
			}
			if tc.wantMsg == "" {
				if err != nil {
					t.Fatalf("Load: %v", err)
				}
				return
			}
			var ce *ConfigError
			if !errors.As(err, &ce) || ce.File != path || !strings.Contains(ce.Msg, tc.wantMsg) || ce.Fix == "" {
				t.Fatalf("Load = %v; want a ConfigError for %s saying %q, with a fix", err, path, tc.wantMsg)
			}
		})
	}
}

func writeConfigFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
