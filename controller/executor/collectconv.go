package executor

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/dispatch-tool/dispatch/nodes"
)

// Collector is an Executor whose node's collect requests can go over a
// conversation held per node (`collect --serve`): a tick's collection is
// then one write and one framed answer on an open session, not a new SSH
// session, a login shell and a wrapper process.
type Collector interface {
	// Collect sends req (a wire.CollectRequest, one line) over the node's
	// collect conversation, opening one when none is, and hands the
	// command's stdout to read, which reads the answer to its end (see
	// nodes.Conversation.Exchange); no byte of it read for idle fails it.
	// An error closes the conversation: the next call opens a new one.
	// ErrNoConversation when none can be held: collect with an exec.
	Collect(ctx context.Context, inst *nodes.Installed, req []byte, idle time.Duration, read func(io.Reader) error) error
}

// ErrNoConversation is Collect's error when the node's transport holds no
// conversation, or its wrapper did not answer a new one's first request
// lately (an older wrapper without `collect --serve`).
var ErrNoConversation = errors.New("no collect conversation")

var (
	_ Collector = (*Wrapper)(nil)
	_ Collector = (*Slurm)(nil)
)

// collectArgv is the collect conversation's command.
func collectArgv(inst *nodes.Installed, _ string) []string {
	return []string{inst.Path, "collect", "--serve"}
}

// Collect implements Collector over the node's held conversation.
func (w *Wrapper) Collect(ctx context.Context, inst *nodes.Installed, req []byte, idle time.Duration, read func(io.Reader) error) error {
	conv, answered := w.collects.open(ctx, w.tr, inst, w.node)
	if conv == nil {
		return ErrNoConversation
	}
	err := nodes.ExchangeIdle(ctx, conv, req, read, idle)
	w.collects.done(conv, answered, err)
	return err
}

// Collect implements Collector: the login host's wrapper sends the
// files, over the inner executor's conversation.
func (s *Slurm) Collect(ctx context.Context, inst *nodes.Installed, req []byte, idle time.Duration, read func(io.Reader) error) error {
	if c, ok := s.inner.(Collector); ok {
		return c.Collect(ctx, inst, req, idle, read)
	}
	return ErrNoConversation
}
