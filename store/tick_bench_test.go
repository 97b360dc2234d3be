package store

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/domain"
)

// benchStore is a store holding project p with n tasks, running of them
// running on nodes nodes (n1…), the rest pending.
func benchStore(b *testing.B, n, running, nodes int) *Store {
	b.Helper()
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(b.TempDir(), "dispatch.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	err = s.Update(ctx, func(tx *Tx) error {
		if err := tx.EnsureProject(ctx, "p", "{}"); err != nil {
			return err
		}
		for i := range n {
			if err := tx.InsertTask(ctx, domain.Task{Project: "p", ID: fmt.Sprintf("S%05d", i), Title: "t", Type: "implementation",
				Priority: 5, MaxRetries: 2, SpecHash: "h", Snapshot: []byte("sleep 600\n")}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	err = s.Update(ctx, func(tx *Tx) error {
		for i := range running {
			if _, err := tx.Claim(ctx, "p", fmt.Sprintf("S%05d", i), fmt.Sprintf("n%d", i%nodes+1)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := s.db.ExecContext(ctx, `UPDATE tasks SET status = 'running' WHERE status = 'claimed'`); err != nil {
		b.Fatal(err)
	}
	if _, err := s.db.ExecContext(ctx, `UPDATE attempts SET status = 'running'`); err != nil {
		b.Fatal(err)
	}
	return s
}

// BenchmarkTickTasks is the steady tick's read of a project of 10,000
// tasks with 1,000 running, every row held by the caller.
func BenchmarkTickTasks(b *testing.B) {
	s := benchStore(b, 10000, 1000, 20)
	ctx := context.Background()
	held := map[string]*domain.Task{}
	var named []string
	for i := range 1000 {
		named = append(named, fmt.Sprintf("S%05d", i))
	}
	read := func() {
		err := s.Update(ctx, func(tx *Tx) error {
			r, err := tx.TickTasks(ctx, "p", named, time.Now(), func(id string, v int64) *domain.Task { return held[id] })
			for _, t := range r.Tasks {
				held[t.ID] = t
			}
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	read()
	b.ResetTimer()
	for range b.N {
		read()
	}
}

// BenchmarkLive is the list of live tasks by node (1,000 on 20 nodes).
func BenchmarkLive(b *testing.B) {
	s := benchStore(b, 10000, 1000, 20)
	ctx := context.Background()
	b.ResetTimer()
	for range b.N {
		if _, err := s.Live(ctx, []string{"p"}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkTickParts(b *testing.B) {
	s := benchStore(b, 10000, 1000, 20)
	ctx := context.Background()
	var named []string
	for i := range 1000 {
		named = append(named, fmt.Sprintf("S%05d", i))
	}
	ids, _ := json.Marshal(named)
	for _, q := range []struct {
		name string
		sql  string
		args []any
	}{
		{"select-named", tickSelect, []any{"p", string(ids)}},
		{"select-none", tickSelect, []any{"p", "[]"}},
		{"modes", `SELECT t.id, r.api_mode FROM (` + byStatus(domain.Claimed, domain.Running) + `) AS l
		JOIN tasks AS t ON t.project = ?1 AND t.id = l.id
		JOIN attempts AS r ON r.project = t.project AND r.task = t.id AND r.attempt = t.attempt
		WHERE r.api_mode != ''`, []any{"p"}},
		{"live", byStatus(domain.Claimed, domain.Running, domain.Blocked), []any{"p"}},
		{"trivial", `SELECT 1`, nil},
	} {
		b.Run(q.name, func(b *testing.B) {
			for range b.N {
				if err := eachRow(ctx, s.db, func(r scanner) error { return nil }, q.sql, q.args...); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
