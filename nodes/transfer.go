package nodes

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"sync/atomic"
	"time"
)

// ErrStalled is wrapped by the error of a transfer that moved no byte for
// its idle timeout (see PutIdle and GetIdle).
var ErrStalled = errors.New("transfer stalled")

// PutIdle is tr.Put bounded by progress rather than by a fixed deadline: it
// fails, with an error wrapping ErrStalled, once no byte has been read from r
// for idle, however long the whole file takes. ctx may still carry an overall
// deadline of its own.
func PutIdle(ctx context.Context, tr Transport, p string, r io.Reader, mode fs.FileMode, idle time.Duration) error {
	ctx, w := watch(ctx, idle)
	defer w.stop()
	return stalled(ctx, tr.Put(ctx, p, progressReader{r, w}, mode))
}

// ExecFromer is a Transport that can feed a command's stdin from a reader
// as the command runs, instead of from a whole []byte.
type ExecFromer interface {
	ExecFrom(ctx context.Context, argv []string, stdin io.Reader) (Result, error)
}

// ExecFromIdle runs argv with its stdin read from r, bounded by progress as
// PutIdle is: it fails, wrapping ErrStalled, once no byte has been read
// from r for idle while the command runs. tr must be an ExecFromer.
func ExecFromIdle(ctx context.Context, tr ExecFromer, argv []string, r io.Reader, idle time.Duration) (Result, error) {
	ctx, w := watch(ctx, idle)
	defer w.stop()
	res, err := tr.ExecFrom(ctx, argv, progressReader{r, w})
	return res, stalled(ctx, err)
}

// ExecToer is a Transport that can copy a command's stdout to a writer as
// the command runs, past MaxExecOutput (see sshnode.SSH.ExecTo).
type ExecToer interface {
	ExecTo(ctx context.Context, argv []string, stdin []byte, stdout io.Writer) (Result, error)
}

// ExecToIdle runs argv with its stdout copied to w, bounded by progress
// as GetIdle is: it fails, wrapping ErrStalled, once no byte has reached w
// for idle, however long the whole stream takes.
func ExecToIdle(ctx context.Context, tr ExecToer, argv []string, stdin []byte, w io.Writer, idle time.Duration) (Result, error) {
	ctx, wd := watch(ctx, idle)
	defer wd.stop()
	res, err := tr.ExecTo(ctx, argv, stdin, progressWriter{w, wd})
	return res, stalled(ctx, err)
}

// ExchangeIdle is conv.Exchange bounded by progress as ExecToIdle is: it
// fails, wrapping ErrStalled, once read has read no byte of the answer for
// idle, however long the whole answer takes.
func ExchangeIdle(ctx context.Context, conv Conversation, req []byte, read func(io.Reader) error, idle time.Duration) error {
	ctx, wd := watch(ctx, idle)
	defer wd.stop()
	err := conv.Exchange(ctx, req, func(r io.Reader) error { return read(progressReader{r, wd}) })
	return stalled(ctx, err)
}

// GetIdle is tr.Get bounded by progress: it fails, with an error wrapping
// ErrStalled, once no byte has reached w for idle.
func GetIdle(ctx context.Context, tr Transport, p string, w io.Writer, idle time.Duration) error {
	ctx, wd := watch(ctx, idle)
	defer wd.stop()
	return stalled(ctx, tr.Get(ctx, p, progressWriter{w, wd}))
}

// watchdog cancels its context when no progress was reported for idle.
type watchdog struct {
	idle   time.Duration
	last   atomic.Int64 // UnixNano of the last progress
	timer  *time.Timer
	cancel context.CancelCauseFunc
}

func watch(parent context.Context, idle time.Duration) (context.Context, *watchdog) {
	ctx, cancel := context.WithCancelCause(parent)
	w := &watchdog{idle: idle, cancel: cancel}
	w.touch()
	w.timer = time.AfterFunc(idle, w.check)
	return ctx, w
}

func (w *watchdog) touch() { w.last.Store(time.Now().UnixNano()) }

func (w *watchdog) check() {
	quiet := time.Since(time.Unix(0, w.last.Load()))
	if quiet >= w.idle {
		w.cancel(fmt.Errorf("%w: no data moved for %s", ErrStalled, quiet.Round(time.Millisecond)))
		return
	}
	w.timer.Reset(w.idle - quiet)
}

func (w *watchdog) stop() {
	w.timer.Stop()
	w.cancel(nil)
}

// stalled names the stall in err when the watchdog of ctx ended the
// transfer.
func stalled(ctx context.Context, err error) error {
	if cause := context.Cause(ctx); err != nil && errors.Is(cause, ErrStalled) && !errors.Is(err, ErrStalled) {
		return fmt.Errorf("%w (%v)", cause, err)
	}
	return err
}

type progressReader struct {
	r io.Reader
	w *watchdog
}

func (p progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	if n > 0 {
		p.w.touch()
	}
	return n, err
}

type progressWriter struct {
	w  io.Writer
	wd *watchdog
}

func (p progressWriter) Write(b []byte) (int, error) {
	n, err := p.w.Write(b)
	if n > 0 {
		p.wd.touch()
	}
	return n, err
}
