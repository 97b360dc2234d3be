package store

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"modernc.org/sqlite" // the driver stmtcache.go wraps
	sqlite3 "modernc.org/sqlite/lib"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// ErrNotFound is returned when a project, task or run does not exist.
var ErrNotFound = errors.New("not found")

// ErrDamaged is the kind of the error for a stored value that does not
// read back (a task's depends_on that is not a JSON list, say): the row is
// damaged, not the database, and only its project is in trouble.
var ErrDamaged = errors.New("damaged row")

// damaged marks err as ErrDamaged; its message is err's.
type damaged struct{ err error }

func (d damaged) Error() string        { return d.err.Error() }
func (d damaged) Unwrap() error        { return d.err }
func (d damaged) Is(target error) bool { return target == ErrDamaged }

// ErrNoDatabase is returned by OpenReadOnly when the database file does not exist yet.
var ErrNoDatabase = errors.New("no database yet")

// ErrNotReady is Ready's answer for a database whose schema is behind this
// dispatch's: a controller is creating it (the first start makes the file,
// then applies every migration) or upgrading it, or an older dispatch made
// it. A reader tries again later; its queries would fail on a missing table.
var ErrNotReady = errors.New("database not ready")

// ErrSchemaBehind is wrapped, beside ErrNotReady, by Ready's answer for a
// database with some migrations applied but not all: an upgrade under
// way, or an older dispatch's database — not one being made.
var ErrSchemaBehind = errors.New("schema behind this dispatch")

// Store is an open dispatch database.
type Store struct {
	db   *sql.DB
	path string
	// run is the archived run this Store reads (AtRun); 0 reads the
	// current run of each project.
	run int
	// Now is the clock used for every timestamp the store writes; tests replace it.
	Now func() time.Time
}

// Open opens (creating it if needed) the database at path for writing, checks
// that WAL mode is on and applies pending migrations. Only the process holding
// the controller lock should call it.
func Open(ctx context.Context, path string) (*Store, error) {
	if err := private(path); err != nil {
		return nil, err
	}
	return open(ctx, path, false, -1)
}

// private creates the database file 0600 when it does not exist and makes
// an existing one, and its -wal and -shm files, 0600: whatever the umask,
// only its owner reads it. SQLite gives the -wal and -shm files it creates
// the mode of the database file.
func private(path string) error {
	// Closing a descriptor of a database this process has open would drop
	// SQLite's locks on it: open only a file that does not exist yet.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	switch {
	case err == nil:
		err = f.Chmod(0o600)
		f.Close()
		if err != nil {
			return fmt.Errorf("make database %s private: %w", path, err)
		}
	case !errors.Is(err, fs.ErrExist):
		return fmt.Errorf("open database %s: %w", path, err)
	}
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		if err := os.Chmod(p, 0o600); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("make %s private: %w", p, err)
		}
	}
	return nil
}

// OpenReadOnly opens an existing database for reading only; read-only commands
// use it so they never contend with the controller's writes.
func OpenReadOnly(ctx context.Context, path string) (*Store, error) {
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w", path, ErrNoDatabase)
	}
	return open(ctx, path, true, -1)
}

func open(ctx context.Context, path string, readOnly bool, upTo int) (*Store, error) {
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(10000)")
	q.Add("_pragma", "foreign_keys(1)")
	q.Add("_pragma", "synchronous(NORMAL)")
	if readOnly {
		q.Add("mode", "ro")
	}
	// The path is part of a SQLite URI: escape what would end it early.
	escaped := strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(path)
	dsn := "file:" + escaped + "?" + q.Encode()
	db, err := sql.Open(driverName, dsn)
	if err != nil {
		return nil, fmt.Errorf("open database %s: %w", path, err)
	}
	s := &Store{db: db, path: path, Now: time.Now}
	if readOnly {
		db.SetMaxOpenConns(4)
		if err := db.PingContext(ctx); err != nil {
			db.Close()
			return nil, fmt.Errorf("open database %s: %w", path, err)
		}
		return s, nil
	}
	// One connection: the controller is the only writer, and a single
	// connection makes every write strictly serial without SQLITE_BUSY.
	db.SetMaxOpenConns(1)
	var mode string
	if err := db.QueryRowContext(ctx, "PRAGMA journal_mode=wal").Scan(&mode); err != nil {
		db.Close()
		return nil, fmt.Errorf("set WAL mode on %s: %w", path, err)
	}
	if mode != "wal" {
		db.Close()
		return nil, fmt.Errorf("database %s: journal mode is %q, want wal (is it on a network filesystem?)", path, mode)
	}
	if err := s.migrate(ctx, upTo); err != nil {
		db.Close()
		return nil, err
	}
	return s, nil
}

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

// Path returns the database file path.
func (s *Store) Path() string { return s.path }

// migrate applies the embedded migrations newer than the database's version,
// each in its own transaction, up to and including upTo (all when upTo < 0).
// A new database is made from schema.sql first (createFresh).
func (s *Store) migrate(ctx context.Context, upTo int) error {
	if _, err := s.db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)`); err != nil {
		return fmt.Errorf("create schema_migrations: %w", err)
	}
	names, err := fs.Glob(migrationFS, "migrations/*.sql")
	if err != nil {
		return err
	}
	sort.Strings(names)
	var current int
	if err := s.db.QueryRowContext(ctx, "SELECT COALESCE(MAX(version),0) FROM schema_migrations").Scan(&current); err != nil {
		return fmt.Errorf("read schema version: %w", err)
	}
	if current > len(names) {
		return fmt.Errorf("database %s has schema version %d, newer than this dispatch knows (%d): upgrade dispatch", s.path, current, len(names))
	}
	if current == 0 && upTo < 0 {
		if current, err = s.createFresh(ctx, names); err != nil {
			return err
		}
	}
	for _, name := range names {
		base := strings.TrimPrefix(name, "migrations/")
		version, err := strconv.Atoi(strings.SplitN(base, "_", 2)[0])
		if err != nil {
			return fmt.Errorf("migration %s: name must start with its number", base)
		}
		if version <= current || (upTo >= 0 && version > upTo) {
			continue
		}
		body, err := migrationFS.ReadFile(name)
		if err != nil {
			return err
		}
		if err := s.inTx(ctx, func(tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, string(body)); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)",
				version, base, formatTime(s.Now()))
			return err
		}); err != nil {
			return fmt.Errorf("apply migration %s: %w", base, err)
		}
	}
	return nil
}

// Ready returns an error wrapping ErrNotReady when the database's schema
// is behind this dispatch's migrations (or not there yet).
func (s *Store) Ready(ctx context.Context) error {
	var tables int
	if err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'`).Scan(&tables); err != nil {
		return fmt.Errorf("read the schema of %s: %w", s.path, err)
	}
	version := 0
	if tables > 0 {
		v, err := s.SchemaVersion(ctx)
		if err != nil {
			return fmt.Errorf("read the schema version of %s: %w", s.path, err)
		}
		version = v
	}
	names, err := fs.Glob(migrationFS, "migrations/*.sql")
	if err != nil {
		return err
	}
	switch {
	case version == 0:
		return fmt.Errorf("database %s is being made by a controller (try again in a moment): %w", s.path, ErrNotReady)
	case version < len(names):
		return fmt.Errorf("database %s is at schema version %d of %d: a controller is upgrading it (try again in a moment), "+
			"or an older dispatch made it (dispatch start or dispatch serve upgrades it): %w: %w", s.path, version, len(names), ErrNotReady, ErrSchemaBehind)
	}
	return nil
}

// SchemaVersion returns the number of the newest applied migration.
func (s *Store) SchemaVersion(ctx context.Context) (int, error) {
	var v int
	err := s.db.QueryRowContext(ctx, "SELECT COALESCE(MAX(version),0) FROM schema_migrations").Scan(&v)
	return v, err
}

func (s *Store) inTx(ctx context.Context, fn func(*sql.Tx) error) (err error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	if err = fn(tx); err != nil {
		return err
	}
	return tx.Commit()
}

// Update runs fn in one write transaction: everything fn changes lands
// together or not at all.
func (s *Store) Update(ctx context.Context, fn func(*Tx) error) error {
	return s.inTx(ctx, func(tx *sql.Tx) error {
		return fn(&Tx{tx: tx, now: s.Now()})
	})
}

const timeLayout = "2006-01-02T15:04:05.000000000Z07:00"

func formatTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(timeLayout)
}

func parseTime(s string) time.Time {
	if s == "" {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}
	}
	return t
}

// IsBusy reports whether err is SQLite's "database is busy" or "locked":
// the database's trouble, shared by every project, never one project's.
func IsBusy(err error) bool {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	code := se.Code() & 0xff // extended codes keep the primary one in the low byte
	return code == sqlite3.SQLITE_BUSY || code == sqlite3.SQLITE_LOCKED
}
