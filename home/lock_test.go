package home

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestControllerMayRun: only a missing lock file, or a holder line naming
// a gone process of this host, says that no controller runs; anything
// else may be one (its line not yet written, another host's).
func TestControllerMayRun(t *testing.T) {
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		line *string
		want bool
	}{
		{"no lock file", nil, false},
		{"a live process of this host", ptr(fmt.Sprintf("pid %d on %s since 2026-11-29T10:00:00Z\n", os.Getpid(), host)), true},
		{"a gone process of this host", ptr(fmt.Sprintf("pid %d on %s since 2026-11-29T10:00:00Z\n", gone.Process.Pid, host)), false},
		{"another host's", ptr(fmt.Sprintf("pid %d on not-%s since 2026-11-29T10:00:00Z\n", gone.Process.Pid, host)), true},
		{"a line not yet written", ptr(""), true},
		{"not a holder line", ptr("garbage"), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if tc.line != nil {
				if err := os.WriteFile(filepath.Join(dir, LockFile), []byte(*tc.line), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if got := ControllerMayRun(dir); got != tc.want {
				t.Errorf("ControllerMayRun = %v, want %v", got, tc.want)
			}
		})
	}
	// A lock taken by AcquireLock names a live process: this one.
	dir := t.TempDir()
	l, err := AcquireLock(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	if !ControllerMayRun(dir) {
		t.Error("ControllerMayRun = false beside a held lock")
	}
}

func ptr(s string) *string { return &s }
