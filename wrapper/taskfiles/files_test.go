package taskfiles

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestReadControlFileMax: a control file is read only when it is a regular
// file within its cap; a link, a FIFO, a directory or an oversized file is
// refused with an error naming it, and a FIFO never blocks the reader.
func TestReadControlFileMax(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	mk := map[string]func(p string) error{
		"regular":  func(p string) error { return os.WriteFile(p, []byte("small"), 0o600) },
		"at cap":   func(p string) error { return os.WriteFile(p, []byte(strings.Repeat("x", 16)), 0o600) },
		"over cap": func(p string) error { return os.WriteFile(p, []byte(strings.Repeat("x", 17)), 0o600) },
		"link":     func(p string) error { return os.Symlink("/etc/hostname", p) },
		"fifo":     func(p string) error { return syscall.Mkfifo(p, 0o600) },
		"dir":      func(p string) error { return os.Mkdir(p, 0o700) },
		"missing":  func(string) error { return nil },
	}
	tests := []struct {
		kind, want, wantErr string
	}{
		{"regular", "small", ""},
		{"at cap", strings.Repeat("x", 16), ""},
		{"over cap", "", "larger than"},
		{"link", "", "symbolic link"},
		{"fifo", "", "not a regular file"},
		{"dir", "", "not a regular file"},
		{"missing", "", "no such file"},
	}
	for _, tc := range tests {
		t.Run(tc.kind, func(t *testing.T) {
			p := filepath.Join(dir, strings.ReplaceAll(tc.kind, " ", "-"))
			if err := mk[tc.kind](p); err != nil {
				t.Fatal(err)
			}
			got, err := ReadControlFileMax(p, 16)
			if tc.wantErr == "" {
				if err != nil || string(got) != tc.want {
					t.Fatalf("read %s = %q, %v; want %q", tc.kind, got, err, tc.want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("read %s: err %v, want one saying %q", tc.kind, err, tc.wantErr)
			}
		})
	}
}

// TestReadControlFileSizes: a control file is read whole across the
// reader's buffer sizes (it starts small and grows), up to its cap.
func TestReadControlFileSizes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const limit = 5000
	for _, size := range []int{0, 1, 511, 512, 513, 1024, 1025, 4999, limit, limit + 1, 3 * limit} {
		p := filepath.Join(dir, strconv.Itoa(size))
		data := make([]byte, size)
		for i := range data {
			data[i] = byte('a' + i%26)
		}
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := ReadControlFileMax(p, limit)
		if size > limit {
			if err == nil {
				t.Errorf("%d bytes under a cap of %d: read %d, want an error", size, limit, len(got))
			}
			continue
		}
		if err != nil || string(got) != string(data) {
			t.Errorf("%d bytes: read %d (%v), want them all", size, len(got), err)
		}
	}
}
