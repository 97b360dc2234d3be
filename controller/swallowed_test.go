package controller

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/store"
)

// corrupt runs one statement on the harness's database, as a damaged file
// or another program would leave it.
func corrupt(t *testing.T, h *harness, stmt string) {
	t.Helper()
	db, err := sql.Open("sqlite", filepath.Join(h.home, "dispatch.db")+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(stmt); err != nil {
		t.Fatalf("%s: %v", stmt, err)
	}
}

// TestUnreadableProjectOptionsStopTheTick: options that do not parse used
// to read as "no integration, no setup, no halt". Now the tick fails,
// naming the project, and nothing launches on the wrong assumption.
func TestUnreadableProjectOptionsStopTheTick(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "setup-ran")
	h := newHarness(t, "", map[string]string{
		"project.yaml": fmt.Sprintf("tool: shell\nsetup: touch '%s'\n", marker),
		"S01-a.md":     "echo hi\n",
	})
	corrupt(t, h, `UPDATE projects SET options = '{"setup": ' WHERE name = 'p'`)
	_, err := h.ctl.Tick(context.Background())
	if err == nil || !strings.Contains(err.Error(), "project p: read its stored options") {
		t.Fatalf("tick error = %v, want one naming the project's options", err)
	}
	if s := h.task("S01").Status; s != store.Pending {
		t.Fatalf("S01 is %s; nothing may start without its options", s)
	}
}

// TestUnreadableVerdictStopsTheFixRound: a verdict that cannot be read back
// used to start the next verification with no issues to check.
func TestUnreadableVerdictStopsTheFixRound(t *testing.T) {
	gate := filepath.Join(t.TempDir(), "go")
	fail := "echo '{\"pass\": false, \"issues\": [\"broken\"]}' > verdict.json\n"
	h := newHarness(t, "", map[string]string{
		"project.yaml": "tool: shell\nmax_fix_rounds: 2\n",
		"S01-x.md":     "echo x > x.txt\n",
		"S99-i.md":     "echo integrated > INTEGRATION.md\n",
		"V01-v.md":     fail,
		"F01-f.md":     fmt.Sprintf("while [ ! -e '%s' ]; do sleep 0.05; done\necho fixed > FIX.md\n", gate),
		"V02-v.md":     fail,
	})
	h.tickUntil("F01 to run", func() bool {
		f, err := h.st.Task(context.Background(), "p", "F01")
		return err == nil && f.Status == store.Running
	})
	corrupt(t, h, `UPDATE verdicts SET issues = '["broken' WHERE project = 'p'`)
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var tickErr error
	for i := 0; i < 400 && tickErr == nil; i++ {
		_, tickErr = h.ctl.Tick(context.Background())
		if _, err := h.st.Task(context.Background(), "p", "V02"); err == nil {
			t.Fatal("V02 was started although the issues of round 1 could not be read")
		}
	}
	if tickErr == nil || !strings.Contains(tickErr.Error(), "read the verdict of round 1") {
		t.Fatalf("tick error = %v, want one naming the unreadable verdict", tickErr)
	}
}

// TestRetryWithABrokenSpecFails: retry takes the edited spec; when the
// specs do not load it used to retry with the old snapshot in silence.
func TestRetryWithABrokenSpecFails(t *testing.T) {
	h := newHarness(t, "", shellProject(map[string]string{"S01-a.md": "exit 1\n"}))
	h.tickUntil("S01 to fail for good", func() bool {
		h.clock.Advance(time.Minute)
		return h.task("S01").Status == store.Failed
	})
	spec := filepath.Join(h.home, "specs", "p", "S01-a.md")
	if err := os.WriteFile(spec, []byte("echo \xff\xfe\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := h.ctl.Retry(context.Background(), "p", []string{"S01"})
	var oe *OpError
	if !errors.As(err, &oe) || !strings.Contains(err.Error(), "do not load") {
		t.Fatalf("retry error = %v, want an OpError saying the specs do not load", err)
	}
	if s := h.task("S01").Status; s != store.Failed {
		t.Fatalf("S01 is %s after a refused retry; want failed", s)
	}
}
