package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/internal/sqlitetest"
)

func openTest(t *testing.T) *Store {
	t.Helper()
	s, err := Open(context.Background(), filepath.Join(t.TempDir(), "dispatch.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	s.Now = func() time.Time { return now }
	return s
}

func addTask(t *testing.T, s *Store, project, id string) {
	t.Helper()
	ctx := context.Background()
	err := s.Update(ctx, func(tx *Tx) error {
		if err := tx.EnsureProject(ctx, project, "{}"); err != nil {
			return err
		}
		return tx.InsertTask(ctx, domain.Task{Project: project, ID: id, Title: "t " + id, Type: "implementation",
			Priority: 5, MaxRetries: 2, SpecHash: "h", Snapshot: []byte("echo\n")})
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestWALMode(t *testing.T) {
	s := openTest(t)
	var mode string
	if err := s.db.QueryRow("PRAGMA journal_mode").Scan(&mode); err != nil {
		t.Fatal(err)
	}
	if mode != "wal" {
		t.Fatalf("journal_mode = %q, want wal", mode)
	}
	var timeout int
	if err := s.db.QueryRow("PRAGMA busy_timeout").Scan(&timeout); err != nil {
		t.Fatal(err)
	}
	if timeout < 5000 {
		t.Fatalf("busy_timeout = %d, want >= 5000", timeout)
	}
}

func TestTransitionWritesEventAndRefusesIllegal(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	addTask(t, s, "p", "S01")

	var attempt int
	if err := s.Update(ctx, func(tx *Tx) (err error) {
		attempt, err = tx.Claim(ctx, "p", "S01", "n1")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if attempt != 1 {
		t.Fatalf("attempt = %d, want 1", attempt)
	}
	steps := []struct {
		from, to domain.Status
		wantErr  error
	}{
		{domain.Claimed, domain.Running, nil},
		{domain.Running, domain.Blocked, &IllegalTransitionError{}}, // (running → pending is a preemption)
		{domain.Claimed, domain.Completed, ErrConflict},             // the task is running now, not claimed
		{domain.Running, domain.Completed, nil},
		{domain.Completed, domain.Running, &IllegalTransitionError{}},
	}
	for _, st := range steps {
		err := s.Update(ctx, func(tx *Tx) error {
			_, _, err := tx.Transition(ctx, Change{Project: "p", Task: "S01", From: st.from, To: st.to})
			return err
		})
		var ill *IllegalTransitionError
		switch {
		case st.wantErr == nil && err != nil:
			t.Fatalf("%s → %s: %v", st.from, st.to, err)
		case errors.As(st.wantErr, &ill) && !errors.As(err, &ill):
			t.Fatalf("%s → %s: err = %v, want illegal transition", st.from, st.to, err)
		case st.wantErr == ErrConflict && !errors.Is(err, ErrConflict):
			t.Fatalf("%s → %s: err = %v, want conflict", st.from, st.to, err)
		}
	}
	task, err := s.Task(ctx, "p", "S01")
	if err != nil {
		t.Fatal(err)
	}
	if task.Status != domain.Completed || task.Node != "n1" || task.Attempt != 1 {
		t.Fatalf("task = %s on %q attempt %d", task.Status, task.Node, task.Attempt)
	}
	evs, err := s.Events(ctx, "p", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range evs {
		if e.Task == "S01" {
			got = append(got, e.FromStatus+">"+e.ToStatus)
		}
	}
	want := []string{">pending", "pending>claimed", "claimed>running", "running>completed"}
	if len(got) != len(want) {
		t.Fatalf("events = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("events = %v, want %v", got, want)
		}
	}
}

func TestFailedTransactionLeavesNoEvent(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	addTask(t, s, "p", "S01")
	before, _ := s.Events(ctx, "", 0, 0)
	err := s.Update(ctx, func(tx *Tx) error {
		if _, err := tx.Claim(ctx, "p", "S01", "n1"); err != nil {
			return err
		}
		return errors.New("launch decision failed")
	})
	if err == nil {
		t.Fatal("want error")
	}
	after, _ := s.Events(ctx, "", 0, 0)
	if len(after) != len(before) {
		t.Fatalf("events grew from %d to %d after a rolled-back transaction", len(before), len(after))
	}
	task, _ := s.Task(ctx, "p", "S01")
	if task.Status != domain.Pending || task.Attempt != 0 {
		t.Fatalf("task = %s attempt %d after rollback", task.Status, task.Attempt)
	}
}

func TestEventsAreAppendOnly(t *testing.T) {
	s := openTest(t)
	addTask(t, s, "p", "S01")
	if _, err := s.db.Exec("UPDATE events SET message = 'x'"); err == nil {
		t.Fatal("UPDATE events succeeded")
	}
	if _, err := s.db.Exec("DELETE FROM events"); err == nil {
		t.Fatal("DELETE FROM events succeeded")
	}
}

// TestSetTaskCannotChangeStatus: a task's status moves through Transition
// only; a TaskPatch has no field for it.
func TestSetTaskCannotChangeStatus(t *testing.T) {
	if _, ok := reflect.TypeOf(TaskPatch{}).FieldByName("Status"); ok {
		t.Fatal("TaskPatch has a Status field")
	}
}

// setEvery returns a patch of type T with every field set to its zero
// value, and the number of fields.
func setEvery[T any]() (T, int) {
	var p T
	v := reflect.ValueOf(&p).Elem()
	for i := range v.NumField() {
		f := v.Field(i)
		f.Set(reflect.New(f.Type().Elem()))
	}
	return p, v.NumField()
}

// TestPatchesNameRealColumns: every field of every patch writes a column
// that exists, and reads back as written.
func TestPatchesNameRealColumns(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	addTask(t, s, "p", "S01")
	err := s.Update(ctx, func(tx *Tx) error {
		a, err := tx.Claim(ctx, "p", "S01", "n1")
		if err != nil {
			return err
		}
		tp, n := setEvery[TaskPatch]()
		tp.Title, tp.Tags = new("new title"), new([]string{"gpu"})
		if err := tx.SetTask(ctx, "p", "S01", tp); err != nil {
			return fmt.Errorf("TaskPatch with its %d fields: %w", n, err)
		}
		rp, n := setEvery[AttemptPatch]()
		rp.CostUSD, rp.APIMode = new(0.25), new("team")
		if err := tx.SetAttempt(ctx, "p", "S01", a, rp); err != nil {
			return fmt.Errorf("AttemptPatch with its %d fields: %w", n, err)
		}
		pp, n := setEvery[ProjectPatch]()
		pp.State, pp.Phase = new(domain.ProjectActive), new(domain.PhaseIntegration)
		if err := tx.SetProject(ctx, "p", pp, ""); err != nil {
			return fmt.Errorf("ProjectPatch with its %d fields: %w", n, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	task, err := s.Task(ctx, "p", "S01")
	if err != nil || task.Title != "new title" || !slices.Equal(task.Tags, []string{"gpu"}) || task.Status != domain.Claimed {
		t.Errorf("task after the patch: %+v (%v)", task, err)
	}
	runs, err := s.Attempts(ctx, "p", "S01")
	if err != nil || len(runs) != 1 || runs[0].CostUSD != 0.25 || runs[0].APIMode != "team" {
		t.Errorf("runs after the patch: %+v (%v)", runs, err)
	}
	p, err := s.Project(ctx, "p")
	if err != nil || p.Phase != domain.PhaseIntegration {
		t.Errorf("project after the patch: %+v (%v)", p, err)
	}
}

func TestMigrateOldDatabase(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "old.db")
	old, err := open(ctx, path, false, 1)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := old.SchemaVersion(ctx); v != 1 {
		t.Fatalf("old schema version = %d", v)
	}
	if _, err := old.db.Exec(`INSERT INTO projects (name) VALUES ('p');
		INSERT INTO tasks (project, id, spec_hash, snapshot, created_at, updated_at, attempt) VALUES ('p', 'S01', 'h', x'00', 'x', 'x', 1);
		INSERT INTO runs (project, task, attempt, node, status, cost_usd) VALUES ('p', 'S01', 1, 'n1', 'completed', 0.5)`); err != nil {
		t.Fatal(err)
	}
	old.Close()

	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	all, _ := fs.Glob(migrationFS, "migrations/*.sql")
	if v, _ := s.SchemaVersion(ctx); v != len(all) || v < 12 {
		t.Fatalf("schema version = %d, want %d (every migration)", v, len(all))
	}
	// 0008 rebuilds runs: the attempts of before are kept, in run 1.
	if runs, err := s.Attempts(ctx, "p", "S01"); err != nil || len(runs) != 1 || runs[0].Run != 1 || runs[0].CostUSD != 0.5 {
		t.Fatalf("runs after migration = %+v, %v", runs, err)
	}
	if p, err := s.Project(ctx, "p"); err != nil || p.Run != 1 {
		t.Fatalf("project after migration = %+v, %v", p, err)
	}
	tasks, err := s.Tasks(ctx, "p")
	if err != nil || len(tasks) != 1 || tasks[0].ID != "S01" {
		t.Fatalf("tasks after migration = %v, %v", tasks, err)
	}
	if _, err := s.Files(ctx, "p", ""); err != nil {
		t.Fatalf("files table missing after migration: %v", err)
	}
	// Opening again applies nothing and keeps the data.
	s.Close()
	s2, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if tasks, _ := s2.Tasks(ctx, "p"); len(tasks) != 1 {
		t.Fatalf("tasks after reopen = %d", len(tasks))
	}
}

func TestOpenReadOnly(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	if _, err := OpenReadOnly(ctx, filepath.Join(dir, "none.db")); !errors.Is(err, ErrNoDatabase) {
		t.Fatalf("err = %v, want ErrNoDatabase", err)
	}
	s, err := Open(ctx, filepath.Join(dir, "d.db"))
	if err != nil {
		t.Fatal(err)
	}
	addTask(t, s, "p", "S01")
	ro, err := OpenReadOnly(ctx, filepath.Join(dir, "d.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if tasks, err := ro.Tasks(ctx, "p"); err != nil || len(tasks) != 1 {
		t.Fatalf("read-only tasks = %v, %v", tasks, err)
	}
	if _, err := ro.db.Exec("INSERT INTO projects (name) VALUES ('q')"); err == nil {
		t.Fatal("write through a read-only store succeeded")
	}
	s.Close()
}

func TestRunsNodesFiles(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	addTask(t, s, "p", "S01")
	err := s.Update(ctx, func(tx *Tx) error {
		a, err := tx.Claim(ctx, "p", "S01", "n1")
		if err != nil {
			return err
		}
		if err := tx.SetAttempt(ctx, "p", "S01", a, AttemptPatch{Status: new(domain.Running), PID: new(42)}); err != nil {
			return err
		}
		if err := tx.PutNode(ctx, Node{Name: "n1", State: "online", MemAvailableBytes: 7}); err != nil {
			return err
		}
		return tx.ReplaceFiles(ctx, "p", "S01", a, []File{{Path: "a.txt", Size: 3, SHA256: "x"}})
	})
	if err != nil {
		t.Fatal(err)
	}
	runs, _ := s.Attempts(ctx, "p", "S01")
	if len(runs) != 1 || runs[0].PID != 42 || runs[0].Status != domain.Running {
		t.Fatalf("runs = %+v", runs)
	}
	nodes, _ := s.Nodes(ctx)
	if len(nodes) != 1 || nodes[0].MemAvailableBytes != 7 {
		t.Fatalf("nodes = %+v", nodes)
	}
	files, _ := s.Files(ctx, "p", "")
	if len(files) != 1 || files[0].Path != "a.txt" {
		t.Fatalf("files = %+v", files)
	}
	evs, _ := s.Events(ctx, "", 0, 0)
	var nodeEvent bool
	for _, e := range evs {
		nodeEvent = nodeEvent || (e.Kind == "node" && e.ToStatus == "online")
	}
	if !nodeEvent {
		t.Fatal("no event for the node coming online")
	}
}

func TestPathWithURICharacters(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "proj #2 ?x %41")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "dispatch.db")
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	addTask(t, s, "p", "S01")
	s.Close()
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("database not at %s: %v", path, err)
	}
	ro, err := OpenReadOnly(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if tasks, err := ro.Tasks(ctx, "p"); err != nil || len(tasks) != 1 {
		t.Fatalf("tasks = %v, %v", tasks, err)
	}
}

// TestDamagedJSONColumnsAreErrors: a JSON column that does not parse is an
// error naming the row, never an empty value (a task without its
// dependencies would run before them).
func TestDamagedJSONColumnsAreErrors(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct{ name, stmt, want string }{
		{"depends_on", `UPDATE tasks SET depends_on = '["S0' WHERE id = 'S02'`, "task p/S02: read depends_on"},
		{"tags", `UPDATE tasks SET tags = '{' WHERE id = 'S02'`, "task p/S02: read tags"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openTest(t)
			addTask(t, s, "p", "S01")
			addTask(t, s, "p", "S02")
			if _, err := s.db.ExecContext(ctx, tc.stmt); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Tasks(ctx, "p"); err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, ErrDamaged) {
				t.Fatalf("Tasks: %v, want an ErrDamaged containing %q", err, tc.want)
			}
		})
	}
}

// TestHasLiveWork: a claimed or running task, or a finished run not yet
// collected, is live work; a collected run is not.
func TestHasLiveWork(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	addTask(t, s, "p", "S01")
	live := func(want bool) {
		t.Helper()
		if got, err := s.HasLiveWork(ctx, "p"); err != nil || got != want {
			t.Fatalf("HasLiveWork = %v, %v; want %v", got, err, want)
		}
	}
	live(false)
	var a int
	if err := s.Update(ctx, func(tx *Tx) error {
		var err error
		a, err = tx.Claim(ctx, "p", "S01", "n1")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	live(true)
	if err := s.Update(ctx, func(tx *Tx) error {
		if _, _, err := tx.Transition(ctx, Change{Project: "p", Task: "S01", From: domain.Claimed, To: domain.Failed}); err != nil {
			return err
		}
		return tx.SetAttempt(ctx, "p", "S01", a, AttemptPatch{Status: new(domain.Failed)})
	}); err != nil {
		t.Fatal(err)
	}
	live(true) // failed, not collected yet
	if err := s.Update(ctx, func(tx *Tx) error {
		return tx.SetAttempt(ctx, "p", "S01", a, AttemptPatch{CollectedAt: new(time.Now())})
	}); err != nil {
		t.Fatal(err)
	}
	live(false)
}

// TestSpentDoesNotOverflow: token counts a node reported near the clamp
// sum without an integer overflow (which would fail every tick).
func TestSpentDoesNotOverflow(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "d.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.db.Exec(`INSERT INTO projects (name) VALUES ('p');
		INSERT INTO tasks (project, id, spec_hash, snapshot, created_at, updated_at) VALUES ('p', 'S01', 'h', x'00', 'x', 'x')`); err != nil {
		t.Fatal(err)
	}
	huge := int64(math.MaxInt64 / 4)
	for i := 1; i <= 4; i++ {
		if _, err := s.db.Exec(`INSERT INTO attempts (project, task, attempt, node, status, claimed_at, tokens_in, tokens_out, cost_usd)
			VALUES ('p', 'S01', ?, 'n', 'failed', 'x', ?, ?, 0.5)`, i, huge, huge); err != nil {
			t.Fatal(err)
		}
	}
	usd, tokens, err := s.Spent(ctx, "p")
	if err != nil || usd != 2 || tokens != math.MaxInt64/2 {
		t.Fatalf("Spent = %v, %d, %v; want 2, the saturated count, no error", usd, tokens, err)
	}
	if err := s.Update(ctx, func(tx *Tx) error { _, _, err := tx.Spent(ctx, "p"); return err }); err != nil {
		t.Fatalf("Tx.Spent: %v", err)
	}
}

// TestSettled: a task is settled once terminal, and a completed one only
// once its current attempt is collected.
func TestSettled(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	addTask(t, s, "p", "S01")
	addTask(t, s, "p", "S02")
	settled := func() bool {
		t.Helper()
		ok, err := s.Settled(ctx, "p")
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if settled() {
		t.Fatalf("two pending tasks: settled")
	}
	var a int
	err := s.Update(ctx, func(tx *Tx) error {
		var err error
		if a, err = tx.Claim(ctx, "p", "S01", "n1"); err != nil {
			return err
		}
		if _, _, err := tx.Transition(ctx, Change{Project: "p", Task: "S01", From: domain.Claimed, To: domain.Completed}); err != nil {
			return err
		}
		_, _, err = tx.Transition(ctx, Change{Project: "p", Task: "S02", From: domain.Pending, To: domain.Canceled})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if settled() {
		t.Fatalf("completed but not collected, and canceled: settled")
	}
	if err := s.Update(ctx, func(tx *Tx) error {
		return tx.SetAttempt(ctx, "p", "S01", a, AttemptPatch{CollectedAt: new(time.Now())})
	}); err != nil {
		t.Fatal(err)
	}
	if !settled() {
		t.Fatalf("all settled: not settled")
	}
}

// TestRunnableHeadOfLine: a task whose dependencies have all completed is a
// candidate however many pending tasks before it still wait for theirs. With
// the readiness check after the LIMIT, 1,000 dependents of a running task
// filled every window and the one free task waited for S0000 to end.
func TestRunnableHeadOfLine(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	err := s.Update(ctx, func(tx *Tx) error {
		if err := tx.EnsureProject(ctx, "p", "{}"); err != nil {
			return err
		}
		add := func(id string, prio int, deps ...string) error {
			return tx.InsertTask(ctx, domain.Task{Project: "p", ID: id, Title: id, Type: "implementation", Priority: prio,
				DependsOn: deps, SpecHash: "h", Snapshot: []byte("echo\n")})
		}
		if err := add("S0000", 1); err != nil {
			return err
		}
		for i := 1; i <= 1000; i++ {
			if err := add(fmt.Sprintf("S%04d", i), 1, "S0000"); err != nil {
				return err
			}
		}
		// Lowest priority and last by ID: behind every dependent.
		if err := add("S9999", 9); err != nil {
			return err
		}
		// Depends on a task that completed; on one that completed and one
		// that did not; on one that does not exist.
		if err := add("C0001", 1); err != nil {
			return err
		}
		if err := add("T0001", 9, "C0001"); err != nil {
			return err
		}
		if err := add("T0002", 9, "C0001", "S0000"); err != nil {
			return err
		}
		return add("T0003", 9, "GONE")
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.db.Exec(`UPDATE tasks SET status = ? WHERE id = 'C0001'`, domain.Completed); err != nil {
		t.Fatal(err)
	}
	now := s.Now()
	ids := func(limit int) []string {
		t.Helper()
		ts, err := s.Runnable(ctx, "p", now, limit)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, x := range ts {
			out = append(out, x.ID)
		}
		return out
	}
	// C0001 completed but was never collected: T0001 of a plain project
	// receives its output, so it waits; with start_from: base it does not.
	if got := ids(8); !slices.Equal(got, []string{"S0000", "S9999"}) {
		t.Fatalf("runnable = %v, want [S0000 S9999] while C0001's output is not collected", got)
	}
	if _, err := s.db.Exec(`UPDATE tasks SET start_from = 'base' WHERE id LIKE 'T%'`); err != nil {
		t.Fatal(err)
	}
	if got := ids(8); !slices.Equal(got, []string{"S0000", "S9999", "T0001"}) {
		t.Fatalf("runnable = %v, want [S0000 S9999 T0001]", got)
	}
	// S0000 runs: the free task is still the candidate, in a window of one.
	if err := s.Update(ctx, func(tx *Tx) error { _, err := tx.Claim(ctx, "p", "S0000", "n"); return err }); err != nil {
		t.Fatal(err)
	}
	if got := ids(1); !slices.Equal(got, []string{"S9999"}) {
		t.Fatalf("runnable with S0000 claimed = %v, want [S9999]", got)
	}
}

// TestIsBusy: a write refused because another connection holds the
// database's write lock is "busy", the database's trouble, which the
// controller never counts against one project; other errors are not.
func TestIsBusy(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dispatch.db")
	s, err := Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	busy := sqlitetest.BusyError(t, path)
	if !IsBusy(fmt.Errorf("record: %w", busy)) {
		t.Fatalf("a write under another's lock: %v; IsBusy = false", busy)
	}
	other, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	_, syntax := other.Exec("SELEC 1")
	if syntax == nil || IsBusy(syntax) || IsBusy(errors.New("database is locked")) {
		t.Fatalf("IsBusy is true for %v", syntax)
	}
}

// TestPutNodes: nodes written in one statement read back field for field
// (floats, times, large counts), and a node event is recorded for each
// node whose state changed, and only for those.
func TestPutNodes(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	at := time.Date(2026, 3, 4, 5, 6, 7, 890_000_000, time.UTC)
	want := []Node{
		{Name: "a", State: NodeOnline, LastSeen: at, OS: "linux", Arch: "amd64", WrapperVersion: "v1",
			MemAvailableBytes: 1 << 62, Load1: 0.1 + 0.2, DiskFreeBytes: 123456789012, RTTMillis: 1.0 / 3},
		{Name: "b", State: NodeOffline, OfflineSince: at, LastError: "ssh: \"quoted\" \\ and\nnewline"},
		{Name: "c", State: NodeOnline, LastSeen: at},
	}
	put := func(nodes ...Node) {
		t.Helper()
		if err := s.Update(ctx, func(tx *Tx) error { return tx.PutNodes(ctx, nodes) }); err != nil {
			t.Fatal(err)
		}
	}
	put(want...)
	got, err := s.Nodes(ctx)
	if err != nil || len(got) != len(want) {
		t.Fatalf("Nodes = %+v, %v", got, err)
	}
	for i := range want {
		g := got[i]
		g.UpdatedAt = time.Time{}
		if g != want[i] {
			t.Errorf("node %s reads back as\n%+v, want\n%+v", want[i].Name, g, want[i])
		}
	}
	events := func() int {
		evs, err := s.Events(ctx, "", 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, e := range evs {
			if e.Kind == "node" {
				n++
			}
		}
		return n
	}
	if n := events(); n != 3 {
		t.Fatalf("%d node events after the first write, want 3", n)
	}
	want[1].State, want[2].Load1 = NodeOnline, 2
	put(want...)
	if n := events(); n != 4 {
		t.Fatalf("%d node events after one state changed, want 4", n)
	}
	// More nodes than one statement binds.
	var many []Node
	for i := range nodesPerInsert + 1 {
		many = append(many, Node{Name: fmt.Sprintf("m%04d", i), State: NodeOnline, LastSeen: at})
	}
	put(many...)
	if got, err := s.Nodes(ctx); err != nil || len(got) != len(want)+len(many) {
		t.Fatalf("%d nodes after writing %d more (%v), want %d", len(got), len(many), err, len(want)+len(many))
	}
}
