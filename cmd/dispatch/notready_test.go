package main

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"os/exec"
	"strings"
	"testing"

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
