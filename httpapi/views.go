package httpapi

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"

	"github.com/dispatch-tool/dispatch/control"
	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/home"
	"github.com/dispatch-tool/dispatch/readmodel"
	"github.com/dispatch-tool/dispatch/service"
	"github.com/dispatch-tool/dispatch/store"
)

// projects is every started project at a glance.
func (s *Server) projects(w http.ResponseWriter, r *http.Request) {
	st, err := s.store(r.Context())
	if nothingYet(err) {
		writeJSON(w, readmodel.ProjectsView{Projects: []readmodel.ProjectSummary{}})
		return
	}
	if err != nil {
		fail(w, err)
		return
	}
	v, err := readmodel.Projects(r.Context(), st, s.views(), s.now())
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, v)
}

// views is nodes.yaml for the views: a nil *nodes.Config must be a nil
// readmodel.Nodes.
func (s *Server) views() readmodel.Nodes {
	if cfg := s.config(); cfg != nil {
		return cfg
	}
	return nil
}

// status is `dispatch status <p> --json`; ?offset=&limit= window its tasks
// (and add "page"), ?status= keeps the tasks in that status.
func (s *Server) status(w http.ResponseWriter, r *http.Request) {
	st, name := s.project(w, r)
	if st == nil {
		return
	}
	ctl := s.controllerView()
	v, err := readmodel.Status(r.Context(), st, s.views(), name, s.now())
	if err != nil {
		fail(w, err)
		return
	}
	v.Controller = ctl
	q := r.URL.Query()
	if q.Has("refresh") {
		if !s.refresh(w, r, v) {
			return
		}
	}
	if want := q.Get("status"); want != "" {
		kept := v.Tasks[:0:0]
		for _, t := range v.Tasks {
			if string(t.Status) == want {
				kept = append(kept, t)
			}
		}
		v.Tasks = kept
	}
	if !q.Has("offset") && !q.Has("limit") && !q.Has("status") {
		writeJSON(w, v)
		return
	}
	offset, err1 := intParam(q.Get("offset"), 0)
	limit, err2 := intParam(q.Get("limit"), -1)
	if err := errors.Join(err1, err2); err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	page, err := v.Window(r.Context(), st, s.views(), offset, limit, s.now())
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, page)
}

func intParam(s string, def int) (int, error) {
	if s == "" {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%q is not a count: use a whole number from 0", s)
	}
	return n, nil
}

// projectView answers a view of the request's project: view's value as
// JSON, or its error.
func (s *Server) projectView(view func(r *http.Request, st *store.Store, project string) (any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		st, name := s.project(w, r)
		if st == nil {
			return
		}
		v, err := view(r, st, name)
		var bad *badParam
		switch {
		case errors.As(err, &bad):
			writeError(w, http.StatusBadRequest, err)
		case err != nil:
			fail(w, err)
		default:
			writeJSON(w, v)
		}
	}
}

// badParam is a query parameter that does not read.
type badParam struct{ msg string }

func (e *badParam) Error() string { return e.msg }

func (s *Server) summary(r *http.Request, st *store.Store, name string) (any, error) {
	return readmodel.Summary(r.Context(), st, s.views(), name, s.now())
}

// report is `dispatch report <p> --format json`.
func (s *Server) report(r *http.Request, st *store.Store, name string) (any, error) {
	v, err := readmodel.BuildReport(r.Context(), st, s.views(), s.Home, name, s.now())
	if err != nil {
		return nil, err
	}
	v.Controller = s.controllerView()
	switch q := r.URL.Query().Get("tasks"); q {
	case "", "all":
	case "phase":
		// The dashboard's integration tab: the phase's own tasks only.
		v.Tasks = slices.DeleteFunc(v.Tasks, func(t readmodel.ReportTask) bool { return !domain.IsPhaseID(t.ID) })
	default:
		return nil, &badParam{fmt.Sprintf("tasks=%q: use all (the default) or phase (S99, V and F rounds)", q)}
	}
	return v, nil
}

// runs is `dispatch runs <p> --json`.
func (s *Server) runs(r *http.Request, st *store.Store, name string) (any, error) {
	v, err := readmodel.Runs(r.Context(), st, name)
	if err != nil {
		return nil, err
	}
	v.Controller = s.controllerView()
	return v, nil
}

func (s *Server) graph(r *http.Request, st *store.Store, name string) (any, error) {
	return readmodel.Graph(r.Context(), st, name)
}

func (s *Server) task(r *http.Request, st *store.Store, name string) (any, error) {
	return readmodel.Task(r.Context(), st, s.views(), s.Home, name, r.PathValue("id"), s.now())
}

// nodes is `dispatch nodes --json`.
func (s *Server) nodes(w http.ResponseWriter, r *http.Request) {
	cfg := s.config()
	if cfg == nil {
		writeError(w, http.StatusInternalServerError, fmt.Errorf("%s does not load: dispatch nodes says why", s.Config))
		return
	}
	st, err := s.store(r.Context())
	if nothingYet(err) {
		st, err = nil, nil
	}
	if err != nil {
		fail(w, err)
		return
	}
	v, err := readmodel.NodeList(r.Context(), st, cfg)
	if err != nil {
		fail(w, err)
		return
	}
	v.Controller = s.controllerView()
	writeJSON(w, v)
}

// schedules is `dispatch schedule --json`.
func (s *Server) schedules(w http.ResponseWriter, r *http.Request) {
	st, err := s.store(r.Context())
	if nothingYet(err) {
		st, err = nil, nil
	}
	if err != nil {
		fail(w, err)
		return
	}
	v, err := service.View(r.Context(), st, home.SpecsDir(s.Home), true /* this server runs in dispatch serve */, s.now())
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, v)
}

// controller is whether a controller runs for the home and when one last
// ticked: without one, every other answer is what it last saw (the
// dashboard's banner).
func (s *Server) controller(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, s.controllerView())
}

// refresh adds what the nodes say now to v (?refresh=1); false when it
// answered an error.
func (s *Server) refresh(w http.ResponseWriter, r *http.Request, v *readmodel.StatusView) bool {
	switch r.URL.Query().Get("refresh") {
	case "1", "true", "yes":
	case "0", "false", "no":
		return true
	default:
		writeError(w, http.StatusBadRequest, fmt.Errorf("refresh=%q: use refresh=1 to ask the nodes now", r.URL.Query().Get("refresh")))
		return false
	}
	if s.Refresh == nil {
		writeError(w, http.StatusNotImplemented, errors.New("this server cannot ask the nodes: dispatch status <project> --refresh does"))
		return false
	}
	cfg := s.config()
	if cfg == nil {
		writeError(w, http.StatusInternalServerError, fmt.Errorf("%s does not load, so the nodes cannot be asked: dispatch validate says why", s.Config))
		return false
	}
	if err := s.Refresh(r.Context(), cfg, []*readmodel.StatusView{v}); err != nil {
		fail(w, err)
		return false
	}
	return true
}

// controllerView is whether a controller runs for the home (one of this
// user answers on its control socket, its process not frozen) and when one
// last ticked.
func (s *Server) controllerView() *readmodel.ControllerView {
	f := control.Find(s.Home)
	if f.Frozen {
		return readmodel.ControllerFrozen(s.Home, f.PID)
	}
	return readmodel.ControllerOf(s.Home, f.Running)
}
