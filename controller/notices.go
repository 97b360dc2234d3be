package controller

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/home"
	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/notify"
	"github.com/dispatch-tool/dispatch/store"
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
// recorded.
type notice struct {
	project, event, message string
}

type notices struct {
	once  sync.Once
	queue *notify.Queue
}

// sendNotice queues event for project's notify target, if it has one.
func (c *Controller) sendNotice(ctx context.Context, project, event, result, message string) {
	p, err := c.st.Project(ctx, project)
	if err != nil {
		c.log.Error("notification not sent: read its project", keyProject, project, "event", event, "err", err)
		return
	}
	opts, err := p.ParseOptions()
	if err != nil {
		c.log.Error("notification not sent: read its project's options", keyProject, project, "event", event, "err", err)
		return
	}
	cfg := opts.Notify
	if cfg == nil {
		cfg = c.config().Notify
	}
	if cfg == nil {
		return
	}
	msg := notify.Message{Event: event, Project: project, Run: p.Run, Result: result, Message: message,
		At: c.now().UTC().Format(time.RFC3339)}
	if tasks, err := c.st.Tasks(ctx, project); err == nil {
		msg.Counts = map[string]int{}
		for _, t := range tasks {
			msg.Counts[string(t.Status)]++
		}
	}
	if usd, _, err := c.st.Spent(ctx, project); err == nil {
		msg.CostUSD = usd
	}
	if event == notify.RunFinished {
		msg.Report = filepath.Join(home.RunsDir(c.opts.Home, project), "report.md")
	}
	target := notify.Target{Command: cfg.Command}
	if cfg.Webhook != "" {
		// The URL may carry a token and the secret is one: both come from
		// the controller's environment now, and live in memory only.
		u, uerr := nodes.ExpandEnv(cfg.Webhook, c.opts.LookupEnv)
		s, serr := nodes.ExpandEnv(cfg.Secret, c.opts.LookupEnv)
		if uerr != nil || serr != nil {
			c.noticeOutcome(notify.Outcome{Message: msg, Via: "webhook",
				Err: fmt.Errorf("not sent: %v (export it in the controller's environment)", firstErr(uerr, serr))})
		} else {
			target.Webhook, target.Secret = u, s
		}
	}
	c.notices.once.Do(func() {
		c.notices.queue = notify.NewQueue(notify.DefaultSender(), c.noticeOutcome)
	})
	c.notices.queue.Send(target, msg)
}

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

// noticeOutcome records how a delivery went.
func (c *Controller) noticeOutcome(o notify.Outcome) {
	ev := store.Event{Project: o.Message.Project, Kind: "notify",
		Message: fmt.Sprintf("%s sent by %s (%d tries)", o.Message.Event, o.Via, o.Tries)}
	if o.Err != nil {
		ev.Kind, ev.Message = "notify_failed", fmt.Sprintf("%s by %s failed after %d tries: %v", o.Message.Event, o.Via, o.Tries, o.Err)
		c.log.Warn("notification failed", keyProject, o.Message.Project, "via", o.Via, "err", o.Err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.st.Update(ctx, func(tx *store.Tx) error { return tx.Event(ctx, ev) }); err != nil {
		// status cannot show it: the log is where it is said.
		c.log.Error("record the outcome of a notification", keyProject, o.Message.Project, "event", ev.Kind,
			"outcome", ev.Message, "err", err)
	}
}

// drainNotices waits, at most noticeDrain, for the queued messages.
func (c *Controller) drainNotices() {
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
}
