// Package notify tells the operator's systems that something happened to
// a project (issue 14): a run finished, an api_mode was paused by a rate
// limit, a budget stopped a run. A message goes as a JSON POST to a
// webhook, signed with HMAC-SHA256 when a secret is set, and/or on the
// stdin of a command run on the controller. Delivery is retried with
// backoff and never blocks its caller: Queue takes messages at once and
// delivers them from a goroutine of its own, reporting each outcome.
package notify

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"
)

// Events.
const (
	RunFinished   = "run_finished"
	ModePaused    = "mode_paused"
	BudgetStopped = "budget_stopped"
	// TaskFailed: a task failed for good (no retry left), sent while its
	// run goes on.
	TaskFailed = "task_failed"
	// RunFailed: a run finished and did not pass (besides run_finished).
	RunFailed        = "run_failed"
	ScheduleSkipped  = "schedule_skipped"
	ScheduleDisabled = "schedule_disabled"
	NodeOffline      = "node_offline"
	NodeBack         = "node_back"
	// GateFailed: a task gate or the project gate did not pass.
	GateFailed = "gate_failed"
	// Batch is the event of a message that carries several, in Events.
	Batch = "batch"
)

// Events are the events a `notify: {on: […]}` may name, in the order the
// docs list them.
var Events = []string{RunFinished, RunFailed, TaskFailed, GateFailed, ModePaused, BudgetStopped,
	ScheduleSkipped, ScheduleDisabled, NodeOffline, NodeBack}

// Message is what is sent, as JSON.
type Message struct {
	Event   string         `json:"event"`
	Project string         `json:"project"`
	Run     int            `json:"run"`
	Result  string         `json:"result,omitempty"`
	Counts  map[string]int `json:"counts,omitempty"`
	CostUSD float64        `json:"cost_usd"`
	Report  string         `json:"report,omitempty"`
	// Task, Attempt, Node, ErrorClass and Error say which task failed and
	// how (task_failed, gate_failed; Node alone for node_offline and
	// node_back); LogTail is the end of its log or of its gate's output,
	// and Blocked the tasks its failure blocks. All are data: they travel
	// in the JSON only, never on a command line.
	Task       string   `json:"task,omitempty"`
	Attempt    int      `json:"attempt,omitempty"`
	Node       string   `json:"node,omitempty"`
	ErrorClass string   `json:"error_class,omitempty"`
	Error      string   `json:"error,omitempty"`
	LogTail    string   `json:"log_tail,omitempty"`
	Blocked    []string `json:"blocked,omitempty"`
	// Message says what happened, for people ("api_mode zai paused until
	// 14:05 by a rate limit"); always sent, "" when there is nothing to add.
	Message string `json:"message"`
	At      string `json:"at"`
	// Events holds the messages of a batch (Event is then Batch): the
	// events of one tick for one target go out as one message.
	Events []Message `json:"events,omitempty"`
}

// MaxBatchEvents bounds the events one batch lists: a tick that fails
// ten thousand tasks sends a message a receiver takes, not tens of MB.
const MaxBatchEvents = 100

// Bundle is the one message that carries msgs: msgs[0] itself when it is
// alone (the message as it always was), else a Batch whose Events are msgs
// in order (the first MaxBatchEvents of them), whose Project and Run are
// theirs when they all share them, and whose Message counts them all by
// event.
func Bundle(msgs []Message) Message {
	if len(msgs) == 1 {
		return msgs[0]
	}
	b := Message{Event: Batch, Events: msgs}
	if len(msgs) == 0 {
		return b
	}
	b.Project, b.Run, b.At = msgs[0].Project, msgs[0].Run, msgs[len(msgs)-1].At
	count := map[string]int{}
	var order []string
	for _, m := range msgs {
		if m.Project != b.Project {
			b.Project, b.Run = "", 0
		} else if m.Run != b.Run {
			b.Run = 0
		}
		if count[m.Event] == 0 {
			order = append(order, m.Event)
		}
		count[m.Event]++
	}
	parts := make([]string, len(order))
	for i, e := range order {
		parts[i] = fmt.Sprintf("%d %s", count[e], e)
	}
	b.Message = fmt.Sprintf("%d events: %s", len(msgs), strings.Join(parts, ", "))
	if len(msgs) > MaxBatchEvents {
		b.Events = msgs[:MaxBatchEvents]
		b.Message += fmt.Sprintf(" (the first %d listed; dispatch events has every one)", MaxBatchEvents)
	}
	return b
}

// SignatureHeader carries "sha256=" and the hex HMAC-SHA256 of the body
// under the secret, when one is set.
const SignatureHeader = "X-Dispatch-Signature"

// Sign is the value of SignatureHeader for body under secret.
func Sign(secret string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// Target is where a project's messages go: a webhook (with its secret,
// already expanded: it lives in memory only), a command, or both.
type Target struct {
	Webhook string
	Secret  string
	Command []string
}

// Sender delivers one message to one target, trying again with backoff.
type Sender struct {
	Client *http.Client
	// Tries is how many times a delivery is tried; Backoff the wait
	// before the second try, doubled for each one after.
	Tries   int
	Backoff time.Duration
	// TryTimeout bounds one try (a POST, or a command's run).
	TryTimeout time.Duration
}

// DefaultSender tries 5 times over about a minute, 10 s per try.
func DefaultSender() *Sender {
	return &Sender{Client: &http.Client{}, Tries: 5, Backoff: 4 * time.Second, TryTimeout: 10 * time.Second}
}

// permanent is a failure another try cannot fix (the receiver refused the
// request itself).
type permanent struct{ error }

// Webhook POSTs body to url, signed with secret when it is not empty. A
// 2xx answer is a delivery; network errors, 408, 429 and 5xx are tried
// again; other answers are final. It returns the tries made.
func (s *Sender) Webhook(ctx context.Context, url, secret string, body []byte) (int, error) {
	return s.retry(ctx, func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			return permanent{redactErr(err, url)}
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("User-Agent", "dispatch")
		if secret != "" {
			req.Header.Set(SignatureHeader, Sign(secret, body))
		}
		resp, err := s.Client.Do(req)
		if err != nil {
			return redactErr(err, url)
		}
		defer resp.Body.Close()
		text, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		if resp.StatusCode/100 == 2 {
			return nil
		}
		err = fmt.Errorf("%s answered %s: %s", receiverOf(url), resp.Status, strings.TrimSpace(string(text)))
		if resp.StatusCode == 408 || resp.StatusCode == 429 || resp.StatusCode >= 500 {
			return err
		}
		return permanent{err}
	})
}

// Command runs argv with body on its stdin; a zero exit is a delivery.
func (s *Sender) Command(ctx context.Context, argv []string, body []byte) (int, error) {
	if len(argv) == 0 {
		return 0, errors.New("notify: empty command")
	}
	return s.retry(ctx, func(ctx context.Context) error {
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		cmd.Stdin = bytes.NewReader(body)
		// Only the start of what it says goes into the error: a command
		// that prints without end does not fill the controller's memory.
		out := &headWriter{max: 4 << 10}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Run(); err != nil {
			msg := strings.TrimSpace(out.String())
			if len(msg) > 400 {
				msg = msg[:400] + "…"
			}
			if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
				// It cannot start: another try would not either.
				return permanent{fmt.Errorf("%s: %w", argv[0], err)}
			}
			return fmt.Errorf("%s: %v: %s", argv[0], err, msg)
		}
		return nil
	})
}

// headWriter keeps the first max bytes written to it and drops the rest.
// Its buffer is a field, not embedded: an embedded bytes.Buffer's ReadFrom
// would let io.Copy read everything into it.
type headWriter struct {
	buf bytes.Buffer
	max int
}

func (h *headWriter) Write(p []byte) (int, error) {
	if room := h.max - h.buf.Len(); room > 0 {
		h.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (h *headWriter) String() string { return h.buf.String() }

func (s *Sender) retry(ctx context.Context, try func(context.Context) error) (int, error) {
	wait := s.Backoff
	var err error
	for n := 1; ; n++ {
		tctx, cancel := context.WithTimeout(ctx, s.TryTimeout)
		err = try(tctx)
		cancel()
		var p permanent
		if err == nil || errors.As(err, &p) || n >= s.Tries {
			if errors.As(err, &p) {
				err = p.error
			}
			return n, err
		}
		select {
		case <-ctx.Done():
			return n, fmt.Errorf("%w (then: %v)", err, ctx.Err())
		case <-time.After(wait):
		}
		wait *= 2
	}
}

// redactErr is err of a request to raw (an *url.Error naming the whole
// URL: a receiver down, a timeout) with only its receiver named.
func redactErr(err error, raw string) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		ue.URL = receiverOf(raw)
	}
	return err
}

// receiverOf is what an error of a delivery says of its URL: its scheme and
// host, "/…" for its path, which may be a token (a Slack or Discord
// webhook's is), as may its query and user info.
func receiverOf(url string) string {
	url = redact(url)
	if i := strings.Index(url, "://"); i >= 0 {
		if j := strings.IndexByte(url[i+3:], '/'); j >= 0 && len(url) > i+3+j+1 {
			url = url[:i+3+j] + "/…"
		}
	}
	return url
}

// redact drops a URL's query and user info, which may hold a token.
func redact(url string) string {
	if i := strings.IndexAny(url, "?#"); i >= 0 {
		url = url[:i]
	}
	if i := strings.Index(url, "://"); i >= 0 {
		if j := strings.Index(url[i+3:], "@"); j >= 0 && !strings.Contains(url[i+3:i+3+j], "/") {
			url = url[:i+3] + url[i+3+j+1:]
		}
	}
	return url
}

// Outcome is how one delivery went.
type Outcome struct {
	Message Message
	// Via is "webhook" or "command".
	Via   string
	Tries int
	Err   error
}

// Queue delivers messages in the background, in order, one at a time.
type Queue struct {
	sender *Sender
	report func(Outcome)

	mu      sync.Mutex
	pending []job
	wake    chan struct{}
	done    chan struct{}
	closed  bool
	ctx     context.Context
	cancel  context.CancelFunc
	dropped int
}

type job struct {
	msg    Message
	target Target
}

// maxPending is how many messages wait at most; past it the oldest goes
// (and Dropped counts it): a receiver that is down for hours does not
// grow the controller's memory.
const maxPending = 256

// NewQueue starts a queue; report, if not nil, is called from the queue's
// goroutine after each delivery.
func NewQueue(s *Sender, report func(Outcome)) *Queue {
	ctx, cancel := context.WithCancel(context.Background())
	q := &Queue{sender: s, report: report, wake: make(chan struct{}, 1), done: make(chan struct{}), ctx: ctx, cancel: cancel}
	go q.loop()
	return q
}

// Send queues m for t and returns at once.
func (q *Queue) Send(t Target, m Message) {
	if t.Webhook == "" && len(t.Command) == 0 {
		return
	}
	if m.Event == Batch && len(m.Events) == 0 {
		return
	}
	q.mu.Lock()
	if !q.closed {
		if len(q.pending) >= maxPending {
			q.pending = q.pending[1:]
			q.dropped++
		}
		q.pending = append(q.pending, job{m, t})
	}
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// Dropped is how many messages were dropped because too many waited.
func (q *Queue) Dropped() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.dropped
}

// Close takes no more messages and waits for the queued ones until ctx
// ends; what is left then is abandoned (its deliveries canceled).
func (q *Queue) Close(ctx context.Context) {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
	select {
	case <-q.done:
	case <-ctx.Done():
		q.cancel()
		<-q.done
	}
}

func (q *Queue) loop() {
	defer close(q.done)
	for {
		q.mu.Lock()
		if len(q.pending) == 0 {
			closed := q.closed
			q.mu.Unlock()
			if closed {
				return
			}
			select {
			case <-q.wake:
			case <-q.ctx.Done():
				return
			}
			continue
		}
		j := q.pending[0]
		q.pending = q.pending[1:]
		q.mu.Unlock()
		if q.ctx.Err() != nil {
			return
		}
		body, merr := json.Marshal(j.msg)
		if j.target.Webhook != "" {
			tries, err := 0, merr
			if err == nil {
				tries, err = q.sender.Webhook(q.ctx, j.target.Webhook, j.target.Secret, body)
			}
			q.emit(Outcome{Message: j.msg, Via: "webhook", Tries: tries, Err: err})
		}
		if len(j.target.Command) > 0 {
			tries, err := 0, merr
			if err == nil {
				tries, err = q.sender.Command(q.ctx, j.target.Command, body)
			}
			q.emit(Outcome{Message: j.msg, Via: "command", Tries: tries, Err: err})
		}
	}
}

func (q *Queue) emit(o Outcome) {
	if q.report != nil {
		q.report(o)
	}
}

// Config is a `notify:` block as written in project.yaml or nodes.yaml.
// Webhook and Secret may name environment variables of the controller
// (`${VAR}`), expanded only when a message is sent; Secret must: a secret
// is never written in a file. On, when not empty, lists the events sent
// (every one of Events when empty).
type Config struct {
	Webhook string   `json:"webhook,omitempty"`
	Secret  string   `json:"secret,omitempty"`
	Command []string `json:"command,omitempty"`
	On      []string `json:"on,omitempty"`
}

// Wants reports whether c sends event.
func (c Config) Wants(event string) bool {
	return len(c.On) == 0 || slices.Contains(c.On, event)
}

// Key names c's target: the configs with one key get one message a tick.
func (c Config) Key() string {
	b, _ := json.Marshal(Config{Webhook: c.Webhook, Secret: c.Secret, Command: c.Command})
	return string(b)
}

// Problem is a bad notify block: the key it is about, what is wrong, the fix.
type Problem struct{ Field, Msg, Fix string }

var varRef = regexp.MustCompile(`^\$\{[A-Za-z_][A-Za-z0-9_]*\}$`)

// Check lists what is wrong with c.
func (c Config) Check() []Problem {
	var out []Problem
	if c.Webhook == "" && len(c.Command) == 0 {
		out = append(out, Problem{"notify", "notify has neither webhook nor command",
			"write webhook: https://… and/or command: [notify-send, dispatch]"})
	}
	if w := c.Webhook; w != "" && !strings.Contains(w, "${") {
		u, err := url.Parse(w)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			out = append(out, Problem{"webhook", fmt.Sprintf("webhook %q is not an http or https URL", redact(w)),
				"write the URL the JSON is POSTed to, e.g. https://hooks.example.com/dispatch (or ${VAR} when it holds a token)"})
		}
	}
	if c.Secret != "" {
		if !varRef.MatchString(c.Secret) {
			out = append(out, Problem{"secret", "secret must name an environment variable, not hold the secret",
				"export it in the controller's environment and write secret: ${DISPATCH_WEBHOOK_SECRET}"})
		}
		if c.Webhook == "" {
			out = append(out, Problem{"secret", "secret is set without a webhook", "add webhook:, or remove secret:"})
		}
	}
	for _, e := range c.On {
		if !slices.Contains(Events, e) {
			out = append(out, Problem{"on", fmt.Sprintf("on: unknown event %q", e),
				"known events: " + strings.Join(Events, ", ")})
		}
	}
	for i, a := range c.Command {
		if i == 0 && strings.TrimSpace(a) == "" {
			out = append(out, Problem{"command", "command's program is empty", "command: [/usr/local/bin/my-notifier, --flag]"})
		}
	}
	return out
}

// Addressed is a message and the notify block it goes to. ID names the
// message: one addressed to a target twice (through two blocks that name
// it) goes once.
type Addressed struct {
	ID      int
	Config  Config
	Message Message
}

// Outgoing is one message for one target: the messages of a tick bound
// for it (Bundle makes them one), and the block that names it.
type Outgoing struct {
	Config   Config
	Messages []Message
}

// Group decides what goes where: the messages each block wants (see
// Config.Wants), one Outgoing per target (Config.Key) in the order the
// targets first appear, its messages in order, each once.
func Group(items []Addressed) []Outgoing {
	var out []Outgoing
	at := map[string]int{}
	type sent struct {
		key string
		id  int
	}
	done := map[sent]bool{}
	for _, it := range items {
		k := it.Config.Key()
		if !it.Config.Wants(it.Message.Event) || done[sent{k, it.ID}] {
			continue
		}
		done[sent{k, it.ID}] = true
		j, ok := at[k]
		if !ok {
			j = len(out)
			at[k] = j
			out = append(out, Outgoing{Config: it.Config})
		}
		out[j].Messages = append(out[j].Messages, it.Message)
	}
	return out
}
