package nodes

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
)

// Conversation is a command started once whose stdin and stdout stay open
// for requests: one line in, one line out. A Conversation is used by one
// goroutine at a time; Close may come from any.
type Conversation interface {
	// Call writes req (one line: it holds no newline) and a newline to the
	// command's stdin and returns the next line the command prints on
	// stdout, without the newline. A line longer than limit bytes is an
	// error. Any error, ctx ending first included, closes the
	// conversation: a later Call fails at once.
	Call(ctx context.Context, req []byte, limit int) ([]byte, error)
	// Exchange writes req and a newline as Call does and hands the
	// command's stdout to read, which must read the answer to its end and
	// no further: the answer's own framing says where it ends. read runs
	// in a goroutine of its own and may go on after Exchange returned with
	// ctx's error: what it writes to must stop taking bytes then. An
	// error, read's or ctx ending first, closes the conversation.
	Exchange(ctx context.Context, req []byte, read func(io.Reader) error) error
	// Close ends the command: its stdin is closed and it is killed if
	// need be. Calling it more than once is allowed.
	Close() error
}

// Converser is a Transport that can hold a command open for requests.
// Transports that cannot leave it out: callers fall back to Exec.
type Converser interface {
	// Converse starts argv, quoted as Exec quotes it, with its stdin and
	// stdout held open for Calls until the Conversation is closed (or the
	// connection drops). Its stderr is discarded. ctx bounds the start
	// only. An open conversation holds one of the node's session slots.
	Converse(ctx context.Context, argv []string) (Conversation, error)
}

// ErrConversationClosed is wrapped by the error of a Call on a closed
// conversation.
var ErrConversationClosed = errors.New("conversation closed")

// ErrNotSent is wrapped by the error of a Call whose request could not be
// written at all: the command never saw it.
var ErrNotSent = errors.New("the request was not sent")

// LineConversation is a Conversation over a command's stdin (w) and stdout
// (r); stop ends the command. Transports build theirs with it.
type LineConversation struct {
	w    io.Writer
	r    *bufio.Reader
	stop func() error

	once   sync.Once
	mu     sync.Mutex // guards closed
	closed bool
}

// NewLineConversation returns a conversation writing to w and reading from
// r; stop is called once, by the first Close.
func NewLineConversation(w io.Writer, r io.Reader, stop func() error) *LineConversation {
	return &LineConversation{w: w, r: bufio.NewReaderSize(r, 64<<10), stop: stop}
}

// Call implements Conversation. The request and its reply travel in a
// goroutine of their own: ctx ending returns at once, whatever the command
// or the connection does, and the conversation is closed, which ends that
// goroutine when the command's pipes close.
func (c *LineConversation) Call(ctx context.Context, req []byte, limit int) ([]byte, error) {
	var line []byte
	err := c.do(ctx, func() (err error) {
		line, err = c.roundTrip(req, limit)
		return err
	})
	if err != nil {
		return nil, err // line is the goroutine's still when ctx ended
	}
	return line, nil
}

// Exchange implements Conversation, as Call does.
func (c *LineConversation) Exchange(ctx context.Context, req []byte, read func(io.Reader) error) error {
	return c.do(ctx, func() error {
		if err := c.send(req); err != nil {
			return err
		}
		return read(c.r)
	})
}

// do runs one request's fn in a goroutine of its own (see Call).
func (c *LineConversation) do(ctx context.Context, fn func() error) error {
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return ErrConversationClosed
	}
	done := make(chan error, 1)
	go func() { done <- fn() }()
	ended := func(err error) error {
		if err != nil {
			_ = c.Close()
		}
		return err
	}
	select {
	case err := <-done:
		return ended(err)
	case <-ctx.Done():
		// A reply that came whole in the same instant is the reply: select
		// picks either when both are ready, and dropping it would fail
		// what the node did.
		select {
		case err := <-done:
			return ended(err)
		default:
		}
		_ = c.Close()
		return fmt.Errorf("no reply: %w", context.Cause(ctx))
	}
}

// send writes req and a newline.
func (c *LineConversation) send(req []byte) error {
	msg := make([]byte, 0, len(req)+1)
	msg = append(append(msg, req...), '\n')
	if n, err := c.w.Write(msg); err != nil {
		if n == 0 {
			err = fmt.Errorf("%w: %w", ErrNotSent, err)
		}
		return fmt.Errorf("write a request: %w", err)
	}
	return nil
}

// roundTrip writes req and reads the line that answers it.
func (c *LineConversation) roundTrip(req []byte, limit int) ([]byte, error) {
	if err := c.send(req); err != nil {
		return nil, err
	}
	var long []byte
	for {
		chunk, err := c.r.ReadSlice('\n')
		if len(long)+len(chunk) > limit+1 {
			return nil, fmt.Errorf("a reply of more than %d bytes", limit)
		}
		switch {
		case err == nil && long == nil:
			return append([]byte(nil), chunk[:len(chunk)-1]...), nil
		case err == nil:
			long = append(long, chunk...)
			return long[:len(long)-1], nil
		case errors.Is(err, bufio.ErrBufferFull):
			long = append(long, chunk...)
		case errors.Is(err, io.EOF):
			return nil, fmt.Errorf("read a reply: %w", ErrStreamEnded)
		default:
			return nil, fmt.Errorf("read a reply: %w", err)
		}
	}
}

// Close implements Conversation.
func (c *LineConversation) Close() error {
	var err error
	c.once.Do(func() {
		c.mu.Lock()
		c.closed = true
		c.mu.Unlock()
		err = c.stop()
	})
	return err
}
