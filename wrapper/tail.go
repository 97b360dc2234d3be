package wrapper

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/dispatch-tool/dispatch/wrapper/errkind"

	"github.com/dispatch-tool/dispatch/wrapper/taskfiles"

	"github.com/dispatch-tool/dispatch/wire"
)

// tailPoll is how often `tail --follow` looks for more output.
const tailPoll = 200 * time.Millisecond

func cmdTail(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlagSet("tail")
	dirFlag := fs.String("dir", "", "task directory")
	follow := fs.Bool("follow", false, "keep printing until the attempt is over")
	from := fs.Int64("from", 0, "skip the first N bytes of what tail would print (a caller polling for more)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *from < 0 {
		return errkind.Usagef("tail: --from must not be negative")
	}
	stdout = &skipWriter{w: stdout, skip: *from}
	dir, err := taskDirFlag("tail", *dirFlag)
	if err != nil {
		return err
	}
	if _, err := os.Stat(dir); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return &errkind.Error{Kind: wire.KindNotFound, Err: fmt.Errorf("no task directory %s", dir)}
		}
		return errkind.IO(err)
	}
	r := &logReader{path: filepath.Join(dir, taskfiles.FileLog), w: stdout}
	defer r.close()
	if !*follow {
		return r.drain()
	}
	for {
		// Checked before draining: output written before the final status
		// is then certain to be read.
		over := attemptOver(dir)
		if err := r.drain(); err != nil {
			return err
		}
		if over {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(tailPoll):
		}
	}
}

// attemptOver reports whether no more output can come: the status is final,
// or no supervisor is alive to write any.
func attemptOver(dir string) bool {
	if st, err := taskfiles.ReadStatus(dir); err == nil && st.Final() {
		return true
	}
	alive, _ := taskfiles.SupervisorAlive(dir)
	return !alive
}

// logReader prints task.log and follows it across the rewrites that cut its
// head. It counts the bytes of the tool's output it has printed (pos) and
// uses each file's cut marker to find where to resume, printing a marker of
// its own for output that was cut before it could be read.
type logReader struct {
	path string
	w    io.Writer
	f    *os.File
	off  int64 // read offset in f
	pos  int64 // bytes of output printed
}

func (r *logReader) drain() error {
	if r.f == nil {
		if err := r.open(); err != nil || r.f == nil {
			return err
		}
	}
	if err := r.copy(); err != nil {
		return err
	}
	now, err := os.Stat(r.path)
	if err != nil {
		return nil
	}
	if cur, err := r.f.Stat(); err == nil && os.SameFile(now, cur) {
		return nil
	}
	r.close()
	if err := r.open(); err != nil || r.f == nil {
		return err
	}
	return r.copy()
}

func (r *logReader) open() error {
	f, err := os.Open(r.path)
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
		if _, err := io.WriteString(r.w, taskfiles.CutMarker(base-r.pos)); err != nil {
			f.Close()
			return errkind.IO(fmt.Errorf("write log: %w", err))
		}
		r.pos, r.off = base, int64(hdr)
	}
	r.f = f
	return nil
}

func (r *logReader) copy() error {
	buf := make([]byte, 32<<10)
	for {
		n, err := r.f.ReadAt(buf, r.off)
		if n > 0 {
			if _, werr := r.w.Write(buf[:n]); werr != nil {
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

func (r *logReader) close() {
	if r.f != nil {
		r.f.Close()
		r.f = nil
	}
}

// skipWriter drops the first skip bytes written to it: `tail --from N`
// lets a controller that polls print only what is new.
type skipWriter struct {
	w    io.Writer
	skip int64
}

func (s *skipWriter) Write(p []byte) (int, error) {
	n := len(p)
	if s.skip >= int64(n) {
		s.skip -= int64(n)
		return n, nil
	}
	p = p[s.skip:]
	s.skip = 0
	if _, err := s.w.Write(p); err != nil {
		return 0, err
	}
	return n, nil
}
