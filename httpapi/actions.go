package httpapi

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"slices"
	"strings"

	"github.com/dispatch-tool/dispatch/control"
	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/home"
	"github.com/dispatch-tool/dispatch/spec"
	"github.com/dispatch-tool/dispatch/store"
)

// SessionCookie names a browser's session: the CSRF token of its actions
// is derived from it (csrfFor).
const SessionCookie = "dispatch_session"

// CSRFHeader carries a browser session's CSRF token on every action.
const CSRFHeader = "X-Dispatch-CSRF"

// maxActionBody is the most an action's JSON body may hold.
const maxActionBody = 64 << 10

// The actions: the operator commands the API takes, each a POST.
var actionPaths = map[string]string{
	"/api/v1/projects/{project}/retry":    "retry",
	"/api/v1/projects/{project}/cancel":   "cancel",
	"/api/v1/projects/{project}/stop":     "stop",
	"/api/v1/projects/{project}/start":    "start",
	"/api/v1/schedules/{project}/enable":  "enable",
	"/api/v1/schedules/{project}/disable": "disable",
}

// caller is who a request authenticated as.
type caller struct {
	session  bool   // by the cookie: a browser, which CSRF must be kept from
	readOnly bool   // with the read-only token
	token    string // the token's file name
}

type callerKey struct{}

func callerOf(r *http.Request) caller {
	c, _ := r.Context().Value(callerKey{}).(caller)
	return c
}

// via is where an action came from, for its event.
func (c caller) via() string {
	if c.session {
		return "the dashboard, token " + c.token
	}
	return "the API, token " + c.token
}

// guardIn is what decides whether an action may go on: the request's
// method and headers, who sent it and what this server allows.
type guardIn struct {
	op, method   string
	caller       caller
	readOnly     string // why this server takes no action; "" when it does
	canAct       bool
	origin, host string
	tls          bool
	fetchSite    string // Sec-Fetch-Site
	csrf, want   string // the header's token and the session's
}

// guard decides whether an action may be carried out: 0 and nil when it
// may, else the status and the error to answer. Nothing is changed
// before it says yes.
func guard(in guardIn) (int, error) {
	switch {
	case in.method != http.MethodPost:
		return http.StatusMethodNotAllowed, fmt.Errorf("%s changes a project: send it as POST (docs/API.md, Actions); nothing was changed", in.op)
	case in.caller.readOnly:
		return http.StatusForbidden, fmt.Errorf("%s is refused: the token in %s only reads; the one in %s acts (or dispatch %s at the terminal)",
			in.op, in.caller.token, home.TokenFile, in.op)
	case in.readOnly != "" || !in.canAct:
		why := in.readOnly
		if why == "" {
			why = "this server only reads"
		}
		return http.StatusForbidden, fmt.Errorf("%s is refused: %s; nothing was changed", in.op, why)
	case !in.caller.session:
		// A bearer token is no ambient credential: another site's page
		// cannot send one.
		return 0, nil
	}
	scheme := "http://"
	if in.tls {
		scheme = "https://"
	}
	switch {
	case in.fetchSite != "" && in.fetchSite != "same-origin":
		return http.StatusForbidden, fmt.Errorf("%s is refused: the request came from another site (Sec-Fetch-Site: %s); nothing was changed", in.op, in.fetchSite)
	case in.origin == "":
		return http.StatusForbidden, fmt.Errorf("%s is refused: a browser's action must carry its Origin; nothing was changed", in.op)
	case !strings.EqualFold(in.origin, scheme+in.host):
		return http.StatusForbidden, fmt.Errorf("%s is refused: it came from %s, not from this dashboard (%s%s); nothing was changed", in.op, in.origin, scheme, in.host)
	case in.csrf == "":
		return http.StatusForbidden, fmt.Errorf("%s is refused: the %s header is missing (the dashboard sends the one GET /api/v1/session gives); nothing was changed", in.op, CSRFHeader)
	case in.want == "" || !hmac.Equal([]byte(in.csrf), []byte(in.want)):
		return http.StatusForbidden, fmt.Errorf("%s is refused: the %s header is not this session's (reload the page); nothing was changed", in.op, CSRFHeader)
	}
	return 0, nil
}

// csrfFor is a session's CSRF token: a MAC of the session's cookie under
// the API's token, so that only a page that could read
// /api/v1/session (this origin's) knows it.
func (s *Server) csrfFor(r *http.Request) string {
	c, err := r.Cookie(SessionCookie)
	if err != nil || len(c.Value) != 32 {
		return ""
	}
	m := hmac.New(sha256.New, []byte(s.Token))
	m.Write([]byte("csrf\x00" + c.Value))
	return hex.EncodeToString(m.Sum(nil))
}

// setSession gives the browser a new session cookie; it returns the
// request as it would come back with it.
func (s *Server) setSession(w http.ResponseWriter, r *http.Request) *http.Request {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	c := &http.Cookie{Name: SessionCookie, Value: hex.EncodeToString(b), Path: "/", HttpOnly: true, Secure: s.Secure,
		SameSite: http.SameSiteStrictMode}
	http.SetCookie(w, c)
	r2 := r.Clone(r.Context())
	r2.Header.Del("Cookie")
	for _, old := range r.Cookies() {
		if old.Name != SessionCookie {
			r2.AddCookie(old)
		}
	}
	r2.AddCookie(c)
	return r2
}

// sessionView is GET /api/v1/session: whether this caller may act, and
// the CSRF token a browser's actions carry.
type sessionView struct {
	Actions bool   `json:"actions"`
	Refused string `json:"refused,omitempty"`
	CSRF    string `json:"csrf,omitempty"`
}

func (s *Server) session(w http.ResponseWriter, r *http.Request) {
	c := callerOf(r)
	v := sessionView{Actions: true}
	if code, err := guard(guardIn{op: "an action", method: http.MethodPost, caller: caller{readOnly: c.readOnly, token: c.token},
		readOnly: s.ReadOnly, canAct: s.Act != nil}); code != 0 {
		v = sessionView{Refused: err.Error()}
	}
	if c.session && v.Actions {
		if s.csrfFor(r) == "" {
			r = s.setSession(w, r)
		}
		v.CSRF = s.csrfFor(r)
	}
	writeJSON(w, v)
}

// actionIn is an action's body; each action takes the fields it names in
// docs/API.md and refuses the others.
type actionIn struct {
	IDs    []string `json:"ids,omitempty"`
	Failed bool     `json:"failed,omitempty"`
	Kill   bool     `json:"kill,omitempty"`
	// Downstream (retry) reruns every task after the named ones too.
	Downstream bool `json:"downstream,omitempty"`
}

// action answers one of the actions: checked by guard, then handed to
// Act as the CLI hands its command to the controller.
func (s *Server) action(op string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		c := callerOf(r)
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", "POST")
		}
		code, err := guard(guardIn{op: op, method: r.Method, caller: c, readOnly: s.ReadOnly, canAct: s.Act != nil,
			origin: r.Header.Get("Origin"), host: r.Host, tls: r.TLS != nil, fetchSite: r.Header.Get("Sec-Fetch-Site"),
			csrf: r.Header.Get(CSRFHeader), want: s.csrfFor(r)})
		if code != 0 {
			writeError(w, code, err)
			return
		}
		req, code, err := s.actionRequest(r, op)
		if code != 0 {
			writeError(w, code, err)
			return
		}
		req.Via = c.via()
		rep, err := s.Act(r.Context(), req)
		switch {
		case errors.Is(err, control.ErrNoController), errors.Is(err, home.ErrLocked):
			writeError(w, http.StatusServiceUnavailable, fmt.Errorf("%s not done: %w; try again in a moment", op, err))
		case err != nil:
			writeError(w, http.StatusInternalServerError, err)
		case rep.Error != "" && rep.NotFound:
			writeError(w, http.StatusNotFound, errors.New(rep.Error))
		case rep.Error != "" && rep.Usage:
			writeError(w, http.StatusConflict, errors.New(rep.Error))
		case rep.Error != "":
			writeError(w, http.StatusInternalServerError, errors.New(rep.Error))
		default:
			writeJSON(w, struct {
				Message string `json:"message"`
			}{rep.Message})
		}
	}
}

// actionRequest reads an action's project and body into the request for
// the controller; a status and an error when they are wrong.
func (s *Server) actionRequest(r *http.Request, op string) (control.Request, int, error) {
	name := r.PathValue("project")
	req := control.Request{Op: op, Project: name}
	if err := spec.ValidName(name); err != nil {
		return req, http.StatusBadRequest, err
	}
	in, code, err := readActionBody(r, op)
	if code != 0 {
		return req, code, err
	}
	req.Tasks, req.Kill, req.Downstream = in.IDs, in.Kill, in.Downstream
	if !in.Failed {
		return req, 0, nil
	}
	req.Tasks, err = s.failedTasks(r.Context(), name)
	switch {
	case errors.Is(err, store.ErrNoDatabase), errors.Is(err, store.ErrNotFound):
		return req, http.StatusNotFound, fmt.Errorf("project %q has not been started on this home", name)
	case err != nil:
		return req, http.StatusInternalServerError, err
	case len(req.Tasks) == 0:
		return req, http.StatusConflict, fmt.Errorf("%s has no failed task to retry (dispatch status %s)", name, name)
	}
	return req, 0, nil
}

// readActionBody reads and checks the body: JSON (or none), with the
// fields op takes.
func readActionBody(r *http.Request, op string) (actionIn, int, error) {
	var in actionIn
	body, err := io.ReadAll(io.LimitReader(r.Body, maxActionBody+1))
	if err != nil {
		return in, http.StatusBadRequest, fmt.Errorf("read the body: %w", err)
	}
	if len(body) > maxActionBody {
		return in, http.StatusRequestEntityTooLarge, fmt.Errorf("the body is over %d bytes", maxActionBody)
	}
	if strings.TrimSpace(string(body)) != "" {
		if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" {
			return in, http.StatusUnsupportedMediaType, fmt.Errorf("the body must be JSON (Content-Type: application/json), not %q", r.Header.Get("Content-Type"))
		}
		dec := json.NewDecoder(strings.NewReader(string(body)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&in); err != nil {
			return in, http.StatusBadRequest, fmt.Errorf("%s's body: %v (docs/API.md, Actions)", op, err)
		}
	}
	if err := checkActionIn(op, in); err != nil {
		return in, http.StatusBadRequest, err
	}
	return in, 0, nil
}

// checkActionIn says what is wrong with an action's fields, in the CLI's
// words.
func checkActionIn(op string, in actionIn) error {
	bad := func(format string, a ...any) error { return &badParam{fmt.Sprintf(op+": "+format, a...)} }
	switch {
	case op == "retry" && in.Failed && len(in.IDs) > 0:
		return bad("give ids or failed: true, not both")
	case op == "retry" && !in.Failed && len(in.IDs) == 0, op == "cancel" && len(in.IDs) == 0:
		return bad(`name the tasks: {"ids": ["S01"]}`)
	case op != "retry" && in.Failed:
		return bad("failed applies to retry only")
	case op != "retry" && op != "cancel" && len(in.IDs) > 0:
		return bad("takes no ids")
	case op != "stop" && in.Kill:
		return bad("kill applies to stop only")
	case op != "retry" && in.Downstream:
		return bad("downstream applies to retry only")
	}
	for _, id := range in.IDs {
		if !spec.TaskIDPattern.MatchString(id) {
			return bad("%q is not a task ID (a capital letter and digits, like S01; S01.2 or S01@mac1 for a task of a matrix or broadcast)", id)
		}
	}
	return nil
}

// failedTasks are the IDs of a project's failed tasks.
func (s *Server) failedTasks(ctx context.Context, name string) ([]string, error) {
	st, err := s.store(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := st.Project(ctx, name); err != nil {
		return nil, err
	}
	states, _, err := st.States(ctx, name)
	if err != nil {
		return nil, err
	}
	var ids []string
	for id, status := range states {
		if status == domain.Failed {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids, nil
}
