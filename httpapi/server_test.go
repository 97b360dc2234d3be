package httpapi

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/home"
	"github.com/dispatch-tool/dispatch/readmodel"
	"github.com/dispatch-tool/dispatch/store"
)

// testHome is a home with a database holding project p and its tasks.
type testHome struct {
	dir string
	st  *store.Store
	srv *Server
	url string
}

func newTestHome(t testing.TB, tasks int) *testHome {
	t.Helper()
	ctx := t.Context()
	dir := t.TempDir()
	st, err := store.Open(ctx, home.DBPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	err = st.Update(ctx, func(tx *store.Tx) error {
		if err := tx.EnsureProject(ctx, "p", "{}"); err != nil {
			return err
		}
		for i := 1; i <= tasks; i++ {
			task := domain.Task{Project: "p", ID: fmt.Sprintf("S%05d", i), Title: fmt.Sprintf("task %d", i), Type: "implementation", Tool: "shell", Snapshot: []byte("echo hi")}
			if i > 1 {
				task.DependsOn = []string{fmt.Sprintf("S%05d", i-1)}
			}
			if err := tx.InsertTask(ctx, task); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(home.ConfigPath(dir), []byte("nodes:\n  - name: local\n    ssh: null\n    slots: 2\n    work_dir: "+filepath.Join(dir, "work")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tok, err := home.Token(dir)
	if err != nil {
		t.Fatal(err)
	}
	h := &testHome{dir: dir, st: st}
	h.srv = &Server{Home: dir, Token: tok, Config: home.ConfigPath(dir), Poll: 20 * time.Millisecond}
	ts := httptest.NewServer(h.srv.Handler())
	t.Cleanup(func() {
		ts.CloseClientConnections()
		ts.Close()
		h.srv.Close()
	})
	h.url = ts.URL
	return h
}

func (h *testHome) get(t testing.TB, path string, hdr ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, h.url+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+h.srv.Token)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func (h *testHome) getJSON(t *testing.T, path string, v any) {
	t.Helper()
	resp := h.get(t, path)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s %s", path, resp.Status, b)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("GET %s: %v: %s", path, err, b)
	}
}

func (h *testHome) event(t *testing.T, msg string) {
	t.Helper()
	err := h.st.Update(t.Context(), func(tx *store.Tx) error {
		return tx.Event(t.Context(), store.Event{Project: "p", Task: "S00001", Kind: "note", Message: msg})
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestAuth(t *testing.T) {
	h := newTestHome(t, 1)
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(path string, set func(*http.Request)) *http.Response {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, h.url+path, nil)
		if set != nil {
			set(req)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.Header.Get("Content-Security-Policy") != csp {
			t.Errorf("GET %s: CSP %q", path, resp.Header.Get("Content-Security-Policy"))
		}
		return resp
	}
	bearer := func(tok string) func(*http.Request) {
		return func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+tok) }
	}
	for _, tt := range []struct {
		path string
		set  func(*http.Request)
		want int
	}{
		{"/api/v1/projects", nil, 401},
		{"/", nil, 401},
		{"/api/v1/projects/p/tasks/S00001/log", nil, 401},
		{"/api/v1/events", nil, 401},
		{"/api/v1/projects", bearer("wrong"), 401},
		{"/api/v1/projects", bearer(h.srv.Token[:10]), 401},
		{"/api/v1/projects", bearer(h.srv.Token), 200},
		{"/api/v1/projects", func(r *http.Request) { r.Header.Set("Authorization", "bearer "+h.srv.Token) }, 200},
		{"/api/v1/projects?token=" + h.srv.Token, nil, 401}, // the API takes no token in its address
		{"/?token=wrong", nil, 401},
		{"/api/v1/projects", func(r *http.Request) { r.AddCookie(&http.Cookie{Name: CookieName, Value: "wrong"}) }, 401},
		{"/api/v1/projects", func(r *http.Request) { r.AddCookie(&http.Cookie{Name: CookieName, Value: h.srv.Token}) }, 200},
	} {
		if got := get(tt.path, tt.set); got.StatusCode != tt.want {
			t.Errorf("GET %s: %d, want %d", tt.path, got.StatusCode, tt.want)
		}
	}
	// The link the operator is given: the cookie is set, the token leaves
	// the address.
	resp := get("/?token="+h.srv.Token+"#/p/p", nil)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/" {
		t.Fatalf("/?token=: %d to %q, want 303 to /", resp.StatusCode, resp.Header.Get("Location"))
	}
	cookies := resp.Cookies()
	if len(cookies) != 2 || cookies[1].Name != SessionCookie || cookies[0].Name != CookieName || cookies[0].Value != h.srv.Token || !cookies[0].HttpOnly ||
		cookies[0].SameSite != http.SameSiteStrictMode || cookies[0].Path != "/" {
		t.Fatalf("cookie %+v", cookies)
	}
	if resp := get("/api/v1/projects", func(r *http.Request) { r.AddCookie(cookies[0]) }); resp.StatusCode != 200 {
		t.Fatalf("with the cookie: %d", resp.StatusCode)
	}
	// The views only read: nothing but GET (the actions are TestActions').
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, h.url+"/api/v1/projects", strings.NewReader("{}"))
	req.Header.Set("Authorization", "Bearer "+h.srv.Token)
	if resp, err := client.Do(req); err != nil || resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("POST: %v %v", resp, err)
	}
}

func TestTokenFile(t *testing.T) {
	dir := t.TempDir()
	tok, err := home.Token(dir)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(home.TokenPath(dir))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file: %v %v", fi.Mode(), err)
	}
	if again, err := home.Token(dir); err != nil || again != tok {
		t.Fatalf("second use: %q %v, want the same token", again, err)
	}
	os.Chmod(home.TokenPath(dir), 0o644)
	if _, err := home.Token(dir); err == nil || !strings.Contains(err.Error(), "private") {
		t.Fatalf("readable by others: %v", err)
	}
	// A link planted where the token goes is not followed.
	os.Remove(home.TokenPath(dir))
	secret := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(secret, []byte(strings.Repeat("a", 64)), 0o600)
	os.Symlink(secret, home.TokenPath(dir))
	if _, err := home.Token(dir); err == nil {
		t.Fatal("a symlink was taken for the token")
	}
}

func TestListenCheck(t *testing.T) {
	for _, tt := range []struct {
		l    Listen
		want string // "" ok
	}{
		{Listen{Addr: "127.0.0.1:7878"}, ""},
		{Listen{Addr: "[::1]:7878"}, ""},
		{Listen{Addr: "localhost:0"}, ""},
		{Listen{Addr: "0.0.0.0:7878"}, "refusing"},
		{Listen{Addr: ":7878"}, "refusing"},
		{Listen{Addr: "192.168.1.5:7878"}, "refusing"},
		{Listen{Addr: "example.com:7878"}, "refusing"},
		{Listen{Addr: "0.0.0.0:7878", Insecure: true}, ""},
		{Listen{Addr: "0.0.0.0:7878", CertFile: "c", KeyFile: "k"}, ""},
		{Listen{Addr: "0.0.0.0:7878", CertFile: "c"}, "go together"},
		{Listen{Addr: "7878"}, "not host:port"},
	} {
		err := tt.l.Check()
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%+v: %v", tt.l, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%+v: %v, want %q", tt.l, err, tt.want)
		}
	}
	if err := (Listen{Addr: "0.0.0.0:0"}).Check(); !errors.Is(err, ErrExposed) || !strings.Contains(err.Error(), "--tls-cert") {
		t.Errorf("the refusal says the fix: %v", err)
	}
}

func TestCutLines(t *testing.T) {
	for _, tt := range []struct {
		in   string
		n    int
		want string
	}{
		{"a\nb\nc\n", 2, "b\nc\n"},
		{"a\nb\nc", 2, "b\nc"},
		{"a\nb\nc\n", 5, "a\nb\nc\n"},
		{"a\nb\nc\n", 0, ""},
		{"", 3, ""},
		{"only", 1, "only"},
	} {
		if got := string(cutLines([]byte(tt.in), tt.n)); got != tt.want {
			t.Errorf("cutLines(%q, %d) = %q, want %q", tt.in, tt.n, got, tt.want)
		}
	}
}

// readEvents reads the stream's events until n came or the body ends.
func readEvents(t *testing.T, body io.Reader, n int) []int64 {
	t.Helper()
	var ids []int64
	sc := bufio.NewScanner(body)
	for len(ids) < n && sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "id: "); ok {
			id, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("id line %q", line)
			}
			ids = append(ids, id)
		}
		if v, ok := strings.CutPrefix(line, "data: "); ok {
			var ev struct {
				ID   int64  `json:"id"`
				Kind string `json:"kind"`
			}
			if err := json.Unmarshal([]byte(v), &ev); err != nil || ev.ID != ids[len(ids)-1] {
				t.Fatalf("data line %q after id %d: %v", v, ids[len(ids)-1], err)
			}
		}
	}
	return ids
}

// TestEventsResume: a stream broken off and resumed with Last-Event-ID
// gets every event exactly once, in order, while events keep coming.
func TestEventsResume(t *testing.T) {
	h := newTestHome(t, 1)
	first, err := h.st.LastEventID(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	const total = 300
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range total {
			h.event(t, fmt.Sprint("event ", i))
		}
	}()
	var got []int64
	after := strconv.FormatInt(first, 10)
	for round := 0; len(got) < total; round++ {
		if round > 50 {
			t.Fatalf("after 50 reconnections: %d of %d events", len(got), total)
		}
		resp := h.get(t, "/api/v1/events?project=p", "Last-Event-ID", after)
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
			t.Fatalf("events: %s %q", resp.Status, resp.Header.Get("Content-Type"))
		}
		ids := readEvents(t, resp.Body, min(37, total-len(got))) // then hang up
		resp.Body.Close()
		got = append(got, ids...)
		if len(ids) > 0 {
			after = strconv.FormatInt(ids[len(ids)-1], 10)
		}
	}
	<-done
	for i, id := range got[:total] {
		if id != first+int64(i)+1 {
			t.Fatalf("event %d has id %d, want %d (lost or repeated): %v", i, id, first+int64(i)+1, got)
		}
	}
}

// TestEventsStartAtTheNewest: a new listener gets what is recorded after
// it came, not the history; ?after=0 gets the history.
func TestEventsStartAtTheNewest(t *testing.T) {
	h := newTestHome(t, 1)
	h.event(t, "old")
	newest, _ := h.st.LastEventID(t.Context())
	resp := h.get(t, "/api/v1/events")
	defer resp.Body.Close()
	h.event(t, "new")
	if ids := readEvents(t, resp.Body, 1); len(ids) != 1 || ids[0] != newest+1 {
		t.Fatalf("first event %v, want %d", ids, newest+1)
	}
	all := h.get(t, "/api/v1/events?after=0")
	defer all.Body.Close()
	if ids := readEvents(t, all.Body, int(newest)+1); len(ids) != int(newest)+1 || ids[0] != 1 {
		t.Fatalf("history: %v", ids)
	}
	bad := h.get(t, "/api/v1/events", "Last-Event-ID", "x")
	bad.Body.Close()
	if bad.StatusCode != 400 {
		t.Fatalf("a bad Last-Event-ID: %d", bad.StatusCode)
	}
}

// TestStopEndsStreams: Stop ends the open event streams and log
// follows and waits for their handlers before the database is closed.
func TestStopEndsStreams(t *testing.T) {
	h := newTestHome(t, 1)
	ln, err := Listen{Addr: "127.0.0.1:0"}.Open()
	if err != nil {
		t.Fatal(err)
	}
	running := h.srv.Serve(ln)
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+ln.Addr().String()+"/api/v1/events", nil)
	req.Header.Set("Authorization", "Bearer "+h.srv.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	stopped := make(chan struct{})
	go func() {
		running.Stop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(time.Minute):
		t.Fatal("Stop did not end an open event stream")
	}
	if _, err := io.ReadAll(resp.Body); err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Logf("stream ended: %v", err)
	}
}

func TestStatusWindow(t *testing.T) {
	h := newTestHome(t, 1000)
	var full struct {
		Tasks []struct{ ID string } `json:"tasks"`
	}
	h.getJSON(t, "/api/v1/projects/p", &full)
	if len(full.Tasks) != 1000 {
		t.Fatalf("full status: %d tasks", len(full.Tasks))
	}
	var page struct {
		Project string
		Tasks   []struct{ ID string } `json:"tasks"`
		Page    readmodel.Page        `json:"page"`
		Counts  map[string]int        `json:"counts"`
	}
	h.getJSON(t, "/api/v1/projects/p?offset=200&limit=50", &page)
	if len(page.Tasks) != 50 || page.Tasks[0].ID != "S00201" || page.Page != (readmodel.Page{Offset: 200, Limit: 50, Total: 1000}) ||
		page.Counts["pending"] != 1000 || page.Project != "p" {
		t.Fatalf("page: %d tasks from %v, %+v, counts %v", len(page.Tasks), page.Tasks[:1], page.Page, page.Counts)
	}
	var rows struct {
		Tasks []struct {
			ID        string                 `json:"id"`
			APIMode   string                 `json:"api_mode"`
			CostUSD   *float64               `json:"cost_usd"`
			LastEvent *struct{ Kind string } `json:"last_event"`
		} `json:"tasks"`
	}
	h.getJSON(t, "/api/v1/projects/p?offset=0&limit=2", &rows)
	if len(rows.Tasks) != 2 || rows.Tasks[0].LastEvent == nil || rows.Tasks[0].LastEvent.Kind != "created" || rows.Tasks[0].CostUSD == nil {
		t.Fatalf("rows of a window: %+v", rows.Tasks)
	}
	h.getJSON(t, "/api/v1/projects/p?offset=990&limit=50", &page)
	if len(page.Tasks) != 10 {
		t.Fatalf("last page: %d tasks", len(page.Tasks))
	}
	h.getJSON(t, "/api/v1/projects/p?status=running", &page)
	if len(page.Tasks) != 0 || page.Page.Total != 0 {
		t.Fatalf("running: %+v", page.Page)
	}
	for _, bad := range []string{"?offset=-1", "?limit=x"} {
		resp := h.get(t, "/api/v1/projects/p"+bad)
		resp.Body.Close()
		if resp.StatusCode != 400 {
			t.Errorf("%s: %d", bad, resp.StatusCode)
		}
	}
	var g struct {
		Tasks []struct {
			ID        string   `json:"id"`
			DependsOn []string `json:"depends_on"`
		} `json:"tasks"`
	}
	h.getJSON(t, "/api/v1/projects/p/graph", &g)
	if len(g.Tasks) != 1000 || len(g.Tasks[1].DependsOn) != 1 || g.Tasks[1].DependsOn[0] != "S00001" {
		t.Fatalf("graph: %d tasks, %+v", len(g.Tasks), g.Tasks[:2])
	}
	var d struct {
		ID         string   `json:"id"`
		Dependents []string `json:"dependents"`
		DependsOn  []string `json:"depends_on"`
		Attempts   []any    `json:"attempts"`
	}
	h.getJSON(t, "/api/v1/projects/p/tasks/S00002", &d)
	if d.ID != "S00002" || len(d.Dependents) != 1 || d.Dependents[0] != "S00003" || len(d.DependsOn) != 1 || d.Attempts == nil {
		t.Fatalf("task detail: %+v", d)
	}
}

func TestNotFound(t *testing.T) {
	h := newTestHome(t, 1)
	for path, want := range map[string]int{
		"/api/v1/projects/nope":                 404,
		"/api/v1/projects/p/tasks/NOPE":         404,
		"/api/v1/projects/p/tasks/NOPE/log":     404,
		"/api/v1/projects/..%2Fetc":             400,
		"/api/v1/projects/p?run=9":              404,
		"/api/v1/projects/p?run=x":              400,
		"/api/v1/nothing":                       404,
		"/api/v1/projects/p/tasks/S00001/log":   404, // no attempt yet
		"/api/v1/events?project=..%2Fx":         400,
		"/api/v1/projects/p/tasks/S00001?run=0": 400,
	} {
		resp := h.get(t, path)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var e apiError
		if resp.StatusCode != want || json.Unmarshal(b, &e) != nil || e.Error == "" {
			t.Errorf("GET %s: %d %s, want %d with an error", path, resp.StatusCode, b, want)
		}
	}
}

// TestStatusWindowHugeNumbers: an offset plus a limit past the largest int
// (a client's ?limit=9223372036854775807) is the rest of the tasks, not a
// panic that drops the connection with no answer.
func TestStatusWindowHugeNumbers(t *testing.T) {
	h := newTestHome(t, 10)
	var page struct {
		Tasks []struct{ ID string } `json:"tasks"`
		Page  readmodel.Page        `json:"page"`
	}
	h.getJSON(t, "/api/v1/projects/p?offset=3&limit=9223372036854775807", &page)
	if len(page.Tasks) != 7 || page.Tasks[0].ID != "S00004" {
		t.Fatalf("huge limit: %d tasks, %+v", len(page.Tasks), page.Page)
	}
	h.getJSON(t, "/api/v1/projects/p?offset=9223372036854775807&limit=9223372036854775807", &page)
	if len(page.Tasks) != 0 || page.Page.Total != 10 {
		t.Fatalf("huge offset: %d tasks, %+v", len(page.Tasks), page.Page)
	}
}

// TestFollowKeepsCharactersWhole: a followed log is read in pieces as the
// node has them, and a piece may end inside a character (a tool's "é" or
// "✓" written across two reads). Each message is JSON text: the character
// goes whole into the next one, never as two U+FFFD.
func TestFollowKeepsCharactersWhole(t *testing.T) {
	rec := httptest.NewRecorder()
	cw := &chunkWriter{out: startSSE(rec)}
	for _, p := range []string{"caf\xc3", "\xa9 ok \xe2\x9c", "\x93\n", "bad \xff end"} {
		if n, err := cw.Write([]byte(p)); n != len(p) || err != nil {
			t.Fatalf("write %q: %d %v", p, n, err)
		}
	}
	if err := cw.flush(); err != nil {
		t.Fatal(err)
	}
	var got strings.Builder
	for _, l := range strings.Split(rec.Body.String(), "\n") {
		if v, ok := strings.CutPrefix(l, "data: "); ok {
			var c logChunk
			if err := json.Unmarshal([]byte(v), &c); err != nil {
				t.Fatal(err)
			}
			got.WriteString(c.Text)
		}
	}
	if want := "café ok ✓\nbad \uFFFD end"; got.String() != want {
		t.Errorf("followed text %q, want %q", got.String(), want)
	}
}
