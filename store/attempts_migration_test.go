package store

import (
	"context"
	"fmt"
	"io/fs"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/dispatch-tool/dispatch/domain"
)

// TestMigrateAttempts: the migration that renames runs to attempts keeps
// the rows, rewrites the triggers and views that name the table (SQLite
// does, with legacy_alter_table off), and makes the table's indexes again
// under the new name; no object of the schema names runs afterwards.
func TestMigrateAttempts(t *testing.T) {
	ctx := context.Background()
	names, _ := fs.Glob(migrationFS, "migrations/*_attempts.sql")
	if len(names) != 1 {
		t.Fatalf("attempts migration: %v", names)
	}
	n, err := strconv.Atoi(strings.SplitN(path.Base(names[0]), "_", 2)[0])
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "old.db")
	old, err := open(ctx, file, false, n-1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := old.db.Exec(`INSERT INTO projects (name) VALUES ('p');
		INSERT INTO tasks (project, id, spec_hash, snapshot, created_at, updated_at, attempt, status) VALUES ('p', 'S01', 'h', x'00', 'x', 'x', 1, 'completed');
		INSERT INTO runs (project, task, attempt, node, status, cost_usd) VALUES ('p', 'S01', 1, 'n1', 'completed', 0.5);
		CREATE VIEW test_costs AS SELECT project, TOTAL(cost_usd) AS usd FROM runs GROUP BY project;
		CREATE TRIGGER test_cost AFTER UPDATE OF cost_usd ON runs BEGIN
			UPDATE projects SET problem = 'cost ' || NEW.cost_usd WHERE name = NEW.project;
		END;`); err != nil {
		t.Fatal(err)
	}
	old.Close()

	s, err := Open(ctx, file)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if a, err := s.Attempts(ctx, "p", "S01"); err != nil || len(a) != 1 || a[0].Node != "n1" || a[0].CostUSD != 0.5 || a[0].Run != 1 {
		t.Fatalf("attempts after migration = %+v, %v", a, err)
	}
	if a, err := s.Uncollected(ctx, "p"); err != nil || len(a) != 1 || !a[0].Current {
		t.Fatalf("uncollected after migration = %+v, %v", a, err)
	}

	// No object of the schema names runs; the view and trigger made on
	// runs now read and fire on attempts.
	runs := regexp.MustCompile(`(?i)\bruns\b`)
	objects, err := queryRows(ctx, s.db, func(r scanner) ([2]string, error) {
		var o [2]string
		err := r.Scan(&o[0], &o[1])
		return o, err
	}, `SELECT name, COALESCE(sql, '') FROM sqlite_master`)
	if err != nil {
		t.Fatal(err)
	}
	if len(objects) < 20 {
		t.Fatalf("schema read: %v", objects)
	}
	for _, o := range objects {
		if runs.MatchString(o[0]) || runs.MatchString(o[1]) || strings.HasPrefix(o[0], "runs_") || strings.HasPrefix(o[0], "sqlite_autoindex_runs_") {
			t.Errorf("%s names runs after migration: %s", o[0], o[1])
		}
	}
	var usd float64
	if err := s.db.QueryRow(`SELECT usd FROM test_costs WHERE project = 'p'`).Scan(&usd); err != nil || usd != 0.5 {
		t.Errorf("view over attempts: %v, %v", usd, err)
	}
	if err := s.Update(ctx, func(tx *Tx) error {
		return tx.SetAttempt(ctx, "p", "S01", 1, AttemptPatch{CostUSD: new(0.75)})
	}); err != nil {
		t.Fatal(err)
	}
	if p, err := s.Project(ctx, "p"); err != nil || p.Problem != "cost 0.75" {
		t.Errorf("trigger on attempts: problem %q, %v", p.Problem, err)
	}
	indexes, err := queryRows(ctx, s.db, func(r scanner) (string, error) {
		var name string
		err := r.Scan(&name)
		return name, err
	}, `SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'attempts' AND sql IS NOT NULL ORDER BY name`)
	// attempts_live comes with migration 0019.
	if err != nil || strings.Join(indexes, " ") != "attempts_live attempts_run attempts_uncollected" {
		t.Errorf("indexes of attempts = %v, %v", indexes, err)
	}
}

// TestUncollectedSaysWhatStartsFromACommit: the read of what to collect
// says of each task's current attempt whether the task starts from a
// commit, so that collecting a plain task reads nothing more of it.
func TestUncollectedSaysWhatStartsFromACommit(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	err := s.Update(ctx, func(tx *Tx) error {
		if err := tx.EnsureProject(ctx, "p", "{}"); err != nil {
			return err
		}
		for id, base := range map[string]string{"G": "0123abcd", "P": ""} {
			if err := tx.InsertTask(ctx, domain.Task{Project: "p", ID: id, Title: id, Type: "implementation", SpecHash: "h",
				Snapshot: []byte("x"), BaseCommit: base}); err != nil {
				return err
			}
			for attempt := 1; attempt <= 2; attempt++ {
				if _, err := tx.Claim(ctx, "p", id, "n1"); err != nil {
					return err
				}
				if _, _, err := tx.Transition(ctx, Change{Project: "p", Task: id, From: domain.Claimed, To: domain.Failed}); err != nil {
					return err
				}
				if err := tx.SetAttempt(ctx, "p", id, attempt, AttemptPatch{Status: new(domain.Failed)}); err != nil {
					return err
				}
				if attempt == 1 {
					if _, _, err := tx.Transition(ctx, Change{Project: "p", Task: id, From: domain.Failed, To: domain.Pending}); err != nil {
						return err
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Uncollected(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	var says []string
	for _, u := range got {
		says = append(says, fmt.Sprintf("%s#%d current=%v based=%v", u.Task, u.Attempt.Attempt, u.Current, u.Based))
	}
	want := []string{"G#1 current=false based=false", "G#2 current=true based=true", "P#1 current=false based=false", "P#2 current=true based=false"}
	if !slices.Equal(says, want) {
		t.Errorf("Uncollected = %q, want %q", says, want)
	}
}
