package store

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var updateSchema = flag.Bool("update", false, "write schema.sql from the migrations (TestSchemaSnapshot)")

// TestSchemaSnapshot: a new database made from schema.sql (and the
// migrations past it) is the database the migrations make one by one —
// every table, index, view and trigger as SQLite holds it, every row but
// when each migration was applied — and schema.sql is what the
// migrations make now: `go test ./store -run TestSchemaSnapshot -update`
// writes it after a new migration. A schema.sql behind the migrations is
// still right (the newer ones are applied to it), only slower.
func TestSchemaSnapshot(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	stepwise, err := open(ctx, filepath.Join(dir, "stepwise.db"), false, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	defer stepwise.Close()
	version, err := stepwise.SchemaVersion(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want, err := dumpSchema(ctx, stepwise, version)
	if err != nil {
		t.Fatal(err)
	}
	if *updateSchema {
		if err := os.WriteFile("schema.sql", []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	fresh, err := Open(ctx, filepath.Join(dir, "fresh.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	got, err := dumpSchema(ctx, fresh, version)
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Errorf("a new database differs from the migrations' one:\n%s", lineDiff(got, want))
	}
	if a, b := appliedMigrations(t, fresh), appliedMigrations(t, stepwise); !slices.Equal(a, b) {
		t.Errorf("a new database records the migrations %q, want %q", a, b)
	}
	if schemaSQL != want {
		t.Errorf("schema.sql is not what the migrations make (run go test ./store -run TestSchemaSnapshot -update):\n%s", lineDiff(schemaSQL, want))
	}
}

// dumpSchema writes out the schema and rows of s's database as schema.sql
// holds them: tables, views, indexes, triggers, each in the order it was
// made, then the rows of every table but schema_migrations.
func dumpSchema(ctx context.Context, s *Store, version int) (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "-- The schema of a new database: what migrations/ up to the version below make of\n"+
		"-- an empty one, made in one step (store.createFresh). Written by\n"+
		"-- `go test ./store -run TestSchemaSnapshot -update`, never by hand.\n%s%d\n", schemaVersionPrefix, version)
	objects, err := queryRows(ctx, s.db, func(r scanner) ([2]string, error) {
		var o [2]string
		err := r.Scan(&o[0], &o[1])
		return o, err
	}, `SELECT type, sql FROM sqlite_master WHERE sql IS NOT NULL AND name NOT LIKE 'sqlite_%' AND name != 'schema_migrations'
		ORDER BY CASE type WHEN 'table' THEN 0 WHEN 'view' THEN 1 WHEN 'index' THEN 2 ELSE 3 END, rowid`)
	if err != nil {
		return "", err
	}
	for _, o := range objects {
		b.WriteString("\n" + o[1] + ";\n")
	}
	tables, err := queryRows(ctx, s.db, func(r scanner) (string, error) {
		var name string
		err := r.Scan(&name)
		return name, err
	}, `SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' AND name != 'schema_migrations' ORDER BY name`)
	if err != nil {
		return "", err
	}
	for _, table := range tables {
		cols, err := queryRows(ctx, s.db, func(r scanner) (string, error) {
			var name string
			err := r.Scan(&name)
			return name, err
		}, `SELECT name FROM pragma_table_info(?) ORDER BY cid`, table)
		if err != nil {
			return "", err
		}
		quoted := make([]string, len(cols))
		for i, c := range cols {
			quoted[i] = "quote(\"" + c + "\")"
		}
		rows, err := queryRows(ctx, s.db, func(r scanner) (string, error) {
			var v string
			err := r.Scan(&v)
			return v, err
		}, `SELECT `+strings.Join(quoted, " || ', ' || ")+` AS v FROM "`+table+`" ORDER BY v`)
		if err != nil {
			return "", err
		}
		for _, v := range rows {
			fmt.Fprintf(&b, "\nINSERT INTO %s (%s) VALUES (%s);\n", table, strings.Join(cols, ", "), v)
		}
	}
	return b.String(), nil
}

func appliedMigrations(t *testing.T, s *Store) []string {
	t.Helper()
	out, err := queryRows(context.Background(), s.db, func(r scanner) (string, error) {
		var v int
		var name string
		err := r.Scan(&v, &name)
		return fmt.Sprintf("%d %s", v, name), err
	}, `SELECT version, name FROM schema_migrations ORDER BY version`)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// lineDiff names the first line where got and want part.
func lineDiff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := range max(len(g), len(w)) {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return fmt.Sprintf("line %d: got %q, want %q", i+1, gl, wl)
		}
	}
	return "(the same)"
}

// TestNewDatabaseInOneStep: a new database is made in a handful of
// statements, none for each migration: applying them one by one (two
// statements each, every ALTER TABLE parsing the whole schema again) was
// 25 ms of CPU at each first start, 0.13 ms a task of 200 (issue 35).
func TestNewDatabaseInOneStep(t *testing.T) {
	ctx := context.Background()
	before := stmtsRun.Load()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "d.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if n := stmtsRun.Load() - before; n > 6 {
		t.Errorf("a new database took %d statements, want at most 6", n)
	}
	all, err := s.SchemaVersion(ctx)
	if err != nil || all != len(appliedMigrations(t, s)) || all < 30 {
		t.Errorf("schema version %d (%v) of %d migrations recorded", all, err, len(appliedMigrations(t, s)))
	}
}

// TestNoIndexIsAPrefixOfAnother: an index whose columns begin another
// index of the same table serves no read the longer one does not, and
// costs an entry moved at every write of its columns (tasks_status, the
// start of tasks_due and tasks_ready, at every change of a task's
// status). Unique and partial indexes say more than their columns and
// are left out.
func TestNoIndexIsAPrefixOfAnother(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	type index struct{ table, name, cols string }
	indexes, err := queryRows(ctx, s.db, func(r scanner) (index, error) {
		var ix index
		err := r.Scan(&ix.table, &ix.name, &ix.cols)
		return ix, err
	}, `SELECT m.tbl_name, m.name, (SELECT group_concat(name, ',') FROM (SELECT name FROM pragma_index_info(m.name) ORDER BY seqno))
		FROM sqlite_master m, pragma_index_list(m.tbl_name) l
		WHERE m.type = 'index' AND l.name = m.name AND l."unique" = 0 AND l.partial = 0`)
	if err != nil {
		t.Fatal(err)
	}
	if len(indexes) < 10 {
		t.Fatalf("read %d indexes: %v", len(indexes), indexes)
	}
	for _, a := range indexes {
		for _, b := range indexes {
			if a.name != b.name && a.table == b.table && strings.HasPrefix(b.cols+",", a.cols+",") {
				t.Errorf("index %s (%s) of %s begins %s (%s)", a.name, a.cols, a.table, b.name, b.cols)
			}
		}
	}
}
