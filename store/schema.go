package store

import (
	"context"
	"database/sql"
	_ "embed" // schema.sql
	"fmt"
	"strconv"
	"strings"
)

// schemaSQL is what the migrations up to its version make of an empty
// database, written out (TestSchemaSnapshot writes it and checks it):
// a new database is made from it in one transaction. Applying the
// migrations one by one cost 25 ms of CPU at each first start — every
// ALTER TABLE has SQLite parse the whole schema again —, 0.13 ms a task
// of a 200-task batch in a new home (issue 35).
//
//go:embed schema.sql
var schemaSQL string

// schemaVersionPrefix starts schema.sql's line that names the last
// migration it holds.
const schemaVersionPrefix = "-- version "

// schemaVersion is the last migration schemaSQL holds.
func schemaVersion(text string) (int, error) {
	for line := range strings.Lines(text) {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), schemaVersionPrefix); ok {
			return strconv.Atoi(rest)
		}
	}
	return 0, fmt.Errorf("schema.sql names no version (a line %q)", schemaVersionPrefix+"N")
}

// createFresh makes the schema of a database that holds no migration yet
// from schemaSQL and records the migrations it stands for (names, sorted
// as migrate reads them), all in one transaction. It returns the version
// the database is then at; migrate applies the newer ones.
func (s *Store) createFresh(ctx context.Context, names []string) (int, error) {
	version, err := schemaVersion(schemaSQL)
	if err != nil {
		return 0, err
	}
	if version > len(names) {
		return 0, fmt.Errorf("schema.sql is at version %d, past the %d migrations", version, len(names))
	}
	var rows []string
	var args []any
	for _, name := range names {
		base := strings.TrimPrefix(name, "migrations/")
		if v := migrationVersion(base); v <= version {
			rows = append(rows, "(?, ?, ?)")
			args = append(args, v, base, formatTime(s.Now()))
		}
	}
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, schemaSQL); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, "INSERT INTO schema_migrations (version, name, applied_at) VALUES "+strings.Join(rows, ", "), args...)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("make the schema of a new database: %w", err)
	}
	return version, nil
}

// migrationVersion is the number a migration's file name starts with (0
// when it starts with none).
func migrationVersion(base string) int {
	v, _ := strconv.Atoi(strings.SplitN(base, "_", 2)[0])
	return v
}
