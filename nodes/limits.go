package nodes

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"sync"
)

// MaxExecOutput caps what Exec keeps of a command's stdout, and of its
// stderr: a node or a task that prints hundreds of megabytes (a forged
// status.json, a runaway command) must not fill the controller's memory.
// The largest legitimate output, `wrapper status` of a node with thousands
// of tasks, is a few megabytes.
const MaxExecOutput = 64 << 20

// MaxStreamLine caps a line of a Stream: a status stream's frames are
// small, and a node must not make the controller buffer without end.
const MaxStreamLine = 1 << 20

// ErrStreamEnded is wrapped by Stream's error when the command ended (or
// its connection did) before onLine ended the stream.
var ErrStreamEnded = errors.New("stream ended")

// ReadLines hands each line of r to onLine until EOF, an error, a line over
// MaxStreamLine, or onLine returning false (then it returns nil). A last
// line without its newline is dropped: the command was cut off in it.
func ReadLines(r io.Reader, onLine func([]byte) bool) error {
	br := bufio.NewReaderSize(r, 64<<10)
	var long []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if err == bufio.ErrBufferFull || err == nil && len(long) > 0 {
			if len(long)+len(chunk) > MaxStreamLine {
				return fmt.Errorf("a line of more than %d bytes", MaxStreamLine)
			}
			long = append(long, chunk...)
			if err != nil {
				continue
			}
			chunk, long = long, long[:0:0]
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				return ErrStreamEnded
			}
			return err
		}
		if !onLine(bytes.TrimSuffix(chunk, []byte("\n"))) {
			return nil
		}
	}
}

// ErrOutputTooLarge is wrapped by the error of an Exec whose command printed
// more than MaxExecOutput on stdout or stderr; the command is killed.
var ErrOutputTooLarge = errors.New("command output too large")

// CappedBuffer keeps up to limit bytes. The first write past the limit
// calls over once (the transport kills the command there) and the rest is
// discarded without an error, so the copy feeding it never blocks the
// command on a full pipe.
type CappedBuffer struct {
	mu    sync.Mutex
	buf   []byte
	limit int
	over  func()
	full  bool
}

// NewCappedBuffer returns a buffer that keeps up to limit bytes and calls
// over at the first write past it.
func NewCappedBuffer(limit int, over func()) *CappedBuffer {
	return &CappedBuffer{limit: limit, over: over}
}

func (b *CappedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.full {
		return len(p), nil
	}
	if len(b.buf)+len(p) > b.limit {
		b.full = true
		if b.over != nil {
			b.over()
		}
		return len(p), nil
	}
	if len(b.buf)+len(p) > cap(b.buf) {
		// Grow by doubling, but never past the limit (append would
		// allocate up to twice the limit).
		n := min(max(2*cap(b.buf), len(b.buf)+len(p), 4096), b.limit)
		grown := make([]byte, len(b.buf), n)
		copy(grown, b.buf)
		b.buf = grown
	}
	b.buf = append(b.buf, p...)
	return len(p), nil
}

// ReadFrom reads r to its end into the buffer, as Write would keep it, but
// straight into the buffer's room: io.Copy then needs no 32 KiB buffer of
// its own (an SSH session copies each of its streams with io.Copy). It is
// not to be used while another goroutine writes to b.
func (b *CappedBuffer) ReadFrom(r io.Reader) (int64, error) {
	var total int64
	var discard []byte
	for {
		b.mu.Lock()
		full := b.full
		if !full && len(b.buf) == cap(b.buf) {
			n := min(max(2*cap(b.buf), 4096), b.limit+1)
			grown := make([]byte, len(b.buf), n)
			copy(grown, b.buf)
			b.buf = grown
		}
		room := b.buf[len(b.buf):cap(b.buf)]
		b.mu.Unlock()
		if full {
			if discard == nil {
				discard = make([]byte, 4096)
			}
			room = discard
		}
		n, err := r.Read(room)
		total += int64(n)
		if n > 0 && !full {
			b.mu.Lock()
			if len(b.buf)+n > b.limit {
				b.full = true
				if b.over != nil {
					b.over()
				}
			} else {
				b.buf = b.buf[:len(b.buf)+n]
			}
			b.mu.Unlock()
		}
		if errors.Is(err, io.EOF) {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}

// Overflowed reports whether more than limit bytes were written.
func (b *CappedBuffer) Overflowed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.full
}

// Bytes returns what was kept.
func (b *CappedBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf
}
