package httpapi

import (
	"context"
	"database/sql"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/home"
	"github.com/dispatch-tool/dispatch/store"
	_ "modernc.org/sqlite"
)

// TestReadsOfADatabaseBeingMade: the first `dispatch start` makes the
// database file, then applies its migrations; a reader that comes in
// between (the dashboard's event stream polls for the file) got a 500, "no
// such table: events". Now the event stream waits for the whole database,
// the list views show nothing started, a project's view answers 503 with
// Retry-After saying why; once the migrations are in, all read it.
func TestReadsOfADatabaseBeingMade(t *testing.T) {
	dir := t.TempDir()
	// What store.Open leaves before its first migration: a WAL database
	// without a table.
	ts, tok := serveAfterSQL(t, dir, "PRAGMA journal_mode=wal")
	get := func(ctx context.Context, path string) (*http.Response, string, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, ts.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		res, err := http.DefaultTransport.RoundTrip(req)
		if err != nil {
			return nil, "", err
		}
		if strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream") {
			return res, "", nil
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res, string(b), nil
	}

	res, body, err := get(t.Context(), "/api/v1/projects")
	if err != nil || res.StatusCode != http.StatusOK || !strings.Contains(body, `"projects": []`) {
		t.Errorf("projects of a database being made: %v %v %s; want 200 and none", res, err, body)
	}
	res, body, err = get(t.Context(), "/api/v1/projects/p")
	if err != nil || res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Retry-After") == "" ||
		!strings.Contains(body, "try again") {
		t.Errorf("a project of a database being made: %v %v %s; want 503 with Retry-After and the reason", res, err, body)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	res, body, err = get(ctx, "/api/v1/events")
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("the event stream of a database being made answered %v %v %s; want it to wait for the database", res, err, body)
	}

	st, err := store.Open(t.Context(), home.DBPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.Update(t.Context(), func(tx *store.Tx) error { return tx.EnsureProject(t.Context(), "p", "{}") }); err != nil {
		t.Fatal(err)
	}
	if res, body, err := get(t.Context(), "/api/v1/projects/p"); err != nil || res.StatusCode != http.StatusOK {
		t.Errorf("project p once the database is whole: %v %v %s", res, err, body)
	}
	ctx, cancel = context.WithCancel(t.Context())
	defer cancel()
	res, _, err = get(ctx, "/api/v1/events")
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("the event stream once the database is whole: %v %v", res, err)
	}
	res.Body.Close()
}

// TestReadsOfAnOlderDatabase: a database an older dispatch made (its
// schema behind this dispatch's; `dispatch serve --web` beside an older
// controller still running) is not a home where nothing started: the
// views answer 503 saying so, not an empty list.
func TestReadsOfAnOlderDatabase(t *testing.T) {
	dir := t.TempDir()
	st, err := store.Open(t.Context(), home.DBPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	ts, tok := serveAfterSQL(t, dir, "DELETE FROM schema_migrations WHERE version = (SELECT MAX(version) FROM schema_migrations)")
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, ts.URL+"/api/v1/projects", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(b), "older dispatch") {
		t.Errorf("projects of an older database: %d %s; want 503 naming an older dispatch", res.StatusCode, b)
	}
}

// serveAfterSQL runs stmt on dir's database (made if missing) and serves
// the API of dir; it returns the server and its token.
func serveAfterSQL(t *testing.T, dir, stmt string) (*httptest.Server, string) {
	t.Helper()
	db, err := sql.Open("sqlite", home.DBPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(stmt); err != nil {
		t.Fatal(err)
	}
	db.Close()
	tok, err := home.Token(dir)
	if err != nil {
		t.Fatal(err)
	}
	srv := &Server{Home: dir, Token: tok, Config: home.ConfigPath(dir), Poll: 20 * time.Millisecond}
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		ts.CloseClientConnections()
		ts.Close()
		srv.Close()
	})
	return ts, tok
}
