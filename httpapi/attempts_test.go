package httpapi

import (
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/store"
	"github.com/dispatch-tool/dispatch/tasklog"
)

// completeAttempt claims id of p on node local and completes it, its log
// collected as text; it returns the attempt's number.
func (h *testHome) completeAttempt(t *testing.T, id, text string) int {
	t.Helper()
	ctx := t.Context()
	var n int
	err := h.st.Update(ctx, func(tx *store.Tx) error {
		var err error
		if n, err = tx.Claim(ctx, "p", id, "local"); err != nil {
			return err
		}
		if _, _, err := tx.Transition(ctx, store.Change{Project: "p", Task: id, From: domain.Claimed, To: domain.Completed}); err != nil {
			return err
		}
		now := time.Now()
		return tx.SetAttempt(ctx, "p", id, n, store.AttemptPatch{Status: new(domain.Completed), StartedAt: new(now.Add(-time.Second)),
			CompletedAt: new(now), CollectedAt: new(now)})
	})
	if err != nil {
		t.Fatal(err)
	}
	path := tasklog.LocalPath(h.dir, domain.Task{Project: "p", ID: id}, n)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return n
}

// freshRun ends p's run as passed and begins the next, S00001 to run
// again (`dispatch start p --fresh`).
func (h *testHome) freshRun(t *testing.T) {
	t.Helper()
	ctx := t.Context()
	err := h.st.Update(ctx, func(tx *store.Tx) error {
		if err := tx.SetProject(ctx, "p", store.ProjectPatch{State: new(domain.ProjectDone), Result: new(domain.ResultPassed)}, ""); err != nil {
			return err
		}
		if _, err := tx.BeginRun(ctx, "p", "{}", "fresh run"); err != nil {
			return err
		}
		task, err := tx.Task(ctx, "p", "S00001")
		if err != nil {
			return err
		}
		return tx.RunAgain(ctx, task, "--fresh")
	})
	if err != nil {
		t.Fatal(err)
	}
}

type attemptRow struct {
	Attempt int           `json:"attempt"`
	Run     int           `json:"run"`
	Node    string        `json:"node"`
	Status  domain.Status `json:"status"`
}

// TestTaskAttemptsOfEveryRun: the task endpoint lists the task's attempts
// of every kept run, newest first, each with its run; the earlier run's
// attempt's log is still read by its number (issue 32, item 10).
func TestTaskAttemptsOfEveryRun(t *testing.T) {
	h := newTestHome(t, 1)
	const id = "S00001"
	get := func(path string) []attemptRow {
		t.Helper()
		var d struct {
			Attempt  int          `json:"attempt"`
			Attempts []attemptRow `json:"attempts"`
		}
		h.getJSON(t, path, &d)
		return d.Attempts
	}
	if as := get("/api/v1/projects/p/tasks/" + id); as == nil || len(as) != 0 {
		t.Fatalf("before any attempt: attempts = %+v, want []", as)
	}
	first := h.completeAttempt(t, id, "run one's log\n")
	h.freshRun(t)
	want := []attemptRow{{first, 1, "local", domain.Completed}}
	if as := get("/api/v1/projects/p/tasks/" + id); !sameRows(as, want) {
		t.Fatalf("run 2 begun, the task pending: attempts = %+v, want run 1's %+v", as, want)
	}
	second := h.completeAttempt(t, id, "run two's log\n")
	want = []attemptRow{{second, 2, "local", domain.Completed}, {first, 1, "local", domain.Completed}}
	if as := get("/api/v1/projects/p/tasks/" + id); !sameRows(as, want) {
		t.Fatalf("after run 2: attempts = %+v, want %+v", as, want)
	}
	if as := get("/api/v1/projects/p/tasks/" + id + "?run=1"); !sameRows(as, want[1:]) {
		t.Errorf("?run=1: attempts = %+v, want run 1's alone", as)
	}
	resp := h.get(t, "/api/v1/projects/p/tasks/"+id+"/log?attempt=1")
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "run one's log\n" {
		t.Errorf("log of run 1's attempt: %d %q", resp.StatusCode, b)
	}
}

func sameRows(got, want []attemptRow) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if got[i] != want[i] {
			return false
		}
	}
	return true
}
