package httpapi

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/control"
	"github.com/dispatch-tool/dispatch/controller"
	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/home"
	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/service"
	"github.com/dispatch-tool/dispatch/store"
)

func TestGuard(t *testing.T) {
	const host = "127.0.0.1:7878"
	api := caller{token: home.TokenFile}
	browser := caller{token: home.TokenFile, session: true}
	ok := guardIn{op: "retry", method: http.MethodPost, caller: browser, canAct: true, origin: "http://" + host, host: host,
		fetchSite: "same-origin", csrf: "abc", want: "abc"}
	with := func(f func(*guardIn)) guardIn { in := ok; f(&in); return in }
	for _, tc := range []struct {
		name string
		in   guardIn
		code int
		says string
	}{
		{"a browser's action with its CSRF token and Origin", ok, 0, ""},
		{"over TLS", with(func(in *guardIn) { in.tls, in.origin = true, "https://"+host }), 0, ""},
		{"no Sec-Fetch-Site (an older browser)", with(func(in *guardIn) { in.fetchSite = "" }), 0, ""},
		{"a bearer token needs no CSRF token", with(func(in *guardIn) { in.caller, in.origin, in.csrf = api, "", "" }), 0, ""},
		{"a GET", with(func(in *guardIn) { in.method = http.MethodGet }), 405, "send it as POST"},
		{"a GET with a bearer token", with(func(in *guardIn) { in.method, in.caller = http.MethodGet, api }), 405, "nothing was changed"},
		{"the read-only token", with(func(in *guardIn) { in.caller = caller{token: home.ReadTokenFile, readOnly: true} }), 403, "only reads"},
		{"a read-only server", with(func(in *guardIn) { in.readOnly = "started with --read-only" }), 403, "started with --read-only"},
		{"a server that cannot act", with(func(in *guardIn) { in.caller, in.canAct = api, false }), 403, "this server only reads"},
		{"no CSRF header", with(func(in *guardIn) { in.csrf = "" }), 403, CSRFHeader + " header is missing"},
		{"another session's CSRF token", with(func(in *guardIn) { in.csrf = "abd" }), 403, "not this session's"},
		{"no session cookie", with(func(in *guardIn) { in.want = "" }), 403, "not this session's"},
		{"another site", with(func(in *guardIn) { in.fetchSite, in.origin = "cross-site", "https://evil.example" }), 403, "another site"},
		{"another origin", with(func(in *guardIn) { in.fetchSite, in.origin = "", "http://127.0.0.1:9999" }), 403, "not from this dashboard"},
		{"http origin for a TLS server", with(func(in *guardIn) { in.tls = true }), 403, "not from this dashboard"},
		{"no Origin", with(func(in *guardIn) { in.origin = "" }), 403, "must carry its Origin"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, err := guard(tc.in)
			if code != tc.code || (err == nil) != (tc.code == 0) || (err != nil && !strings.Contains(err.Error(), tc.says)) {
				t.Errorf("guard: %d %v, want %d saying %q", code, err, tc.code, tc.says)
			}
		})
	}
}

// actingHome is a test home whose server acts through a real controller
// on its database (as the control socket's would), with project p's
// specs on disk and a schedule.
func actingHome(t *testing.T) *testHome {
	t.Helper()
	h := newTestHome(t, 3)
	specs := filepath.Join(home.SpecsDir(h.dir), "p")
	if err := os.MkdirAll(specs, 0o700); err != nil {
		t.Fatal(err)
	}
	for name, text := range map[string]string{
		"S00001-a.md": "echo hi\n", "S00002-b.md": "---\ndepends_on: [S00001]\n---\necho hi\n",
		"S00003-c.md":  "---\ndepends_on: [S00002]\n---\necho hi\n",
		"project.yaml": "integration: false\nschedule: {every: 6h}\n",
	} {
		if err := os.WriteFile(filepath.Join(specs, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := nodes.Load(home.ConfigPath(h.dir))
	if err != nil {
		t.Fatal(err)
	}
	ctl := controller.New(controller.Options{Home: h.dir, Config: cfg, Store: h.st,
		SetSchedule: func(ctx context.Context, project string, enabled bool, now time.Time) (string, error) {
			return service.SetEnabled(ctx, h.st, home.SpecsDir(h.dir), project, enabled, now)
		}})
	t.Cleanup(ctl.Close)
	h.srv.Act = func(ctx context.Context, req control.Request) (control.Reply, error) { return ctl.Do(ctx, req), nil }
	read, err := home.ReadToken(h.dir)
	if err != nil {
		t.Fatal(err)
	}
	h.srv.ReadToken = read
	// A finished project, old, whose S01 completed.
	err = h.st.Update(t.Context(), func(tx *store.Tx) error {
		ctx := t.Context()
		if err := tx.EnsureProject(ctx, "old", "{}"); err != nil {
			return err
		}
		if err := tx.InsertTask(ctx, domain.Task{Project: "old", ID: "S01", Title: "done", Type: "implementation", Tool: "shell", Snapshot: []byte("true")}); err != nil {
			return err
		}
		for _, c := range [][2]domain.Status{{domain.Pending, domain.Claimed}, {domain.Claimed, domain.Running}, {domain.Running, domain.Completed}} {
			if _, _, err := tx.Transition(ctx, store.Change{Project: "old", Task: "S01", From: c[0], To: c[1]}); err != nil {
				return err
			}
		}
		return tx.SetProject(ctx, "old", store.ProjectPatch{State: new(domain.ProjectDone), Result: new(domain.ResultPassed)}, "")
	})
	if err != nil {
		t.Fatal(err)
	}
	// S00001 failed.
	err = h.st.Update(t.Context(), func(tx *store.Tx) error {
		for _, to := range []domain.Status{domain.Claimed, domain.Running, domain.Failed} {
			from := map[domain.Status]domain.Status{domain.Claimed: domain.Pending, domain.Running: domain.Claimed, domain.Failed: domain.Running}[to]
			if _, _, err := tx.Transition(t.Context(), store.Change{Project: "p", Task: "S00001", From: from, To: to}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// post sends an action; hdr are header name, value pairs (a bearer token
// unless an Authorization or Cookie is among them).
func (h *testHome) post(t *testing.T, method, path, body string, hdr ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, h.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+h.srv.Token)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i] == "Cookie" {
			req.Header.Del("Authorization")
		}
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// state is what an action may change: the tasks' states, the project's
// state, the schedule and the newest event.
func (h *testHome) state(t *testing.T) string {
	t.Helper()
	ctx := t.Context()
	states, _, err := h.st.States(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	p, err := h.st.Project(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	sch := h.schedule(t)
	last, err := h.st.LastEventID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal([]any{states, p.State, sch.Enabled, last})
	return string(b)
}

// schedule is p's schedule as recorded.
func (h *testHome) schedule(t *testing.T) store.ScheduleState {
	t.Helper()
	all, err := h.st.Schedules(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range all {
		if s.Project == "p" {
			return s
		}
	}
	return store.ScheduleState{Project: "p"}
}

func (h *testHome) taskStatus(t *testing.T, id string) domain.Status {
	t.Helper()
	states, _, err := h.st.States(t.Context(), "p")
	if err != nil {
		t.Fatal(err)
	}
	return states[id]
}

// lastAction is the message of the newest event of an action.
func (h *testHome) lastAction(t *testing.T) string {
	t.Helper()
	evs, err := h.st.Events(t.Context(), "p", 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	for i := len(evs) - 1; i >= 0; i-- {
		if evs[i].Kind == control.ActionEvent {
			return evs[i].Message
		}
	}
	return ""
}

// TestActions carries out each action through the API as the CLI would,
// and checks what changed, the answer, and the event saying where it
// came from.
func TestActions(t *testing.T) {
	h := actingHome(t)
	for _, tc := range []struct {
		name, path, body string
		says, event      string
		check            func() bool
	}{
		{"retry a task", "/api/v1/projects/p/retry", `{"ids": ["S00001"]}`, "p: S00001 will run again",
			"retry S00001 by the operator from the API, token http.token: p: S00001 will run again",
			func() bool { return h.taskStatus(t, "S00001") == domain.Pending }},
		{"cancel a task", "/api/v1/projects/p/cancel", `{"ids": ["S00003"]}`, "p: canceled S00003",
			"cancel S00003 by the operator from the API", func() bool { return h.taskStatus(t, "S00003") == domain.Canceled }},
		{"retry the failed tasks", "/api/v1/projects/p/retry", `{"failed": true}`, "p: S00002 will run again", "retry S00002 by the operator",
			func() bool { return h.taskStatus(t, "S00002") == domain.Pending }},
		{"stop --kill", "/api/v1/projects/p/stop", `{"kill": true}`, "p stopped: nothing new starts", "stop --kill by the operator",
			func() bool { p, _ := h.st.Project(t.Context(), "p"); return p.State == domain.ProjectStopped }},
		{"start resumes", "/api/v1/projects/p/start", ``, "p handed to the running controller", "start by the operator",
			func() bool { p, _ := h.st.Project(t.Context(), "p"); return p.State == domain.ProjectActive }},
		{"disable the schedule", "/api/v1/schedules/p/disable", ``, "the schedule of p is disabled", "disable by the operator",
			func() bool { return !h.schedule(t).Enabled }},
		{"enable the schedule", "/api/v1/schedules/p/enable", `{}`, "the schedule of p is enabled", "enable by the operator",
			func() bool { return h.schedule(t).Enabled }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "retry the failed tasks" {
				failTask(t, h, "S00002")
			}
			code, body := h.post(t, http.MethodPost, tc.path, tc.body)
			var got struct{ Message string }
			if code != http.StatusOK || json.Unmarshal([]byte(body), &got) != nil || !strings.Contains(got.Message, tc.says) {
				t.Fatalf("POST %s %s: %d %s, want 200 saying %q", tc.path, tc.body, code, body, tc.says)
			}
			if !tc.check() {
				t.Errorf("POST %s %s: answered %q but the change is not made", tc.path, tc.body, got.Message)
			}
			if ev := h.lastAction(t); !strings.Contains(ev, tc.event) {
				t.Errorf("POST %s: the action's event is %q, want it to say %q", tc.path, ev, tc.event)
			}
		})
	}
}

// failTask moves a pending task to failed.
func failTask(t *testing.T, h *testHome, id string) {
	t.Helper()
	err := h.st.Update(t.Context(), func(tx *store.Tx) error {
		for _, c := range [][2]domain.Status{{domain.Pending, domain.Claimed}, {domain.Claimed, domain.Running}, {domain.Running, domain.Failed}} {
			if _, _, err := tx.Transition(t.Context(), store.Change{Project: "p", Task: id, From: c[0], To: c[1]}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestActionRefusals: bad input, a GET, a missing CSRF token, a read-only
// token or server: each a 4xx saying what is wrong, and nothing changed.
func TestActionRefusals(t *testing.T) {
	h := actingHome(t)
	origin := "http://" + strings.TrimPrefix(h.url, "http://")
	cookie := CookieName + "=" + h.srv.Token
	for _, tc := range []struct {
		name, method, path, body string
		hdr                      []string
		code                     int
		says                     string
	}{
		{"an unknown task", "POST", "/api/v1/projects/p/retry", `{"ids": ["S09999"]}`, nil, 404, `project p has no task "S09999"`},
		{"an unknown project", "POST", "/api/v1/projects/q/cancel", `{"ids": ["S01"]}`, nil, 404, `project "q" has not been started`},
		{"a finished project's cancel", "POST", "/api/v1/projects/old/cancel", `{"ids": ["S01"]}`, nil, 409, "old/S01 is already completed"},
		{"a task that is not running or waiting", "POST", "/api/v1/projects/p/cancel", `{"ids": ["S00001"]}`, nil, 409, "p/S00001 is already failed"},
		{"a waiting task's retry", "POST", "/api/v1/projects/p/retry", `{"ids": ["S00002"]}`, nil, 409, "already waiting to run"},
		{"not a task ID", "POST", "/api/v1/projects/p/retry", `{"ids": ["s1;rm"]}`, nil, 400, "is not a task ID"},
		{"no ids", "POST", "/api/v1/projects/p/cancel", `{}`, nil, 400, "name the tasks"},
		{"a flag that does not exist", "POST", "/api/v1/projects/p/retry", `{"ids": ["S00001"], "force": true}`, nil, 400, `unknown field "force"`},
		{"kill on a retry", "POST", "/api/v1/projects/p/retry", `{"ids": ["S00001"], "kill": true}`, nil, 400, "kill applies to stop only"},
		{"downstream on a cancel", "POST", "/api/v1/projects/p/cancel", `{"ids": ["S00001"], "downstream": true}`, nil, 400, "downstream applies to retry only"},
		{"a form", "POST", "/api/v1/projects/p/retry", `ids=S00001`, []string{"Content-Type", "application/x-www-form-urlencoded"}, 415, "must be JSON"},
		{"a bad project name", "POST", "/api/v1/projects/..x/stop", ``, nil, 400, ""},
		{"a schedule-less project", "POST", "/api/v1/schedules/q/enable", ``, nil, 409, "q"},
		{"a GET that retries", "GET", "/api/v1/projects/p/retry?ids=S00001", ``, nil, 405, "send it as POST"},
		{"a GET that stops", "GET", "/api/v1/projects/p/stop", ``, nil, 405, "send it as POST"},
		{"a browser without the CSRF header", "POST", "/api/v1/projects/p/retry", `{"ids": ["S00001"]}`, []string{"Cookie", cookie, "Origin", origin}, 403, CSRFHeader + " header is missing"},
		{"a browser without an Origin", "POST", "/api/v1/projects/p/retry", `{"ids": ["S00001"]}`, []string{"Cookie", cookie, CSRFHeader, "x"}, 403, "Origin"},
		{"another site", "POST", "/api/v1/projects/p/stop", `{"kill": true}`, []string{"Cookie", cookie, "Origin", "https://evil.example", "Sec-Fetch-Site", "cross-site"}, 403, "another site"},
		{"the read-only token", "POST", "/api/v1/projects/p/stop", ``, []string{"Authorization", "Bearer " + h.srv.ReadToken}, 403, "only reads"},
		{"the read-only token's cookie", "POST", "/api/v1/projects/p/stop", ``, []string{"Cookie", CookieName + "=" + h.srv.ReadToken, "Origin", origin}, 403, "only reads"},
		{"no token", "POST", "/api/v1/projects/p/stop", ``, []string{"Authorization", "Bearer wrong"}, 401, "a token is needed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := h.state(t)
			code, body := h.post(t, tc.method, tc.path, tc.body, tc.hdr...)
			var e apiError
			if code != tc.code || json.Unmarshal([]byte(body), &e) != nil || !strings.Contains(e.Error, tc.says) {
				t.Errorf("%s %s %s: %d %s, want %d saying %q", tc.method, tc.path, tc.body, code, body, tc.code, tc.says)
			}
			if after := h.state(t); after != before {
				t.Errorf("%s %s was refused but changed %s to %s", tc.method, tc.path, before, after)
			}
		})
	}
	t.Run("a read-only server", func(t *testing.T) {
		h.srv.ReadOnly = "this server was started with dispatch serve --http --read-only"
		defer func() { h.srv.ReadOnly = "" }()
		before := h.state(t)
		if code, body := h.post(t, "POST", "/api/v1/projects/p/stop", ``); code != 403 || !strings.Contains(body, "--read-only") {
			t.Errorf("stop on a read-only server: %d %s", code, body)
		}
		var v sessionView
		h.getJSON(t, "/api/v1/session", &v)
		if v.Actions || !strings.Contains(v.Refused, "--read-only") {
			t.Errorf("session on a read-only server: %+v", v)
		}
		if after := h.state(t); after != before {
			t.Errorf("a read-only server changed %s to %s", before, after)
		}
	})
}

// TestBrowserSession: the link's redirect sets a session cookie beside the
// token's (both HttpOnly, SameSite=Strict); GET /api/v1/session gives the
// CSRF token, with which (and the page's Origin) the browser's action is
// carried out; another session's token is refused.
func TestBrowserSession(t *testing.T) {
	h := actingHome(t)
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Get(h.url + "/?token=" + h.srv.Token)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var cookies []string
	for _, c := range resp.Cookies() {
		if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode {
			t.Errorf("cookie %s is not HttpOnly and SameSite=Strict: %+v", c.Name, c)
		}
		cookies = append(cookies, c.Name+"="+c.Value)
	}
	if len(cookies) != 2 {
		t.Fatalf("cookies %v, want the token's and the session's", cookies)
	}
	session := func(cookie string) sessionView {
		resp := h.get(t, "/api/v1/session", "Authorization", "", "Cookie", cookie)
		defer resp.Body.Close()
		var v sessionView
		if err := json.NewDecoder(resp.Body).Decode(&v); err != nil || resp.StatusCode != 200 {
			t.Fatalf("session: %d %v", resp.StatusCode, err)
		}
		return v
	}
	v := session(strings.Join(cookies, "; "))
	if !v.Actions || len(v.CSRF) != 64 {
		t.Fatalf("session %+v", v)
	}
	origin := h.url
	// A session cookie made by another browser: its CSRF token differs.
	other := session(CookieName + "=" + h.srv.Token)
	if other.CSRF == "" || other.CSRF == v.CSRF {
		t.Fatalf("a second session's CSRF token %q (the first's %q)", other.CSRF, v.CSRF)
	}
	before := h.state(t)
	if code, body := h.post(t, "POST", "/api/v1/projects/p/retry", `{"ids": ["S00001"]}`, "Cookie", strings.Join(cookies, "; "),
		"Origin", origin, CSRFHeader, other.CSRF); code != 403 || h.state(t) != before {
		t.Errorf("another session's CSRF token: %d %s", code, body)
	}
	if code, body := h.post(t, "POST", "/api/v1/projects/p/retry", `{"ids": ["S00001"]}`, "Cookie", strings.Join(cookies, "; "),
		"Origin", origin, "Sec-Fetch-Site", "same-origin", CSRFHeader, v.CSRF); code != 200 || h.taskStatus(t, "S00001") != domain.Pending {
		t.Fatalf("the dashboard's retry: %d %s", code, body)
	}
	if ev := h.lastAction(t); !strings.Contains(ev, "from the dashboard, token http.token") {
		t.Errorf("the dashboard's action is recorded as %q", ev)
	}
}

// TestRetryDownstreamBody: a retry's "downstream" reaches the controller's
// request, as dispatch retry --downstream sends it.
func TestRetryDownstreamBody(t *testing.T) {
	s := &Server{}
	r := httptest.NewRequest("POST", "/api/v1/projects/p/retry", strings.NewReader(`{"ids": ["S01"], "downstream": true}`))
	r.Header.Set("Content-Type", "application/json")
	r.SetPathValue("project", "p")
	req, code, err := s.actionRequest(r, "retry")
	if code != 0 || err != nil || !req.Downstream || len(req.Tasks) != 1 {
		t.Fatalf("actionRequest = %+v, %d, %v; want downstream retry of S01", req, code, err)
	}
}
