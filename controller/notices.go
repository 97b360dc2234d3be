package controller

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/home"
	"github.com/dispatch-tool/dispatch/internal/termtext"
	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/notify"
	"github.com/dispatch-tool/dispatch/store"
	"github.com/dispatch-tool/dispatch/tasklog"
)

// Notifications (issue 14, project.yaml and nodes.yaml `notify:`): the
// controller decides that something happened — a project finished, an
// api_mode was paused by a rate limit, a budget stopped a project — and,
// once that is recorded, hands a message to a queue that delivers it in
// the background (notify.Queue): a receiver that is slow or down never
// holds a tick. Each delivery's outcome is an event ("notify" or
// "notify_failed"), which `status` shows while the last one failed.

// noticeDrain bounds how long a controller that is ending waits for the
// messages still queued (a project's own "finished" among them).
const noticeDrain = 15 * time.Second

// notice is a message decided in a tick, sent once the tick's changes are
// recorded. The fields after message say which task and how, for the
// events about one (task_failed, gate_failed); node names the node of a
// node event, which has no project.
type notice struct {
	project, event, message string
	result                  string
	task                    string
	attempt                 int
	node, class, err        string
	blocked                 []string
	// tail is the end of a gate's output; logTail asks for the end of the
	// attempt's log, read when the notice is sent (it is collected by
	// then, in the same tick).
	tail    string
	logTail bool
}

// notices holds the messages decided and not yet handed to the queue.
type notices struct {
	once  sync.Once
	queue *notify.Queue
	// mu guards pending.
	mu      sync.Mutex
	pending []notice
}

// sendNotice queues event for project's notify target, sent with the
// other notices of the tick (flushNotices).
func (c *Controller) sendNotice(ctx context.Context, project, event, result, message string) {
	c.addNotice(notice{project: project, event: event, result: result, message: message})
}

func (c *Controller) addNotice(n notice) {
	c.notices.mu.Lock()
	c.notices.pending = append(c.notices.pending, n)
	c.notices.mu.Unlock()
}

// Alert is a notification decided outside a tick: by the daemon's
// schedule checks (a run skipped, a schedule disabled).
type Alert struct {
	Project, Event, Message string
}

// Notify sends alerts at once, with what else waits: one message per
// target.
func (c *Controller) Notify(ctx context.Context, alerts ...Alert) {
	for _, a := range alerts {
		c.addNotice(notice{project: a.Project, event: a.Event, message: a.Message})
	}
	c.flushNotices(ctx)
}

// flushNotices sends the notices that wait: each to the blocks that want
// it, one message per target (notify.Group, notify.Bundle).
func (c *Controller) flushNotices(ctx context.Context) {
	if ctx.Err() != nil {
		return // a controller that is ending: drainNotices sends them
	}
	c.notices.mu.Lock()
	pending := c.notices.pending
	c.notices.pending = nil
	c.notices.mu.Unlock()
	if len(pending) == 0 {
		return
	}
	facts := map[string]*projectNoticeFacts{}
	var items []notify.Addressed
	for i, n := range pending {
		f := facts[n.project]
		if f == nil {
			f = c.noticeFacts(ctx, n.project)
			facts[n.project] = f
		}
		msg := c.noticeMessage(f, n)
		for _, cfg := range f.targets {
			items = append(items, notify.Addressed{ID: i, Config: cfg, Message: msg})
		}
	}
	c.notices.once.Do(func() {
		c.notices.queue = notify.NewQueue(notify.DefaultSender(), c.noticeOutcome)
	})
	for _, out := range notify.Group(items) {
		msg := notify.Bundle(out.Messages)
		if target, ok := c.noticeTarget(out.Config, msg); ok {
			c.notices.queue.Send(target, msg)
		}
	}
}

// projectNoticeFacts is what the messages of one project say of it, read
// once for the notices of a flush.
type projectNoticeFacts struct {
	run     int
	counts  map[string]int
	costUSD float64
	targets []notify.Config
}

// noticeFacts reads project's run, counts and cost and the blocks its
// messages go to: its own notify:, else nodes.yaml's. A node event (no
// project) goes to nodes.yaml's and to those of the active projects.
func (c *Controller) noticeFacts(ctx context.Context, project string) *projectNoticeFacts {
	f := &projectNoticeFacts{}
	home := c.config().Notify
	if project == "" {
		if home != nil {
			f.targets = append(f.targets, *home)
		}
		active, _, err := c.servedProjects(ctx)
		if err != nil {
			c.log.Error("node notification: read the projects", "err", err)
		}
		for _, p := range active {
			if opts, err := p.ParseOptions(); err == nil && opts.Notify != nil {
				f.targets = append(f.targets, *opts.Notify)
			}
		}
		return f
	}
	p, err := c.st.Project(ctx, project)
	if err != nil {
		c.log.Error("notification not sent: read its project", keyProject, project, "err", err)
		return f
	}
	opts, err := p.ParseOptions()
	if err != nil {
		c.log.Error("notification not sent: read its project's options", keyProject, project, "err", err)
		return f
	}
	cfg := opts.Notify
	if cfg == nil {
		cfg = home
	}
	if cfg == nil {
		return f
	}
	f.targets, f.run = []notify.Config{*cfg}, p.Run
	if tasks, err := c.st.Tasks(ctx, project); err == nil {
		f.counts = map[string]int{}
		for _, t := range tasks {
			f.counts[string(t.Status)]++
		}
	}
	if usd, _, err := c.st.Spent(ctx, project); err == nil {
		f.costUSD = usd
	}
	return f
}

// noticeMessage is n as sent. What a task controls (its error, its log,
// its gate's output) is cleaned of terminal controls and bounded; it is
// data in the JSON, never part of a command line.
func (c *Controller) noticeMessage(f *projectNoticeFacts, n notice) notify.Message {
	msg := notify.Message{Event: n.event, Project: n.project, Run: f.run, Result: n.result, Message: noticeText(n.message, maxNoticeError),
		Counts: f.counts, CostUSD: f.costUSD, At: c.now().UTC().Format(time.RFC3339),
		Task: n.task, Attempt: n.attempt, Node: n.node, ErrorClass: noticeText(n.class, maxNoticeError), Error: noticeText(n.err, maxNoticeError),
		Blocked: n.blocked, LogTail: noticeText(n.tail, maxNoticeTail)}
	if n.event == notify.RunFinished || n.event == notify.RunFailed {
		msg.Report = filepath.Join(home.RunsDir(c.opts.Home, n.project), "report.md")
	}
	if n.logTail {
		msg.LogTail = noticeText(c.logTail(n.project, n.task, n.attempt), maxNoticeTail)
	}
	return msg
}

// Bounds of what a task controls in a message.
const (
	maxNoticeError  = 1 << 10
	maxNoticeTail   = 2 << 10
	noticeTailLines = 20
)

// noticeText is s cleaned for a terminal, its end kept within max bytes.
func noticeText(s string, max int) string {
	if len(s) > max {
		s = s[len(s)-max:]
		for len(s) > 0 && !utf8.RuneStart(s[0]) {
			s = s[1:]
		}
	}
	return termtext.Clean(s)
}

// logTail is the end of an attempt's collected log: its last
// noticeTailLines lines; "" when it is not collected.
func (c *Controller) logTail(project, task string, attempt int) string {
	f, err := os.Open(tasklog.LocalPath(c.opts.Home, domain.Task{Project: project, ID: task}, attempt))
	if err != nil {
		return ""
	}
	defer f.Close()
	const window = 8 << 10
	info, err := f.Stat()
	if err != nil || !info.Mode().IsRegular() {
		return ""
	}
	off := max(info.Size()-window, 0)
	b, err := io.ReadAll(io.NewSectionReader(f, off, window))
	if err != nil {
		return ""
	}
	text := strings.TrimRight(string(b), "\n")
	lines := strings.Split(text, "\n")
	if off > 0 && len(lines) > 1 {
		lines = lines[1:] // the first is cut
	}
	if len(lines) > noticeTailLines {
		lines = lines[len(lines)-noticeTailLines:]
	}
	return strings.Join(lines, "\n")
}

// noticeTarget is where cfg sends: the webhook's URL and secret come from
// the controller's environment now, and live in memory only. A variable
// that is not set is an outcome (not sent by webhook), not a stop.
func (c *Controller) noticeTarget(cfg notify.Config, msg notify.Message) (notify.Target, bool) {
	target := notify.Target{Command: cfg.Command}
	if cfg.Webhook != "" {
		u, uerr := nodes.ExpandEnv(cfg.Webhook, c.opts.LookupEnv)
		s, serr := nodes.ExpandEnv(cfg.Secret, c.opts.LookupEnv)
		if uerr != nil || serr != nil {
			c.noticeOutcome(notify.Outcome{Message: msg, Via: "webhook",
				Err: fmt.Errorf("not sent: %v (export it in the controller's environment)", firstErr(uerr, serr))})
		} else {
			target.Webhook, target.Secret = u, s
		}
	}
	return target, target.Webhook != "" || len(target.Command) > 0
}

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

// noticeOutcome records how a delivery went: an event for each project
// the message speaks of ("" for a node's).
func (c *Controller) noticeOutcome(o notify.Outcome) {
	msgs := []notify.Message{o.Message}
	if o.Message.Event == notify.Batch {
		msgs = o.Message.Events
	}
	var projects []string
	events := map[string][]string{}
	for _, m := range msgs {
		if _, ok := events[m.Project]; !ok {
			projects = append(projects, m.Project)
		}
		events[m.Project] = append(events[m.Project], m.Event)
	}
	if o.Err != nil {
		c.log.Warn("notification failed", "via", o.Via, "err", o.Err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var evs []store.Event
	for _, p := range projects {
		what := strings.Join(events[p], ", ")
		ev := store.Event{Project: p, Kind: "notify", Message: fmt.Sprintf("%s sent by %s (%d tries)", what, o.Via, o.Tries)}
		if o.Err != nil {
			ev.Kind, ev.Message = "notify_failed", fmt.Sprintf("%s by %s failed after %d tries: %v", what, o.Via, o.Tries, o.Err)
		}
		evs = append(evs, ev)
	}
	err := c.st.Update(ctx, func(tx *store.Tx) error {
		for _, ev := range evs {
			if err := tx.Event(ctx, ev); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		// status cannot show it: the log is where it is said.
		for _, ev := range evs {
			c.log.Error("record the outcome of a notification", keyProject, ev.Project, "event", ev.Kind, "outcome", ev.Message, "err", err)
		}
	}
}

// drainNotices waits, at most noticeDrain, for the queued messages.
func (c *Controller) drainNotices() {
	ctx, cancel := context.WithTimeout(context.Background(), noticeDrain)
	defer cancel()
	c.flushNotices(ctx)
	if q := c.notices.queue; q != nil {
		ctx, cancel := context.WithTimeout(context.Background(), noticeDrain)
		defer cancel()
		q.Close(ctx)
	}
}

// NoticeRunFinished sends project's run_finished for a run that ended
// without a tick (every result reused).
func (c *Controller) NoticeRunFinished(ctx context.Context, project string) {
	p, err := c.st.Project(ctx, project)
	if err != nil || p.State != domain.ProjectDone {
		return
	}
	c.sendNotice(ctx, project, notify.RunFinished, p.Result, fmt.Sprintf("run %d: every task's result reused", p.Run))
	c.flushNotices(ctx)
}
