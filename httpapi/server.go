package httpapi

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dispatch-tool/dispatch/control"
	"github.com/dispatch-tool/dispatch/home"
	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/readmodel"
	"github.com/dispatch-tool/dispatch/spec"
	"github.com/dispatch-tool/dispatch/store"
)

// CookieName is the cookie that carries the token in a browser.
const CookieName = "dispatch_token"

// csp is the dashboard's Content-Security-Policy: its own scripts, styles
// and API, nothing inline, nothing from elsewhere.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Server answers the API of one home. Its zero value is not usable: set
// Home, Token and Config.
type Server struct {
	Home   string
	Token  string
	Config string // nodes.yaml
	// UI serves the dashboard at /; nil serves a line saying there is none.
	UI  http.Handler
	Log *slog.Logger
	// Secure marks the cookie Secure (the server speaks TLS).
	Secure bool
	// Poll is how often an event stream or a followed log looks for more
	// (default 250 ms and 1 s).
	Poll time.Duration
	// Now is the clock of the views (default time.Now).
	Now func() time.Time
	// Refresh asks the nodes of the views' tasks for their attempts now
	// (?refresh=1 on a project's status, as `status --refresh`); nil: the
	// server cannot, and says so.
	Refresh func(ctx context.Context, cfg *nodes.Config, views []*readmodel.StatusView) error
	// Act carries out an action (retry, cancel, stop, start, enable,
	// disable) as the CLI does: through the home's running controller.
	// nil: this server refuses every action.
	Act func(ctx context.Context, req control.Request) (control.Reply, error)
	// ReadOnly, when set, is why this server refuses every action
	// (serve --http --read-only).
	ReadOnly string
	// ReadToken, when set, is a second token that reads and never acts
	// (home.ReadTokenFile).
	ReadToken string

	mu sync.Mutex
	st *store.Store
}

// Handler is the server's HTTP handler.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	api := map[string]http.HandlerFunc{
		"/api/v1/projects":                          s.projects,
		"/api/v1/projects/{project}":                s.status,
		"/api/v1/projects/{project}/summary":        s.projectView(s.summary),
		"/api/v1/projects/{project}/report":         s.projectView(s.report),
		"/api/v1/projects/{project}/runs":           s.projectView(s.runs),
		"/api/v1/projects/{project}/graph":          s.projectView(s.graph),
		"/api/v1/projects/{project}/tasks/{id}":     s.projectView(s.task),
		"/api/v1/projects/{project}/tasks/{id}/log": s.log,
		"/api/v1/nodes":                             s.nodes,
		"/api/v1/controller":                        s.controller,
		"/api/v1/schedules":                         s.schedules,
		"/api/v1/events":                            s.events,
	}
	api["/api/v1/session"] = s.session
	for path, h := range api {
		mux.HandleFunc("GET "+path, h)
	}
	// Any method: a GET that tries to change state is answered 405.
	for path, op := range actionPaths {
		mux.HandleFunc(path, s.action(op))
	}
	mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			writeError(w, http.StatusMethodNotAllowed, fmt.Errorf("%s %s: this endpoint only reads (GET); the actions are POST under /api/v1/projects/<p>/ and /api/v1/schedules/<p>/ (docs/API.md)", r.Method, r.URL.Path))
			return
		}
		writeError(w, http.StatusNotFound, fmt.Errorf("no API endpoint %s %s: see docs/API.md", r.Method, r.URL.Path))
	})
	ui := s.UI
	if ui == nil {
		ui = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "this dispatch has no dashboard; the API is under /api/v1", http.StatusNotFound)
		})
	}
	mux.Handle("/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			writeError(w, http.StatusMethodNotAllowed, errors.New("the dashboard's pages are GET only; its actions are POST under /api/v1 (docs/API.md)"))
			return
		}
		ui.ServeHTTP(w, r)
	}))
	return s.secure(mux)
}

// secure sets the headers every answer carries and lets only requests that
// carry the token through. /?token=T (a link the operator was given) sets
// the cookie and sends the browser on to the page without the token in
// its address.
func (s *Server) secure(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", csp)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Cache-Control", "no-store")
		if q := r.URL.Query().Get("token"); q != "" && r.Method == http.MethodGet && !isAPI(r) {
			if _, ok := s.tokenOf(q); !ok {
				writeError(w, http.StatusUnauthorized, errors.New("wrong token: use the one in the home's http.token"))
				return
			}
			http.SetCookie(w, &http.Cookie{Name: CookieName, Value: q, Path: "/", HttpOnly: true, Secure: s.Secure,
				SameSite: http.SameSiteStrictMode})
			s.setSession(w, r)
			u := *r.URL
			qs := u.Query()
			qs.Del("token")
			u.RawQuery = qs.Encode()
			http.Redirect(w, r, u.RequestURI(), http.StatusSeeOther)
			return
		}
		c, ok := s.authorized(r)
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="dispatch"`)
			writeError(w, http.StatusUnauthorized, errors.New("a token is needed: Authorization: Bearer <the home's http.token>, "+
				"or open the URL dispatch serve --http printed (/?token=…)"))
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), callerKey{}, c)))
	})
}

func isAPI(r *http.Request) bool { return len(r.URL.Path) >= 5 && r.URL.Path[:5] == "/api/" }

// authorized is who the request's token says it is: a bearer token, else
// the cookie (a browser's session).
func (s *Server) authorized(r *http.Request) (caller, bool) {
	// The scheme's name is case-insensitive (RFC 9110 §11.1).
	if a := r.Header.Get("Authorization"); len(a) > 7 && strings.EqualFold(a[:7], "Bearer ") {
		return s.tokenOf(a[7:])
	}
	if ck, err := r.Cookie(CookieName); err == nil {
		c, ok := s.tokenOf(ck.Value)
		c.session = true
		return c, ok
	}
	return caller{}, false
}

// tokenOf says which of the server's tokens tok is.
func (s *Server) tokenOf(tok string) (caller, bool) {
	switch {
	case equalToken(tok, s.Token):
		return caller{token: home.TokenFile}, true
	case equalToken(tok, s.ReadToken):
		return caller{token: home.ReadTokenFile, readOnly: true}, true
	}
	return caller{}, false
}

func equalToken(tok, want string) bool {
	return want != "" && subtle.ConstantTimeCompare([]byte(tok), []byte(want)) == 1
}

// store opens the home's database read-only on first use; the controller
// is its only writer.
func (s *Server) store(ctx context.Context) (*store.Store, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.st != nil {
		return s.st, nil
	}
	st, err := store.OpenReadOnly(ctx, home.DBPath(s.Home))
	if err != nil {
		return nil, err
	}
	// A database the first start is still making (or a controller is
	// upgrading) is opened again on the next request, once it is whole.
	if err := st.Ready(ctx); err != nil {
		st.Close()
		return nil, err
	}
	s.st = st
	return st, nil
}

// Close closes the database.
func (s *Server) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.st == nil {
		return nil
	}
	err := s.st.Close()
	s.st = nil
	return err
}

// config is nodes.yaml as it is now; nil when it does not load (the views
// work from the database alone then, as status does).
func (s *Server) config() *nodes.Config {
	cfg, err := nodes.Load(s.Config)
	if err != nil {
		return nil
	}
	return cfg
}

func (s *Server) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// project is the request's project, checked: its name, that it was
// started, and, with ?run=N, that run. It writes the error and returns
// nil when any is wrong.
func (s *Server) project(w http.ResponseWriter, r *http.Request) (*store.Store, string) {
	name := r.PathValue("project")
	if err := spec.ValidName(name); err != nil {
		writeError(w, http.StatusBadRequest, err)
		return nil, ""
	}
	st, err := s.store(r.Context())
	if errors.Is(err, store.ErrNoDatabase) {
		writeError(w, http.StatusNotFound, fmt.Errorf("project %s has not been started (no project has yet)", name))
		return nil, ""
	}
	if err != nil {
		fail(w, err)
		return nil, ""
	}
	if _, err := st.Project(r.Context(), name); errors.Is(err, store.ErrNotFound) {
		writeError(w, http.StatusNotFound, fmt.Errorf("project %s has not been started: dispatch start %s", name, name))
		return nil, ""
	} else if err != nil {
		writeError(w, http.StatusInternalServerError, err)
		return nil, ""
	}
	q := r.URL.Query().Get("run")
	if q == "" {
		return st, name
	}
	n, err := strconv.Atoi(q)
	if err != nil || n < 1 {
		writeError(w, http.StatusBadRequest, fmt.Errorf("run=%q: a run is a number from 1 (dispatch runs %s lists them)", q, name))
		return nil, ""
	}
	at, _, err := st.AtRun(r.Context(), name, n)
	if err != nil {
		writeError(w, http.StatusNotFound, err)
		return nil, ""
	}
	return at, name
}

// writeJSON writes v as the CLI prints it (indented).
func writeJSON(w http.ResponseWriter, v any) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		writeError(w, http.StatusInternalServerError, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(append(b, '\n'))
}

// apiError is every error's body.
type apiError struct {
	Error string `json:"error"`
}

func writeError(w http.ResponseWriter, code int, err error) {
	b, _ := json.Marshal(apiError{Error: err.Error()})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	w.Write(append(b, '\n'))
}

// nothingYet reports whether err is a database not there yet, or one the
// first start is still making: the views show nothing started then. One
// behind this dispatch's schema (an older dispatch's, or an upgrade under
// way) is not nothing: its views answer 503 saying so.
func nothingYet(err error) bool {
	return errors.Is(err, store.ErrNoDatabase) || errors.Is(err, store.ErrNotReady) && !errors.Is(err, store.ErrSchemaBehind)
}

// fail writes err with the status it calls for.
func fail(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, store.ErrNotFound):
		writeError(w, http.StatusNotFound, err)
	case errors.Is(err, store.ErrNotReady):
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, err)
	case errors.Is(err, context.Canceled):
	default:
		writeError(w, http.StatusInternalServerError, err)
	}
}
