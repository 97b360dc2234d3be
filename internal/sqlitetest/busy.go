// Package sqlitetest gives tests real SQLite conditions that are hard to
// meet by chance.
package sqlitetest

import (
	"context"
	"database/sql"
	"testing"

	_ "modernc.org/sqlite" // the "sqlite" driver
)

// BusyError returns the error a write to the database at path gets while
// another connection holds its write lock: SQLite's "database is busy", as
// a real driver error. The lock is released before it returns.
func BusyError(t testing.TB, path string) error {
	t.Helper()
	ctx := context.Background()
	holder, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	conn, err := holder.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	defer conn.ExecContext(ctx, "ROLLBACK")
	other, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(0)")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	_, busy := other.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS sqlitetest_busy (x)")
	if busy == nil {
		t.Fatal("a write under another connection's lock went through")
	}
	return busy
}
