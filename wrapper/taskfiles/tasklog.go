package taskfiles

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"syscall"
)

// CutMarker starts task.log once its head has been dropped; n counts the
// bytes of the tool's output that are no longer in the file.
func CutMarker(n int64) string {
	return fmt.Sprintf("[dispatch: %d bytes cut]\n", n)
}

// ParseCutMarker returns the count of a leading cut marker in head and the
// marker's length, or 0, 0 when head does not start with one.
func ParseCutMarker(head []byte) (cut int64, size int) {
	const prefix, suffix = "[dispatch: ", " bytes cut]\n"
	if !bytes.HasPrefix(head, []byte(prefix)) {
		return 0, 0
	}
	rest := head[len(prefix):]
	end := bytes.Index(rest, []byte(suffix))
	if end <= 0 {
		return 0, 0
	}
	n, err := strconv.ParseInt(string(rest[:end]), 10, 64)
	if err != nil || n < 0 {
		return 0, 0
	}
	return n, len(prefix) + end + len(suffix)
}

// TaskLog is task.log: everything the tool writes, appended as it arrives,
// with the head dropped when the file would outgrow its limit. Several
// processes' pipes (setup, then the tool) feed it, one at a time.
type TaskLog struct {
	path  string
	limit int64

	mu     sync.Mutex
	f      *os.File
	size   int64        // bytes in the file, marker included
	header int64        // length of the cut marker at the start of the file
	total  int64        // bytes the tool has written, cut or not
	tail   []byte       // end of the output, for Classify and setup errors
	err    error        // first write error; later output is counted, not stored
	Watch  *LineWatcher // when set, sees every line of output as it comes
}

func CreateTaskLog(path string, limit int64) (*TaskLog, error) {
	// Opened by the kernel's call, not os.OpenFile, whose file the
	// runtime would try (and fail) to add to its poller: four calls.
	var fd int
	err := IgnoringEINTR(func() (err error) {
		fd, err = sysOpen(path, syscall.O_RDWR|syscall.O_CREAT|syscall.O_TRUNC|syscall.O_APPEND|syscall.O_CLOEXEC, 0o644)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", FileLog, &os.PathError{Op: "open", Path: path, Err: err})
	}
	return &TaskLog{path: path, limit: limit, f: os.NewFile(uintptr(fd), path)}, nil
}

// Write stores p. It never fails, so that a full disk cannot stop the copy
// from the tool's pipe and block the tool on a full pipe; the first error is
// kept for Err.
func (l *TaskLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.keepTail(p)
	if l.Watch != nil {
		l.Watch.Write(p)
	}
	if l.err == nil {
		if l.size+int64(len(p)) > l.limit {
			l.err = l.cut(p)
		} else {
			n, err := l.f.Write(p)
			l.size += int64(n)
			l.err = err
		}
	}
	l.total += int64(len(p))
	return len(p), nil
}

// cut rewrites the file as a marker plus the last half of the limit of the
// output including p. The rewrite is atomic so that a reader never sees a
// truncated file; it costs one copy of half the limit per half limit of
// output.
func (l *TaskLog) cut(p []byte) error {
	keep := l.limit / 2
	var tail []byte
	if int64(len(p)) >= keep {
		tail = p[int64(len(p))-keep:]
	} else {
		need := min(keep-int64(len(p)), l.size-l.header)
		tail = make([]byte, need, need+int64(len(p)))
		if _, err := l.f.ReadAt(tail, l.size-need); err != nil {
			return fmt.Errorf("read %s for cut: %w", FileLog, err)
		}
		tail = append(tail, p...)
	}
	marker := CutMarker(l.total + int64(len(p)) - int64(len(tail)))
	data := append([]byte(marker), tail...)
	if err := WriteFileAtomic(l.path, data, 0o644); err != nil {
		return err
	}
	f, err := os.OpenFile(l.path, os.O_RDWR|os.O_APPEND, 0)
	if err != nil {
		return fmt.Errorf("reopen %s: %w", FileLog, err)
	}
	l.f.Close()
	l.f = f
	l.size = int64(len(data))
	l.header = int64(len(marker))
	return nil
}

// ReadTail returns up to the last limit bytes of the file the log writes
// to, read through its own descriptor: not whatever file is at its path
// now (a task can rename one of its own over task.log). A first line cut
// in the middle is dropped.
func (l *TaskLog) ReadTail(limit int64) ([]byte, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fi, err := l.f.Stat()
	if err != nil {
		return nil, err
	}
	off := max(fi.Size()-limit, 0)
	data, err := io.ReadAll(io.NewSectionReader(l.f, off, fi.Size()-off))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", FileLog, err)
	}
	if off > 0 {
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			data = data[i+1:]
		}
	}
	return data, nil
}

func (l *TaskLog) keepTail(p []byte) {
	l.tail = append(l.tail, p...)
	if len(l.tail) > 2*ClassifyTail {
		l.tail = append([]byte(nil), l.tail[len(l.tail)-ClassifyTail:]...)
	}
}

// Tail returns up to the last 8 KiB of output.
func (l *TaskLog) Tail() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := l.tail
	if len(t) > ClassifyTail {
		t = t[len(t)-ClassifyTail:]
	}
	return append([]byte(nil), t...)
}

// LastLine returns the last non-empty line of output, shortened for use in
// an error message.
func (l *TaskLog) LastLine() string {
	t := bytes.TrimRight(l.Tail(), " \t\r\n")
	if i := bytes.LastIndexByte(t, '\n'); i >= 0 {
		t = t[i+1:]
	}
	t = bytes.TrimSpace(t)
	const max = 200
	if len(t) > max {
		t = append(t[:max:max], "..."...)
	}
	return string(t)
}

// Total returns the number of bytes written so far.
func (l *TaskLog) Total() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.total
}

// Err returns the first error met while storing output.
func (l *TaskLog) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

func (l *TaskLog) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.f.Close()
}

// maxWatchedLine bounds a line the watcher looks at; longer ones (a tool's
// whole file in one JSON event) cannot be a retry notice and are skipped.
const maxWatchedLine = 16 << 10

// LineWatcher splits what the tool writes into lines and hands each, with
// the one before it, to on. It is fed under TaskLog's lock, in order.
type LineWatcher struct {
	On   func(prev, line []byte)
	buf  []byte
	prev []byte
	long bool // the current line outgrew maxWatchedLine: skip to its end
}

func (w *LineWatcher) Write(p []byte) {
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		chunk := p
		if i >= 0 {
			chunk = p[:i]
		}
		if !w.long {
			if len(w.buf)+len(chunk) > maxWatchedLine {
				w.long, w.buf = true, w.buf[:0]
			} else {
				w.buf = append(w.buf, chunk...)
			}
		}
		if i < 0 {
			return
		}
		p = p[i+1:]
		if w.long {
			w.long = false
			w.prev = w.prev[:0]
			continue
		}
		w.On(w.prev, w.buf)
		w.prev, w.buf = append(w.prev[:0], w.buf...), w.buf[:0]
	}
}

// ClassifyTail is how much of the end of task.log Classify is shown.
const ClassifyTail = 8 << 10
