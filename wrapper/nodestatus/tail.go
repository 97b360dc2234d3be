package nodestatus

import (
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/dispatch-tool/dispatch/wrapper/errkind"
	"github.com/dispatch-tool/dispatch/wrapper/taskfiles"
)

// TailPoll is how often `tail --follow` looks for more output.
const TailPoll = 200 * time.Millisecond

// AttemptOver reports whether no more output can come: the status is final,
// or no supervisor is alive to write any.
func AttemptOver(dir string) bool {
	if st, err := taskfiles.ReadStatus(dir); err == nil && st.Final() {
		return true
	}
	alive, _ := taskfiles.SupervisorAlive(dir)
	return !alive
}

// LogReader prints task.log and follows it across the rewrites that cut its
// head. It counts the bytes of the tool's output it has printed (pos) and
// uses each file's cut marker to find where to resume, printing a marker of
// its own for output that was cut before it could be read.
type LogReader struct {
	Path string
	W    io.Writer
	f    *os.File
	off  int64 // read offset in f
	pos  int64 // bytes of output printed
}

func (r *LogReader) Drain() error {
	if r.f == nil {
		if err := r.open(); err != nil || r.f == nil {
			return err
		}
	}
	if err := r.copy(); err != nil {
		return err
	}
	now, err := os.Stat(r.Path)
	if err != nil {
		return nil
	}
	if cur, err := r.f.Stat(); err == nil && os.SameFile(now, cur) {
		return nil
	}
	r.Close()
	if err := r.open(); err != nil || r.f == nil {
		return err
	}
	return r.copy()
}

func (r *LogReader) open() error {
	f, err := os.Open(r.Path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return errkind.IO(fmt.Errorf("open %s: %w", taskfiles.FileLog, err))
	}
	head := make([]byte, 64)
	n, _ := f.ReadAt(head, 0)
	base, hdr := taskfiles.ParseCutMarker(head[:n])
	if r.pos >= base {
		r.off = int64(hdr) + r.pos - base
	} else {
		if _, err := io.WriteString(r.W, taskfiles.CutMarker(base-r.pos)); err != nil {
			f.Close()
			return errkind.IO(fmt.Errorf("write log: %w", err))
		}
		r.pos, r.off = base, int64(hdr)
	}
	r.f = f
	return nil
}

func (r *LogReader) copy() error {
	buf := make([]byte, 32<<10)
	for {
		n, err := r.f.ReadAt(buf, r.off)
		if n > 0 {
			if _, werr := r.W.Write(buf[:n]); werr != nil {
				return errkind.IO(fmt.Errorf("write log: %w", werr))
			}
			r.off += int64(n)
			r.pos += int64(n)
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return errkind.IO(fmt.Errorf("read %s: %w", taskfiles.FileLog, err))
		}
	}
}

func (r *LogReader) Close() {
	if r.f != nil {
		r.f.Close()
		r.f = nil
	}
}

// SkipWriter drops the first skip bytes written to it: `tail --from N`
// lets a controller that polls print only what is new.
type SkipWriter struct {
	W    io.Writer
	Skip int64
}

func (s *SkipWriter) Write(p []byte) (int, error) {
	n := len(p)
	if s.Skip >= int64(n) {
		s.Skip -= int64(n)
		return n, nil
	}
	p = p[s.Skip:]
	s.Skip = 0
	if _, err := s.W.Write(p); err != nil {
		return 0, err
	}
	return n, nil
}
