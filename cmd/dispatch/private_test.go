package main

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestHomeIsPrivateWhateverTheUmask: with umask 000, what dispatch writes
// in the home (the database and its WAL files, the lock, runs/ with the
// outputs and the report, the detached controller's log and pid) and the
// node's work_dir stay private to their owner.
func TestHomeIsPrivateWhateverTheUmask(t *testing.T) {
	home, work := opsHome(t, map[string]map[string]string{"p": {"S01-a.md": "echo a > a.txt\n"}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", `umask 000; exec "$0" "$@"`, dispatchBin, "--home", home, "start", "p", "--detach")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("start --detach under umask 000: %v\n%s", err, out)
	}
	pollUntil(t, time.Minute, "the detached run to finish", func() bool {
		_, err := os.Stat(filepath.Join(home, "runs", "p", "report.md"))
		return err == nil && !fileExists(filepath.Join(home, "dispatch.pid"))
	})
	private := func(path string, want fs.FileMode) {
		t.Helper()
		fi, err := os.Stat(path)
		if err != nil {
			t.Errorf("%s: %v", path, err)
			return
		}
		if got := fi.Mode().Perm(); got&0o077 != 0 || got != want {
			t.Errorf("%s has mode %04o, want %04o", path, got, want)
		}
	}
	private(filepath.Join(home, "dispatch.db"), 0o600)
	for _, f := range []string{"dispatch.db-wal", "dispatch.db-shm"} {
		if fileExists(filepath.Join(home, f)) {
			private(filepath.Join(home, f), 0o600)
		}
	}
	private(filepath.Join(home, "dispatch.lock"), 0o600)
	private(filepath.Join(home, "controller.tick"), 0o600)
	private(filepath.Join(home, "dispatch.log"), 0o600)
	private(filepath.Join(home, "runs"), 0o700)
	private(work, 0o700)
	private(filepath.Join(work, ".bin"), 0o700)
	if t.Failed() {
		var b strings.Builder
		filepath.Walk(home, func(p string, fi fs.FileInfo, err error) error {
			if err == nil {
				fmt.Fprintf(&b, "%04o %s\n", fi.Mode().Perm(), p)
			}
			return nil
		})
		t.Logf("home:\n%s", b.String())
	}
}

func fileExists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}
