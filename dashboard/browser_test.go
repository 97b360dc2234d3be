package dashboard

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/internal/browsertest"
)

// csp is the policy the HTTP server sets; the fake sets the same so that a
// violation shows up as a console error.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// fakeAPI answers /api/v1 like the real server, for one project "big" of n
// tasks, so the dashboard can be driven in a browser without a controller.
type fakeAPI struct {
	n int
	// deps gives task i's dependencies (none when nil).
	deps func(i int) []string
	// beatAt, when set, is the running tasks' last heartbeat as the
	// controller saw it; their tool writes all the time (output_at is
	// now) and they stall after a minute of quiet.
	beatAt time.Time
	// readOnly makes the session refuse actions.
	readOnly bool
	// preempted counts, by task, the attempts a more urgent task stopped.
	preempted map[string]int
	// mu guards status, full, events and posts.
	mu     sync.Mutex
	status map[string]string
	full   int // requests for the project without a window
	events chan string
	posts  []string // each action: path, CSRF header, content type, body
}

func newFakeAPI(n int) *fakeAPI {
	f := &fakeAPI{n: n, status: map[string]string{}, events: make(chan string, 16)}
	for i := 1; i <= n; i++ {
		f.status[f.id(i)] = "pending"
	}
	f.status[f.id(1)] = "running"
	f.status[f.id(2)] = "running"
	return f
}

func (f *fakeAPI) id(i int) string { return fmt.Sprintf("T%05d", i) }

func (f *fakeAPI) task(i int) map[string]any {
	id := f.id(i)
	title := "task " + id
	if i == 2 {
		title = `<img src=x onerror=alert(1)>`
	}
	t := map[string]any{"id": id, "title": title, "type": "implementation", "status": f.status[id], "node": "n1",
		"attempt": 1, "exit_code": 0, "error_class": "", "error": "", "started_at": time.Now().Add(-time.Minute).Format(time.RFC3339),
		"completed_at": "", "duration_seconds": 0, "sandbox": "bwrap"}
	if n := f.preempted[id]; n > 0 {
		t["preemptions"], t["attempt"], t["error_class"], t["error"] = n, n, "preempted", "preempted on n1 by hot/S01 (priority 1; this task's is 9)"
	}
	if !f.beatAt.IsZero() && f.status[id] == "running" {
		t["heartbeat_at"], t["output_at"], t["stall_seconds"] = f.beatAt.Format(time.RFC3339Nano), time.Now().Format(time.RFC3339Nano), 60
	}
	return t
}

func (f *fakeAPI) set(id, status string, evID int) {
	f.mu.Lock()
	f.status[id] = status
	f.mu.Unlock()
	b, _ := json.Marshal(map[string]any{"id": evID, "time": time.Now().Format(time.RFC3339Nano), "project": "big", "task": id,
		"attempt": 1, "kind": "status", "from": "running", "to": status, "node": "n1", "message": ""})
	f.events <- fmt.Sprintf("id: %d\ndata: %s\n\n", evID, b)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func (f *fakeAPI) summary() map[string]any {
	counts := map[string]int{}
	for _, s := range f.status {
		counts[s]++
	}
	return map[string]any{"project": "big", "run": 2, "state": "active", "result": "", "phase": "implementation",
		"counts": counts, "tasks": f.n, "cost_usd": 1.25, "tokens_in": 120000, "tokens_out": 3400,
		"started_at": time.Now().Add(-5 * time.Minute).Format(time.RFC3339), "finished_at": "", "next_schedule": "",
		"problem": "", "notes": []string{"a note"},
		"paused": []map[string]any{{"api_mode": "claude-api", "until": time.Now().Add(90 * time.Second).Format(time.RFC3339), "reason": "429", "fallback": ""}},
		"budget": map[string]any{"limit_usd": 10, "spent_usd": 1.25, "stopped": false}}
}

func (f *fakeAPI) project(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if q.Get("offset") == "" && q.Get("limit") == "" {
		f.full++
	}
	off, _ := strconv.Atoi(q.Get("offset"))
	limit, _ := strconv.Atoi(q.Get("limit"))
	if limit <= 0 {
		limit = f.n
	}
	var tasks []map[string]any
	total := 0
	for i := 1; i <= f.n; i++ {
		if st := q.Get("status"); st != "" && f.status[f.id(i)] != st {
			continue
		}
		if total >= off && len(tasks) < limit {
			tasks = append(tasks, f.task(i))
		}
		total++
	}
	writeJSON(w, map[string]any{"project": "big", "counts": f.summary()["counts"], "phase": "implementation", "tasks": tasks,
		"nodes": []any{}, "page": map[string]int{"offset": off, "limit": limit, "total": total}})
}

func (f *fakeAPI) taskDetail(w http.ResponseWriter, id string) {
	i, _ := strconv.Atoi(strings.TrimPrefix(id, "T"))
	t := f.task(i)
	t["attempts"] = []map[string]any{{"attempt": 1, "node": "n1", "status": f.status[id], "exit_code": 0, "api_mode": "claude-api",
		"tokens_in": 1000, "tokens_out": 200, "cost_usd": 0.01, "started_at": t["started_at"], "completed_at": ""}}
	t["outputs"] = []any{}
	t["depends_on"] = []string{}
	t["dependents"] = []string{f.id(i + 1)}
	t["events"] = []map[string]any{{"id": 1, "time": t["started_at"], "project": "big", "task": id, "attempt": 1, "kind": "status", "from": "claimed", "to": "running", "node": "n1", "message": "<b>bold</b>"}}
	t["diffstat"] = " a.go | 2 +-\n 1 file changed"
	if f.beatAt.IsZero() {
		t["heartbeat_at"] = time.Now().Format(time.RFC3339)
		t["stall_seconds"] = 600
	}
	writeJSON(w, t)
}

func (f *fakeAPI) log(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Get("follow") != "1" {
		fmt.Fprint(w, "old line\n")
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	for i := 1; i <= 3; i++ {
		b, _ := json.Marshal(map[string]string{"text": fmt.Sprintf("line %d <script>alert(2)</script>\n", i)})
		fmt.Fprintf(w, "data: %s\n\n", b)
		w.(http.Flusher).Flush()
		time.Sleep(100 * time.Millisecond)
	}
	fmt.Fprint(w, "event: end\ndata: {}\n\n")
}

func (f *fakeAPI) eventStream(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/event-stream")
	fmt.Fprint(w, ": hello\n\n")
	w.(http.Flusher).Flush()
	for {
		select {
		case <-r.Context().Done():
			return
		case ev := <-f.events:
			fmt.Fprint(w, ev)
			w.(http.Flusher).Flush()
		}
	}
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := strings.TrimPrefix(r.URL.Path, "/api/v1/")
	if p == "events" {
		f.eventStream(w, r)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.Method == http.MethodPost {
		b, _ := io.ReadAll(r.Body)
		f.posts = append(f.posts, strings.Join([]string{p, r.Header.Get("X-Dispatch-CSRF"), r.Header.Get("Content-Type"), string(b)}, " "))
		writeJSON(w, map[string]string{"message": "done: " + p})
		return
	}
	switch {
	case p == "session" && f.readOnly:
		writeJSON(w, map[string]any{"actions": false, "refused": "this server was started with dispatch serve --http --read-only"})
	case p == "session":
		writeJSON(w, map[string]any{"actions": true, "csrf": "fake-csrf"})
	case p == "projects":
		writeJSON(w, map[string]any{"projects": []any{f.summary()}})
	case p == "projects/big/summary":
		writeJSON(w, f.summary())
	case p == "projects/big":
		f.project(w, r)
	case p == "projects/big/graph":
		var ts []map[string]any
		for i := 1; i <= f.n; i++ {
			deps := []string{}
			if f.deps != nil {
				deps = f.deps(i)
			}
			ts = append(ts, map[string]any{"id": f.id(i), "status": f.status[f.id(i)], "depends_on": deps})
		}
		writeJSON(w, map[string]any{"tasks": ts})
	case strings.HasPrefix(p, "projects/big/tasks/") && strings.HasSuffix(p, "/log"):
		f.log(w, r)
	case strings.HasPrefix(p, "projects/big/tasks/"):
		f.taskDetail(w, strings.TrimPrefix(p, "projects/big/tasks/"))
	case p == "projects/big/report":
		writeJSON(w, map[string]any{"project": "big", "phase": "implementation", "result": "running", "tasks": []any{},
			"conflicts":    []map[string]any{{"path": "a/<b>.go", "tasks": []string{"T00001", "T00002"}}},
			"verification": map[string]any{"rounds": 0, "pass": nil, "issues": []string{}}, "nodes": []any{}})
	case p == "projects/big/runs":
		writeJSON(w, map[string]any{"project": "big", "runs": []map[string]any{{"run": 1, "result": "failed", "trigger": "start", "tasks_ran": 3, "tasks_reused": 0, "cost_usd": 0.5}, {"run": 2, "result": "", "trigger": "schedule", "tasks_ran": 1, "tasks_reused": 9999}}})
	case p == "controller":
		writeJSON(w, map[string]any{"running": true, "last_seen": time.Now().Format(time.RFC3339)})
	case p == "nodes":
		writeJSON(w, map[string]any{"nodes": []map[string]any{{"name": "n1", "address": "n1", "state": "online", "slots": 4, "running": 1, "last_seen": time.Now().Format(time.RFC3339), "last_error": ""}}})
	case p == "schedules":
		writeJSON(w, map[string]any{"serving": true, "schedules": []map[string]any{{"project": "big", "kind": "cron", "schedule": "0 3 * * *", "enabled": true, "next_at": time.Now().Add(time.Hour).Format(time.RFC3339)}}})
	default:
		http.NotFound(w, r)
	}
}

// serveFake serves the dashboard and api with the server's CSP.
func serveFake(t *testing.T, api *fakeAPI) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle("/api/v1/", api)
	mux.Handle("/", Handler())
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", csp)
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(func() { srv.CloseClientConnections(); srv.Close() })
	return srv
}

// TestDashboardLargeRun drives the dashboard in chromium against a fake API
// holding a run of 10,000 tasks: the page shows one window of rows, pages on,
// draws no graph that large, takes a change from the event stream without a
// reload, shows hostile strings as text, follows a log, and breaks no rule
// of the CSP.
func TestDashboardLargeRun(t *testing.T) {
	b := browsertest.Start(t)
	api := newFakeAPI(10000)
	srv := serveFake(t, api)

	b.Navigate(t, srv.URL+"/#/p/big")
	b.WaitFor(t, 10*time.Second, "the first window of tasks", `document.querySelectorAll('#tasks tbody tr').length === 200`)
	if got := browsertest.Eval[string](t, b, `document.querySelector('.toolbar .muted').textContent`); got != "1–200 of 10000" {
		t.Errorf("pager says %q", got)
	}
	title := browsertest.Eval[string](t, b, `document.querySelector('tr[data-id="T00002"] td.title .text').textContent`)
	if title != `<img src=x onerror=alert(1)>` || browsertest.Eval[int](t, b, `document.querySelectorAll('img').length`) != 0 {
		t.Errorf("the hostile title is not plain text: %q", title)
	}
	b.WaitFor(t, 5*time.Second, "the pause countdown", `/paused: claude-api rate limit, resets in 1m/.test(document.body.innerText)`)

	browsertest.Eval[bool](t, b, `window.__sameDocument = true`)
	b.WaitFor(t, 5*time.Second, "the event stream", `document.getElementById('live').textContent === 'live'`)
	start := time.Now()
	api.set("T00003", "failed", 7)
	b.WaitFor(t, 2*time.Second, "T00003 to turn failed", `document.querySelector('tr[data-id="T00003"] td.status').textContent === 'failed'`)
	if d := time.Since(start); d > time.Second {
		t.Errorf("the change took %s to reach the screen", d)
	}
	b.WaitFor(t, time.Second, "the last event column", `document.querySelector('tr[data-id="T00003"]').textContent.includes('status → failed')`)

	browsertest.Eval[bool](t, b, `(document.querySelectorAll('.toolbar button')[1].click(), true)`)
	b.WaitFor(t, 5*time.Second, "the second page", `document.querySelector('.toolbar .muted').textContent === '201–400 of 10000' && document.querySelector('tr[data-id="T00201"]')`)
	browsertest.Eval[bool](t, b, `(document.querySelector('.toolbar select').value = 'failed', document.querySelector('.toolbar select').dispatchEvent(new Event('change')), true)`)
	b.WaitFor(t, 5*time.Second, "the failed filter", `document.querySelectorAll('#tasks tbody tr').length === 1 && document.querySelector('tr[data-id="T00003"]')`)

	location := func(hash string) { browsertest.Eval[bool](t, b, `(location.hash = '`+hash+`', true)`) }
	location("#/")
	b.WaitFor(t, 5*time.Second, "the projects", `document.querySelector('tr[data-project="big"]') && document.querySelector('tr[data-project="big"]').textContent.includes('0/10000')`)
	location("#/p/big/graph")
	b.WaitFor(t, 5*time.Second, "the graph's refusal", `/10000 tasks: too many to draw/.test(document.body.innerText)`)
	location("#/p/big/integration")
	b.WaitFor(t, 5*time.Second, "the phase strip and the conflict", `document.querySelectorAll('#phase .step').length === 5 && document.body.innerText.includes('a/<b>.go')`)
	location("#/p/big/runs")
	b.WaitFor(t, 5*time.Second, "the runs", `document.body.innerText.includes('9999')`)
	location("#/nodes")
	b.WaitFor(t, 5*time.Second, "the nodes", `document.querySelector('tr[data-node="n1"]') && document.body.innerText.includes('1 / 4')`)
	location("#/schedules")
	b.WaitFor(t, 5*time.Second, "the schedules", `document.body.innerText.includes('0 3 * * *')`)
	location("#/p/big/t/T00002")
	b.WaitFor(t, 5*time.Second, "the task page's log", `document.getElementById('log').textContent.includes('line 3 <script>alert(2)</script>')`)
	b.WaitFor(t, 5*time.Second, "the end of the attempt's log", `document.getElementById('log-state').textContent === 'attempt 1 ended'`)
	b.WaitFor(t, 5*time.Second, "the task page", `document.getElementById('task-title').textContent === '<img src=x onerror=alert(1)>' && document.getElementById('diffstat')`)
	if n := browsertest.Eval[int](t, b, `document.querySelectorAll('img, script:not([src]), b').length`); n != 0 {
		t.Errorf("%d elements made from task-controlled strings", n)
	}

	if !browsertest.Eval[bool](t, b, `window.__sameDocument === true`) {
		t.Error("the page reloaded")
	}
	api.mu.Lock()
	full := api.full
	api.mu.Unlock()
	if full != 0 {
		t.Errorf("the page asked for all 10000 tasks %d times", full)
	}
	b.NoProblems(t)
}

// TestDashboardGraph: a small run's graph is drawn in layers by depth, one
// box per task and one edge per dependency, each box a link to its task.
func TestDashboardGraph(t *testing.T) {
	b := browsertest.Start(t)
	api := newFakeAPI(7)
	api.deps = func(i int) []string { // a binary tree: 1 ← 2, 3; 2 ← 4, 5; 3 ← 6, 7
		if i == 1 {
			return []string{}
		}
		return []string{api.id(i / 2)}
	}
	srv := serveFake(t, api)
	b.Navigate(t, srv.URL+"/#/p/big/graph")
	b.WaitFor(t, 10*time.Second, "the graph", `document.querySelectorAll('svg.graph g[data-id]').length === 7`)
	if n := browsertest.Eval[int](t, b, `document.querySelectorAll('svg.graph path.edge').length`); n != 6 {
		t.Errorf("%d edges, want 6", n)
	}
	x := func(id string) float64 {
		return browsertest.Eval[float64](t, b, `Number(document.querySelector('svg.graph g[data-id="`+id+`"] rect').getAttribute('x'))`)
	}
	if !(x("T00001") < x("T00002") && x("T00002") == x("T00003") && x("T00003") < x("T00007")) {
		t.Errorf("the layers are not by depth: x = %v %v %v %v", x("T00001"), x("T00002"), x("T00003"), x("T00007"))
	}
	if got := browsertest.Eval[string](t, b, `document.querySelector('svg.graph g[data-id="T00002"]').parentNode.getAttribute('href')`); got != "#/p/big/t/T00002" {
		t.Errorf("T00002's box links to %q", got)
	}
	b.WaitFor(t, 5*time.Second, "the event stream", `document.getElementById('live').textContent === 'live'`)
	api.set("T00004", "completed", 1)
	b.WaitFor(t, 2*time.Second, "T00004's box to turn completed", `document.querySelector('svg.graph g.n-completed[data-id="T00004"]')`)
	b.NoProblems(t)
}

// TestDashboardStallCountdownFollowsOutput: a running task whose tool
// prints all the time, its last heartbeat 50 s old, stalls after a minute
// of quiet: the stall countdown, in the task list and on the task's page,
// counts from its last output (as the wrapper's stall watch does), a
// minute away, not ten seconds from the heartbeat.
func TestDashboardStallCountdownFollowsOutput(t *testing.T) {
	b := browsertest.Start(t)
	api := newFakeAPI(3)
	api.beatAt = time.Now().Add(-50 * time.Second)
	srv := serveFake(t, api)
	const ahead = `(span) => span && Number(span.dataset.t) - Date.now() > 50000`
	b.Navigate(t, srv.URL+"/#/p/big")
	b.WaitFor(t, 10*time.Second, "the list's stall countdown a minute from the last output",
		`(`+ahead+`)(document.querySelector('tr[data-id="T00001"] span.timer[data-prefix="stall "]'))`)
	b.Navigate(t, srv.URL+"/#/p/big/t/T00001")
	b.WaitFor(t, 10*time.Second, "the task page's stall countdown a minute from the last output",
		`(`+ahead+`)([...document.querySelectorAll('.card')].find(c => c.querySelector('.k').textContent === 'Stall timeout').querySelector('span.timer'))`)
	b.NoProblems(t)
}

// TestDashboardActionButtons: the run page offers Retry failed, Stop and
// Stop and kill; a destructive one asks in the page first (keeping it
// sends nothing), then POSTs JSON with the session's CSRF token; the task
// page offers Retry or Cancel by the task's state, the schedules page a
// switch; a read-only session gets no button, only why.
func TestDashboardActionButtons(t *testing.T) {
	b := browsertest.Start(t)
	api := newFakeAPI(3)
	api.status["T00003"] = "failed"
	srv := serveFake(t, api)
	posts := func() []string {
		api.mu.Lock()
		defer api.mu.Unlock()
		return append([]string(nil), api.posts...)
	}
	click := func(sel string) { browsertest.Eval[bool](t, b, `(document.querySelector('`+sel+`').click(), true)`) }

	b.Navigate(t, srv.URL+"/#/p/big")
	b.WaitFor(t, 10*time.Second, "the run's buttons", `['retry-failed', 'stop', 'stop-kill'].every(a => document.querySelector('#project-actions button[data-action="' + a + '"]'))`)
	if got := browsertest.Eval[string](t, b, `document.querySelector('#project-actions button[data-action="retry-failed"]').textContent`); got != "Retry failed (1)" {
		t.Errorf("the retry button says %q", got)
	}
	click(`#project-actions button[data-action="stop-kill"]`)
	b.WaitFor(t, 5*time.Second, "the confirmation", `document.querySelector('dialog#confirm[open]') && document.querySelector('dialog#confirm p').textContent.includes('kill its 2 running task(s)')`)
	click(`#confirm-no`)
	b.WaitFor(t, 5*time.Second, "the confirmation to close", `!document.querySelector('dialog#confirm')`)
	if p := posts(); len(p) != 0 {
		t.Fatalf("keeping it sent %v", p)
	}
	click(`#project-actions button[data-action="stop-kill"]`)
	b.WaitFor(t, 5*time.Second, "the confirmation", `document.querySelector('dialog#confirm[open]')`)
	click(`#confirm-yes`)
	b.WaitFor(t, 5*time.Second, "the answer", `document.querySelector('#project-actions .action-result').textContent === 'done: projects/big/stop'`)
	click(`#project-actions button[data-action="retry-failed"]`) // not destructive: no question
	b.WaitFor(t, 5*time.Second, "the retry's answer", `document.querySelector('#project-actions .action-result').textContent === 'done: projects/big/retry'`)
	want := []string{`projects/big/stop fake-csrf application/json {"kill":true}`, `projects/big/retry fake-csrf application/json {"failed":true}`}
	if got := posts(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("the actions sent\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	b.Navigate(t, srv.URL+"/#/p/big/t/T00001")
	b.WaitFor(t, 10*time.Second, "a running task's Cancel", `document.querySelector('#task-actions button[data-action="cancel"]') && !document.querySelector('#task-actions button[data-action="retry"]')`)
	b.Navigate(t, srv.URL+"/#/p/big/t/T00003")
	b.WaitFor(t, 10*time.Second, "a failed task's Retry", `document.querySelector('#task-actions button[data-action="retry"]') && !document.querySelector('#task-actions button[data-action="cancel"]')`)
	// Retry with everything after it (retry --downstream) asks first.
	b.WaitFor(t, 10*time.Second, "a failed task's downstream Retry", `document.querySelector('#task-actions button[data-action="retry-downstream"]')`)
	click(`#task-actions button[data-action="retry-downstream"]`)
	b.WaitFor(t, 5*time.Second, "the confirmation", `document.querySelector('dialog#confirm[open]') && document.querySelector('dialog#confirm p').textContent.includes('every task after it')`)
	click(`#confirm-yes`)
	b.WaitFor(t, 5*time.Second, "the downstream retry's answer", `document.querySelector('#task-actions .action-result').textContent === 'done: projects/big/retry'`)
	if got := posts(); len(got) == 0 || got[len(got)-1] != `projects/big/retry fake-csrf application/json {"ids":["T00003"],"downstream":true}` {
		t.Errorf("the downstream retry sent %q", got)
	}
	b.Navigate(t, srv.URL+"/#/schedules")
	b.WaitFor(t, 10*time.Second, "the schedule's switch", `document.querySelector('tr[data-project="big"] button[data-action="disable"]')`)

	api.mu.Lock()
	api.readOnly = true
	api.mu.Unlock()
	b.Navigate(t, srv.URL+"/?again=1#/p/big") // a new page asks for its session again
	b.WaitFor(t, 10*time.Second, "why there is no button", `document.querySelector('#project-actions').textContent.includes('--read-only') && !document.querySelector('#project-actions button')`)
	b.NoProblems(t)
}
