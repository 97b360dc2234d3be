package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/control"
)

// TestDetachedLogRotates: a background controller whose dispatch.log is
// over log_max_size rotates it (dispatch.log.1 holds the old one) and
// writes on into a new dispatch.log; three old logs are kept.
func TestDetachedLogRotates(t *testing.T) {
	home, _ := opsHome(t, map[string]map[string]string{"p": {"S01-a.md": "echo a\n"}})
	cfg := filepath.Join(home, "nodes.yaml")
	writeFile(t, cfg, strings.Replace(readFile(t, cfg), "controller:\n", "controller:\n  log_max_size: 64KiB\n", 1))
	logPath := filepath.Join(home, "dispatch.log")
	old := strings.Repeat("an old line of the log\n", 4000) // 92,000 bytes: over 64 KiB
	for i := 1; i <= 3; i++ {
		writeFile(t, logPath+"."+string(rune('0'+i)), "old log "+string(rune('0'+i))+"\n")
	}
	writeFile(t, logPath, old)
	r := runDispatch(t, nil, "--home", home, "--log-level", "debug", "start", "p", "--detach")
	if r.code != 0 {
		t.Fatalf("start --detach: %s", r)
	}
	pollUntil(t, 30*time.Second, "the background controller to exit", func() bool {
		_, err := os.Stat(filepath.Join(home, "dispatch.pid"))
		return os.IsNotExist(err) && !control.Running(home)
	})
	one := readFile(t, logPath+".1")
	if !strings.HasPrefix(one, old) {
		t.Errorf("dispatch.log.1 is not the old log (%d bytes)", len(one))
	}
	cur := readFile(t, logPath)
	if cur == "" || strings.Contains(cur, "an old line") || len(cur) > 64<<10 {
		t.Errorf("dispatch.log after the rotation (%d bytes): %q", len(cur), cur[:min(len(cur), 300)])
	}
	if got := readFile(t, logPath+".2"); got != "old log 1\n" {
		t.Errorf("dispatch.log.2 = %q, want the old dispatch.log.1", got)
	}
	if got := readFile(t, logPath+".3"); got != "old log 2\n" {
		t.Errorf("dispatch.log.3 = %q, want the old dispatch.log.2", got)
	}
	if _, err := os.Stat(logPath + ".4"); !os.IsNotExist(err) {
		t.Errorf("dispatch.log.4 exists: only three old logs are kept")
	}
}
