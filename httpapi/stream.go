package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/readmodel"
	"github.com/dispatch-tool/dispatch/spec"
	"github.com/dispatch-tool/dispatch/store"
	"github.com/dispatch-tool/dispatch/tasklog"
)

// eventBatch bounds the events one read of the stream takes.
const eventBatch = 500

// keepAlive is how often an idle stream sends a comment, so that proxies
// and browsers keep it open.
const keepAlive = 15 * time.Second

// sse is an event stream being written.
type sse struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

func startSSE(w http.ResponseWriter) *sse {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	s := &sse{w: w, rc: http.NewResponseController(w)}
	s.flush()
	return s
}

// send writes one message: id (none when 0), event name ("" for the
// default), data as JSON.
func (s *sse) send(id int64, event string, data any) error {
	b, err := json.Marshal(data)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	if id > 0 {
		fmt.Fprintf(&buf, "id: %d\n", id)
	}
	if event != "" {
		fmt.Fprintf(&buf, "event: %s\n", event)
	}
	// JSON holds no raw newline: one data line.
	fmt.Fprintf(&buf, "data: %s\n\n", b)
	if _, err := s.w.Write(buf.Bytes()); err != nil {
		return err
	}
	return s.flush()
}

func (s *sse) comment(text string) error {
	if _, err := io.WriteString(s.w, ": "+text+"\n\n"); err != nil {
		return err
	}
	return s.flush()
}

func (s *sse) flush() error { return s.rc.Flush() }

func (s *Server) poll(def time.Duration) time.Duration {
	if s.Poll > 0 {
		return s.Poll
	}
	return def
}

// events streams every event as it is recorded (of one project with
// ?project=), each with its id: a client that reconnects with
// Last-Event-ID (or ?after=N) gets every event after that one. Without
// either it starts at the newest. Each listener reads the database on its
// own; nobody listening costs nothing.
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	project := r.URL.Query().Get("project")
	if project != "" {
		if err := spec.ValidName(project); err != nil {
			writeError(w, http.StatusBadRequest, err)
			return
		}
	}
	after, err := s.eventStart(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	var st *store.Store
	for st == nil {
		st, err = s.store(ctx)
		if nothingYet(err) {
			st, err = nil, nil // nothing started yet, or the first start still makes the database: wait
		}
		if err != nil {
			fail(w, err)
			return
		}
		if st == nil && !sleep(r, s.poll(250*time.Millisecond)) {
			return
		}
	}
	if after < 0 {
		if after, err = st.LastEventID(ctx); err != nil {
			fail(w, err)
			return
		}
	}
	out := startSSE(w)
	idle := time.Now()
	for {
		evs, err := st.Events(ctx, project, after, eventBatch)
		if err != nil {
			return
		}
		for _, ev := range evs {
			if err := out.send(ev.ID, "", readmodel.Event(ev)); err != nil {
				return
			}
			after = ev.ID
		}
		if len(evs) == eventBatch {
			continue
		}
		if len(evs) > 0 {
			idle = time.Now()
		} else if time.Since(idle) >= keepAlive {
			if out.comment("idle") != nil {
				return
			}
			idle = time.Now()
		}
		if !sleep(r, s.poll(250*time.Millisecond)) {
			return
		}
	}
}

// eventStart is the id after which a stream starts: Last-Event-ID, else
// ?after=, else -1 (the newest).
func (s *Server) eventStart(r *http.Request) (int64, error) {
	v := r.Header.Get("Last-Event-ID")
	what := "Last-Event-ID"
	if v == "" {
		v, what = r.URL.Query().Get("after"), "after"
	}
	if v == "" {
		return -1, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%s %q is not an event id (a whole number from 0)", what, v)
	}
	return n, nil
}

func sleep(r *http.Request, d time.Duration) bool {
	select {
	case <-r.Context().Done():
		return false
	case <-time.After(d):
		return true
	}
}

// maxTail bounds the lines ?tail= asks for and the bytes a log answer
// holds.
const (
	maxTail      = 100000
	maxTailBytes = 4 << 20
)

// logChunk is one message of a followed log.
type logChunk struct {
	Text string `json:"text"`
}

// log is a task's log: its last ?tail= lines (default 200) as text, or,
// with ?follow=1, a stream of what it writes until the attempt ends.
func (s *Server) log(w http.ResponseWriter, r *http.Request) {
	st, name := s.project(w, r)
	if st == nil {
		return
	}
	ctx := r.Context()
	q := r.URL.Query()
	tail, err1 := intParam(q.Get("tail"), 200)
	attempt, err2 := intParam(q.Get("attempt"), 0)
	follow, err3 := boolParam(q.Get("follow"))
	if err := errors.Join(err1, err2, err3); err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	tail = min(tail, maxTail)
	t, err := st.Task(ctx, name, r.PathValue("id"))
	if err != nil {
		fail(w, err)
		return
	}
	a, err := tasklog.Attempt(ctx, st, t, attempt)
	if errors.Is(err, tasklog.ErrNoAttempt) {
		writeError(w, http.StatusNotFound, err)
		return
	}
	if err != nil {
		fail(w, err)
		return
	}
	head, remote, err := s.logHead(r, t, a, tail)
	if err != nil {
		writeError(w, http.StatusBadGateway, err)
		return
	}
	if remote != nil {
		defer remote.r.Close()
	}
	if !follow {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Write(head)
		return
	}
	out := startSSE(w)
	cw := &chunkWriter{out: out}
	if _, err := cw.Write(head); err != nil {
		return
	}
	if remote != nil {
		_, err = remote.r.Follow(ctx, st, t, a.Attempt, remote.pos, cw)
	}
	if cw.flush() != nil {
		return
	}
	if err != nil && ctx.Err() == nil {
		out.send(0, "problem", map[string]string{"error": err.Error()})
	}
	out.send(0, "end", map[string]string{})
}

// boolParam reads a yes/no query parameter: 1/true/yes or ""/0/false/no.
func boolParam(v string) (bool, error) {
	switch strings.ToLower(v) {
	case "1", "true", "yes":
		return true, nil
	case "", "0", "false", "no":
		return false, nil
	}
	return false, fmt.Errorf("%q is not yes or no: use 1 or 0", v)
}

// remoteLog is a log being read on its node, and how far.
type remoteLog struct {
	r   *tasklog.Remote
	pos int64
}

// logHead is the end of the attempt's log: the last tail lines of the
// collected copy, or of what its node has (then remote is open there).
func (s *Server) logHead(r *http.Request, t domain.Task, a domain.Attempt, tail int) ([]byte, *remoteLog, error) {
	if f, ok := tasklog.Collected(s.Home, t, a); ok {
		defer f.Close()
		b, err := lastLines(f, tail)
		return b, nil, err
	}
	cfg := s.config()
	if cfg == nil {
		return nil, nil, fmt.Errorf("%s does not load: dispatch nodes says why", s.Config)
	}
	rem, err := tasklog.OpenRemote(r.Context(), cfg, t, a)
	if err != nil {
		return nil, nil, err
	}
	b, err := rem.From(r.Context(), 0)
	if err != nil {
		rem.Close()
		return nil, nil, err
	}
	return cutLines(b, tail), &remoteLog{r: rem, pos: int64(len(b))}, nil
}

// chunkWriter sends what is written to it as log messages. A message is
// JSON text: a character cut between two writes (two reads of the node)
// waits for its end in part, rather than going as two U+FFFD.
type chunkWriter struct {
	out  *sse
	part []byte
}

func (c *chunkWriter) Write(p []byte) (int, error) {
	b := append(c.part, p...)
	keep := 0
	for i := len(b) - 1; i >= max(len(b)-utf8.UTFMax+1, 0); i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				keep = len(b) - i
			}
			break
		}
	}
	c.part = append([]byte(nil), b[len(b)-keep:]...)
	if len(b) == keep {
		return len(p), nil
	}
	if err := c.out.send(0, "", logChunk{Text: string(b[:len(b)-keep])}); err != nil {
		return 0, err
	}
	return len(p), nil
}

// flush sends what is left of a cut character.
func (c *chunkWriter) flush() error {
	if len(c.part) == 0 {
		return nil
	}
	err := c.out.send(0, "", logChunk{Text: string(c.part)})
	c.part = nil
	return err
}

// lastLines reads the last n lines of f, at most maxTailBytes of them.
func lastLines(f *os.File, n int) ([]byte, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	off := max(fi.Size()-maxTailBytes, 0)
	b, err := io.ReadAll(io.NewSectionReader(f, off, fi.Size()-off))
	if err != nil {
		return nil, err
	}
	return cutLines(b, n), nil
}

// cutLines keeps the last n lines of b (a last line without its newline
// counts), at most maxTailBytes.
func cutLines(b []byte, n int) []byte {
	if n <= 0 {
		return nil
	}
	if len(b) > maxTailBytes {
		b = b[len(b)-maxTailBytes:]
	}
	end := len(b)
	if end > 0 && b[end-1] == '\n' {
		end--
	}
	for i := end - 1; i >= 0; i-- {
		if b[i] == '\n' {
			n--
			if n == 0 {
				return b[i+1:]
			}
		}
	}
	return b
}
