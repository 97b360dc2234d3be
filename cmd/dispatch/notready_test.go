package main

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/dispatch-tool/dispatch/home"
	"github.com/dispatch-tool/dispatch/store"
)

// TestReadCommandsWaitForADatabaseBeingMade: the first `dispatch start`
// makes the database file, then applies its migrations; a read-only
// command run in between printed "no such table: …". It now waits for the
// whole schema (saying so on stderr) and answers once the migrations are
// in; a database that stays unfinished past the wait is an error saying
// what it is and what to do (exit 2).
func TestReadCommandsWaitForADatabaseBeingMade(t *testing.T) {
	dir, _ := newLocalHome(t)
	// What store.Open leaves before its first migration: a WAL database
	// without a table.
	db, err := sql.Open("sqlite", home.DBPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("PRAGMA journal_mode=wal"); err != nil {
		t.Fatal(err)
	}
	db.Close()

	for _, args := range [][]string{{"status"}, {"status", "p"}, {"runs", "p"}, {"nodes"}} {
		r := runDispatch(t, []string{"DISPATCH_TEST_READY_WAIT=200ms"}, append([]string{"--home", dir}, args...)...)
		if r.code != 2 || strings.Contains(r.stderr, "no such table") || !strings.Contains(r.stderr, "being made by a controller") ||
			!strings.Contains(r.stderr, "Try: dispatch start") {
			t.Errorf("dispatch %s on a database that is never finished: %s\nwant exit 2 saying the database is being made and Try: dispatch start", strings.Join(args, " "), r)
		}
	}

	ctx, cancel := context.WithTimeout(t.Context(), cmdTimeout)
	defer cancel()
	cmd, stdout, _ := dispatchCmd(ctx, nil, "--home", dir, "status", "--json")
	cmd.Stderr = nil
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(stderr)
	var said []string
	for lines.Scan() && !strings.Contains(lines.Text(), "waiting up to") {
		said = append(said, lines.Text())
	}
	if lines.Err() != nil || len(said) > 0 || !strings.Contains(lines.Text(), "waiting up to") {
		cmd.Wait()
		t.Fatalf("dispatch status on a database being made did not say it waits: stderr %q, %v; stdout %s", said, lines.Err(), stdout)
	}
	// The controller's start finishes making it.
	st, err := store.Open(t.Context(), home.DBPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	var rest []string
	for lines.Scan() {
		rest = append(rest, lines.Text())
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) || ctx.Err() != nil {
		t.Fatal(err, ctx.Err())
	}
	if code := cmd.ProcessState.ExitCode(); code != 0 || !strings.Contains(stdout.String(), `"projects"`) {
		t.Errorf("dispatch status once the database was whole: exit %d, stdout %s, stderr %q", code, stdout, rest)
	}
}

// TestReadCommandsOnAnOlderDatabase: a database an older dispatch made
// (its schema behind this one's) is waited for only while a controller
// may be upgrading it; with none on the home, a read-only command says at
// once what to do (it waited 10 s first), exit 2.
func TestReadCommandsOnAnOlderDatabase(t *testing.T) {
	dir, _ := newLocalHome(t)
	olderDatabase(t, dir)

	r := runDispatch(t, nil, "--home", dir, "status")
	if r.code != 2 || strings.Contains(r.stderr, "waiting up to") || !strings.Contains(r.stderr, "No controller runs") ||
		!strings.Contains(r.stderr, "Try: dispatch start") {
		t.Errorf("dispatch status on an older database, no controller: %s\nwant exit 2 at once saying no controller runs and Try: dispatch start", r)
	}
	// A controller that holds the home (this process, as its lock line
	// says) may be upgrading it: the command waits.
	host, _ := os.Hostname()
	line := fmt.Sprintf("pid %d on %s since 2026-11-29T10:00:00Z\n", os.Getpid(), host)
	if err := os.WriteFile(filepath.Join(dir, home.LockFile), []byte(line), 0o600); err != nil {
		t.Fatal(err)
	}
	r = runDispatch(t, []string{"DISPATCH_TEST_READY_WAIT=200ms"}, "--home", dir, "status")
	if r.code != 2 || !strings.Contains(r.stderr, "waiting up to") || !strings.Contains(r.stderr, "older dispatch") {
		t.Errorf("dispatch status on an older database a controller may be upgrading: %s\nwant it to wait, then exit 2", r)
	}
}

// TestWaitReadyLooksAgainForAStartingController: a start takes the
// home's lock a moment before it writes its holder line, which names the
// last, gone holder until then; a read-only command that saw that line
// looks again before saying no controller runs.
func TestWaitReadyLooksAgainForAStartingController(t *testing.T) {
	dir := t.TempDir()
	olderDatabase(t, dir)
	ro, err := store.OpenReadOnly(t.Context(), home.DBPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	looks := 0
	mayRun := func() bool { looks++; return looks > 1 } // its line written by the second look
	var said strings.Builder
	err = waitReady(t.Context(), ro, 50*time.Millisecond, 10*time.Millisecond, &said, mayRun)
	if err == nil || strings.Contains(err.Error(), "No controller runs") || !strings.Contains(said.String(), "waiting up to") {
		t.Errorf("waitReady with a controller that writes its line late: %v (said %q); want it to wait", err, said.String())
	}
}

// olderDatabase makes dir's database as an older dispatch left it: its
// newest migration not applied.
func olderDatabase(t *testing.T, dir string) {
	t.Helper()
	st, err := store.Open(t.Context(), home.DBPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	db, err := sql.Open("sqlite", home.DBPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec("DELETE FROM schema_migrations WHERE version = (SELECT MAX(version) FROM schema_migrations)"); err != nil {
		t.Fatal(err)
	}
}
