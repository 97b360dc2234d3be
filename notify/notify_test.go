package notify

import (
	"context"
	"crypto/hmac"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/dispatch-tool/dispatch/internal/yamlval"
)

func quickSender() *Sender {
	return &Sender{Client: &http.Client{}, Tries: 3, Backoff: 10 * time.Millisecond, TryTimeout: 2 * time.Second}
}

// receiver is a real HTTP server that checks each request's signature
// and answers with the statuses given, one per request, then 200.
type receiver struct {
	srv     *httptest.Server
	secret  string
	mu      sync.Mutex
	answers []int
	bodies  [][]byte
	badSig  atomic.Int32
	hang    chan struct{} // when not nil, requests wait on it
}

func newReceiver(t *testing.T, secret string, answers ...int) *receiver {
	r := &receiver{secret: secret, answers: answers}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		if r.hang != nil {
			select {
			case <-r.hang:
			case <-req.Context().Done():
				return
			}
		}
		got := req.Header.Get(SignatureHeader)
		if r.secret != "" && !hmac.Equal([]byte(got), []byte(Sign(r.secret, body))) || r.secret == "" && got != "" {
			r.badSig.Add(1)
		}
		r.mu.Lock()
		r.bodies = append(r.bodies, body)
		code := 200
		if len(r.answers) > 0 {
			code, r.answers = r.answers[0], r.answers[1:]
		}
		r.mu.Unlock()
		w.WriteHeader(code)
		io.WriteString(w, http.StatusText(code))
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) requests() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.bodies)
}

func TestWebhookSignedAndRetried(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	body := []byte(`{"event":"run_finished","project":"p"}`)
	tests := []struct {
		name     string
		secret   string
		answers  []int
		tries    int
		requests int
		errText  string
	}{
		{"delivered, signed", "s3cret", nil, 1, 1, ""},
		{"no secret, no signature", "", nil, 1, 1, ""},
		{"500 then 200", "s3cret", []int{500, 503}, 3, 3, ""},
		{"429 is tried again", "k", []int{429}, 2, 2, ""},
		{"down for good", "k", []int{500, 500, 500, 500}, 3, 3, "500 Internal Server Error"},
		{"400 is final", "k", []int{400}, 1, 1, "400 Bad Request"},
	}
	for _, tc := range tests {
		r := newReceiver(t, tc.secret, tc.answers...)
		tries, err := quickSender().Webhook(ctx, r.srv.URL+"/hook?token=abc", tc.secret, body)
		if tries != tc.tries || r.requests() != tc.requests || (tc.errText == "") != (err == nil) ||
			err != nil && !strings.Contains(err.Error(), tc.errText) {
			t.Errorf("%s: %d tries, %d requests, %v; want %d, %d, %q", tc.name, tries, r.requests(), err, tc.tries, tc.requests, tc.errText)
		}
		if err != nil && strings.Contains(err.Error(), "token=abc") {
			t.Errorf("%s: the error shows the URL's query: %v", tc.name, err)
		}
		if n := r.badSig.Load(); n > 0 {
			t.Errorf("%s: %d requests with a wrong signature", tc.name, n)
		}
	}
}

func TestWebhookThatHangsIsTriedAgain(t *testing.T) {
	t.Parallel()
	r := newReceiver(t, "")
	r.hang = make(chan struct{}) // never released
	s := quickSender()
	s.TryTimeout = 50 * time.Millisecond
	tries, err := s.Webhook(context.Background(), r.srv.URL, "", []byte(`{}`))
	if tries != 3 || err == nil {
		t.Errorf("%d tries, %v; want 3 tries and an error", tries, err)
	}
}

func TestCommandGetsTheMessage(t *testing.T) {
	t.Parallel()
	out := filepath.Join(t.TempDir(), "got.json")
	tries, err := quickSender().Command(context.Background(), []string{"/bin/sh", "-c", "cat > " + out}, []byte(`{"event":"x"}`))
	if err != nil || tries != 1 {
		t.Fatalf("%d tries, %v", tries, err)
	}
	if b, _ := os.ReadFile(out); string(b) != `{"event":"x"}` {
		t.Errorf("the command got %q", b)
	}
	tries, err = quickSender().Command(context.Background(), []string{"/bin/sh", "-c", "echo nope >&2; exit 3"}, nil)
	if tries != 3 || err == nil || !strings.Contains(err.Error(), "nope") {
		t.Errorf("failing command: %d tries, %v", tries, err)
	}
	// A command that prints 64 MiB before it fails: its error keeps the
	// start of it, and the sender keeps no more than that.
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err = quickSender().Command(context.Background(), []string{"/bin/sh", "-c", "echo start; head -c 67108864 /dev/zero; exit 1"}, nil)
	runtime.ReadMemStats(&after)
	if err == nil || !strings.Contains(err.Error(), "start") || len(err.Error()) > 600 {
		t.Errorf("a loud failing command: %d bytes of error", len(err.Error()))
	}
	if grown := after.TotalAlloc - before.TotalAlloc; grown > 16<<20 {
		t.Errorf("a command's 64 MiB of output cost %d MiB of allocation", grown>>20)
	}
	tries, err = quickSender().Command(context.Background(), []string{"/no/such/notifier"}, nil)
	if tries != 1 || err == nil {
		t.Errorf("missing command: %d tries, %v; want one try", tries, err)
	}
}

// TestQueueNeverBlocks: Send returns at once whatever the receiver does;
// messages are delivered in order; Close waits for them, bounded.
func TestQueueNeverBlocks(t *testing.T) {
	t.Parallel()
	r := newReceiver(t, "k")
	release := make(chan struct{})
	r.hang = release
	var mu sync.Mutex
	var outcomes []Outcome
	q := NewQueue(quickSender(), func(o Outcome) {
		mu.Lock()
		outcomes = append(outcomes, o)
		mu.Unlock()
	})
	target := Target{Webhook: r.srv.URL, Secret: "k", Command: []string{"/bin/true"}}
	start := time.Now()
	for i := range 5 {
		q.Send(target, Message{Event: RunFinished, Project: "p", Run: i + 1})
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("5 sends took %s with the receiver hanging", d)
	}
	close(release)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	q.Close(ctx)
	mu.Lock()
	defer mu.Unlock()
	if len(outcomes) != 10 {
		t.Fatalf("%d outcomes, want 5 webhooks and 5 commands", len(outcomes))
	}
	for i, o := range outcomes {
		if o.Err != nil || o.Message.Run != i/2+1 || o.Via != [...]string{"webhook", "command"}[i%2] {
			t.Errorf("outcome %d: %+v", i, o)
		}
	}
	r.mu.Lock()
	first := r.bodies[0]
	r.mu.Unlock()
	var m Message
	if err := json.Unmarshal(first, &m); err != nil || m.Event != RunFinished || m.Project != "p" || m.Run != 1 {
		t.Errorf("first body %s: %v", first, err)
	}
	if n := r.badSig.Load(); n > 0 {
		t.Errorf("%d wrong signatures", n)
	}
}

// TestQueueCloseIsBounded: a receiver that never answers does not hold
// Close past its deadline; what is left is abandoned.
func TestQueueCloseIsBounded(t *testing.T) {
	t.Parallel()
	r := newReceiver(t, "")
	r.hang = make(chan struct{})
	s := quickSender()
	s.TryTimeout = time.Minute
	q := NewQueue(s, nil)
	q.Send(Target{Webhook: r.srv.URL}, Message{Event: ModePaused})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	q.Close(ctx)
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Close took %s", d)
	}
	q.Send(Target{Webhook: r.srv.URL}, Message{}) // after Close: ignored, no panic
}

func TestQueueDropsTheOldestPastItsBound(t *testing.T) {
	t.Parallel()
	r := newReceiver(t, "")
	release := make(chan struct{})
	r.hang = release
	q := NewQueue(quickSender(), nil)
	for range maxPending + 10 {
		q.Send(Target{Webhook: r.srv.URL}, Message{})
	}
	// One is being delivered; the rest wait, past the bound by 9.
	if d := q.Dropped(); d < 9 || d > 10 {
		t.Errorf("dropped %d, want 9 or 10", d)
	}
	close(release)
	q.Close(context.Background())
}

func TestRedact(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"https://hooks.example.com/x?token=abc": "https://hooks.example.com/x",
		"https://user:pw@example.com/hook":      "https://example.com/hook",
		"http://example.com/a@b":                "http://example.com/a@b",
	} {
		if got := redact(in); got != want {
			t.Errorf("redact(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestConfigCheck(t *testing.T) {
	t.Parallel()
	tests := []struct {
		c     Config
		field string // "" for none
	}{
		{Config{Webhook: "https://h.example.com/x"}, ""},
		{Config{Webhook: "${HOOK}", Secret: "${SECRET}"}, ""},
		{Config{Command: []string{"notify-send", "dispatch"}}, ""},
		{Config{}, "notify"},
		{Config{Webhook: "hooks.example.com/x"}, "webhook"},
		{Config{Webhook: "file:///etc/passwd"}, "webhook"},
		{Config{Webhook: "https://h.example.com", Secret: "hunter2"}, "secret"},
		{Config{Webhook: "https://h.example.com", Secret: "${A}${B}"}, "secret"},
		{Config{Command: []string{"x"}, Secret: "${S}"}, "secret"},
		{Config{Command: []string{" "}}, "command"},
	}
	for _, tc := range tests {
		ps := tc.c.Check()
		switch {
		case tc.field == "" && len(ps) > 0:
			t.Errorf("%+v: %+v, want no problem", tc.c, ps)
		case tc.field != "" && (len(ps) == 0 || ps[0].Field != tc.field || ps[0].Fix == ""):
			t.Errorf("%+v: %+v, want a problem with %s and a fix", tc.c, ps, tc.field)
		}
	}
}

// TestFromYAMLMergeKey: notify: reads its keys as every mapping of the
// files does: a "<<" merge key works (it used to be refused as an unknown
// key inside notify: while it worked at the top of nodes.yaml), and a
// duplicate key is reported as everywhere else.
func TestFromYAMLMergeKey(t *testing.T) {
	read := func(src string) (*Config, []string) {
		t.Helper()
		var doc yaml.Node
		if err := yaml.Unmarshal([]byte(src), &doc); err != nil {
			t.Fatal(err)
		}
		var ps yamlval.Problems
		c := FromYAML(yamlval.Doc{Problems: &ps, File: "project.yaml"}, doc.Content[0].Content[1])
		var out []string
		for _, p := range ps {
			out = append(out, p.Msg)
		}
		return c, out
	}
	c, probs := read("notify: {<<: {webhook: 'https://example.com/h'}, command: [notify-send]}\n")
	if len(probs) != 0 || c == nil || c.Webhook != "https://example.com/h" || len(c.Command) != 1 {
		t.Errorf("merge key: %+v, %q", c, probs)
	}
	_, probs = read("notify:\n  webhook: https://a.example/h\n  webhook: https://b.example/h\n")
	if len(probs) != 1 || probs[0] != `notify: duplicate key "webhook" (first on line 2)` {
		t.Errorf("duplicate key: %q", probs)
	}
}

// TestWebhookDownKeepsItsTokenOut: a receiver that cannot be reached (the
// connection refused, or no answer in time) fails with an error that goes
// to the events and the log: it must not hold the URL's query or user
// info, where a ${VAR} webhook keeps its token, as a 4xx/5xx's does not.
func TestWebhookDownKeepsItsTokenOut(t *testing.T) {
	t.Parallel()
	down := httptest.NewServer(http.NotFoundHandler())
	url := down.URL
	down.Close()
	r := newReceiver(t, "")
	r.hang = make(chan struct{})
	s := quickSender()
	s.TryTimeout = 50 * time.Millisecond
	for _, u := range []string{url, r.srv.URL} {
		u = strings.Replace(u, "http://", "http://user:pa55word@", 1) + "/hook?token=abc"
		_, err := s.Webhook(context.Background(), u, "", []byte(`{}`))
		if err == nil {
			t.Fatalf("%s: no error", u)
		}
		if strings.Contains(err.Error(), "token=abc") || strings.Contains(err.Error(), "pa55word") || strings.Contains(err.Error(), "user:") {
			t.Errorf("the error shows the URL's secret parts: %v", err)
		}
	}
	// A URL that does not parse (from ${VAR}: not checked beforehand).
	if _, err := s.Webhook(context.Background(), "http://h/x\n?token=abc", "", []byte(`{}`)); err == nil || strings.Contains(err.Error(), "token=abc") {
		t.Errorf("a URL that does not parse: %v", err)
	}
}

// TestWebhookPathTokenKeptOut: a Slack- or Discord-style webhook carries
// its token in the URL's path (webhook: ${SLACK_HOOK}, as SCHEDULES.md
// shows): an answer that is not 2xx, or a receiver down, fails with an
// error (the notify_failed event, dispatch.log) that names the receiver's
// host, not the path.
func TestWebhookPathTokenKeptOut(t *testing.T) {
	t.Parallel()
	const token = "/services/T000/B000/s3cr3tpath"
	r := newReceiver(t, "", 404)
	down := httptest.NewServer(http.NotFoundHandler())
	downURL := down.URL
	down.Close()
	for _, u := range []string{r.srv.URL + token, downURL + token} {
		_, err := quickSender().Webhook(context.Background(), u, "", []byte(`{}`))
		if err == nil {
			t.Fatalf("%s: no error", u)
		}
		if strings.Contains(err.Error(), "s3cr3tpath") {
			t.Errorf("the error shows the URL's path: %v", err)
		}
		if !strings.Contains(err.Error(), "127.0.0.1") {
			t.Errorf("the error does not name the receiver: %v", err)
		}
	}
}
