package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/control"
	"github.com/dispatch-tool/dispatch/domain"
)

// TestStartFreshOfAnUnfinishedRun: `start --fresh` of a project whose run
// is going on (handed to the running controller) or stopped is refused
// (exit 2) saying how to get a fresh run, not quietly resumed; once the
// run has finished, it begins a new one.
func TestStartFreshOfAnUnfinishedRun(t *testing.T) {
	gate := filepath.Join(t.TempDir(), "go")
	home, _ := opsHome(t, map[string]map[string]string{
		"p": {"S01-wait.md": fmt.Sprintf("while [ ! -e '%s' ]; do sleep 0.05; done\n", gate)},
	})
	unsandboxed(t, home, "S01 waits for a file the test writes outside its workspace")
	wait := startBackground(t, nil, "--home", home, "start", "p")
	pollUntil(t, 30*time.Second, "p/S01 to run", func() bool {
		return control.Running(home) && taskState(t, home, "p", "S01").Status == domain.Running
	})
	refused := func(state string) {
		t.Helper()
		r := runDispatch(t, nil, "--home", home, "start", "p", "--fresh")
		if r.code != 2 || !strings.Contains(r.stderr, "--fresh begins a new run, but p's run 1 "+state) ||
			!strings.Contains(r.stderr, "let run 1 finish first (dispatch start p resumes a stopped run") || !strings.Contains(r.stderr, "then dispatch start p --fresh") {
			t.Fatalf("start --fresh while p %s: %s", state, r)
		}
	}
	refused("is running")
	if r := runDispatch(t, nil, "--home", home, "stop", "p"); r.code != 0 {
		t.Fatalf("stop: %s", r)
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	wait()
	refused("is stopped, not finished")
	if r := runDispatch(t, nil, "--home", home, "start", "p"); r.code != 0 {
		t.Fatalf("start p to finish its run: %s", r)
	}
	if r := runDispatch(t, nil, "--home", home, "start", "p", "--fresh"); r.code != 0 || !strings.Contains(r.stdout, "p run 2 begins") {
		t.Fatalf("start --fresh of a finished p: %s", r)
	}
}
