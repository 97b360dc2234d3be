package collect

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/errkind"
	"github.com/dispatch-tool/dispatch/wrapper/taskfiles"
)

// MaxRequest caps the request `collect` reads on stdin.
const MaxRequest = 4 << 20

// ReadRequest reads and checks the request on stdin: at most MaxRequest
// bytes of a wire.CollectRequest whose attempts name absolute, clean task
// directories and attempts of 1 or more.
func ReadRequest(stdin io.Reader) (wire.CollectRequest, error) {
	data, err := io.ReadAll(io.LimitReader(stdin, MaxRequest+1))
	if err != nil {
		return wire.CollectRequest{}, errkind.IO(err)
	}
	if len(data) > MaxRequest {
		return wire.CollectRequest{}, errkind.Usagef("collect: the request on stdin is larger than %d MiB", MaxRequest>>20)
	}
	return parseRequest(data)
}

// parseRequest checks a request of at most MaxRequest bytes.
func parseRequest(data []byte) (wire.CollectRequest, error) {
	var req wire.CollectRequest
	if err := json.Unmarshal(data, &req); err != nil {
		return req, errkind.Usagef("collect: stdin is not a collect request: %v", err)
	}
	for _, it := range req.Attempts {
		if !filepath.IsAbs(it.Dir) || filepath.Clean(it.Dir) != it.Dir || it.Attempt < 1 {
			return req, errkind.Usagef("collect: attempt %d in %q: want an absolute, clean task directory and an attempt of 1 or more", it.Attempt, it.Dir)
		}
	}
	return req, nil
}

// Write writes, as one tar stream on w, the files the controller collects
// of the request's attempts: per attempt a head saying what was found,
// task.log and output/. Nothing is followed: task.log and output/ must be a
// regular file and a directory themselves, and output/ is read through an
// os.Root, so a link the task made reaches nothing outside; an output/ over
// the quotas is listed in the head and not sent.
func Write(ctx context.Context, req wire.CollectRequest, w io.Writer) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	tw := tar.NewWriter(bw)
	for i, it := range req.Attempts {
		if err := ctx.Err(); err != nil {
			return &errkind.Error{Kind: wire.KindInternal, Err: fmt.Errorf("collect interrupted: %w", err)}
		}
		if err := Open(it).Send(tw, strconv.Itoa(i)); err != nil {
			return errkind.IO(err)
		}
	}
	if err := tw.Close(); err != nil {
		return errkind.IO(err)
	}
	return bw.Flush()
}

// Attempt is one attempt of a request as its head says it: where it was
// found, its task.log opened and its size read, its output/ listed. Send
// sends that, whatever changes after Open: a process the task left behind
// may go on writing to task.log or output/.
type Attempt struct {
	head   wire.CollectHead
	log    *os.File
	out    *os.Root
	listed []listedFile
}

// Open finds attempt it and reads its head; Send it, which closes what
// Open opened.
func Open(it wire.CollectItem) *Attempt {
	src, head := findAttempt(it)
	a := &Attempt{head: head}
	if head.Found {
		a.log, a.head.Log, a.head.LogSize = openLog(src, it.MaxBytes)
		if it.Output {
			a.out, a.listed = listOutput(src, it, &a.head)
		}
	}
	return a
}

// Send writes the attempt's entries under prefix/: its head, task.log up
// to the size the head says (what it grew or shrank by since is in the
// end entry), output/ as listed. Only a failure to write the stream is
// returned: what cannot be read of the attempt is in its head, or in a
// collect.err entry once its files were under way.
func (a *Attempt) Send(tw *tar.Writer, prefix string) error {
	defer a.close()
	b, err := json.Marshal(a.head)
	if err != nil {
		return err
	}
	if err := writeEntry(tw, path.Join(prefix, wire.CollectHeadName), 0o644, int64(len(b)), bytes.NewReader(b)); err != nil {
		return err
	}
	var sendErr error
	var grew, shrank int64
	if a.log != nil {
		var size int64
		size, sendErr = sendFile(tw, path.Join(prefix, "task.log"), a.log, a.head.LogSize)
		grew, shrank = max(size-a.head.LogSize, 0), max(a.head.LogSize-size, 0)
	}
	var end wire.CollectEnd
	if a.out != nil && sendErr == nil {
		end, sendErr = sendOutput(tw, prefix, a.out, a.listed)
	}
	end.LogGrew, end.LogShrank = grew, shrank
	var werr *streamError
	if errors.As(sendErr, &werr) {
		return werr.err
	}
	if sendErr != nil {
		msg := []byte(sendErr.Error())
		return writeEntry(tw, path.Join(prefix, wire.CollectErrorName), 0o644, int64(len(msg)), bytes.NewReader(msg))
	}
	b, err = json.Marshal(end)
	if err != nil {
		return err
	}
	return writeEntry(tw, path.Join(prefix, wire.CollectEndName), 0o644, int64(len(b)), bytes.NewReader(b))
}

// close closes what Open opened.
func (a *Attempt) close() {
	if a.log != nil {
		a.log.Close()
	}
	if a.out != nil {
		a.out.Close()
	}
}

// findAttempt finds where it's attempt is: its task directory, or
// attempts/<n>/ there once a later attempt took the directory.
func findAttempt(it wire.CollectItem) (string, wire.CollectHead) {
	for _, moved := range []bool{false, true} {
		src := it.Dir
		if moved {
			src = filepath.Join(it.Dir, "attempts", strconv.Itoa(it.Attempt))
		}
		if st, err := taskfiles.ReadStatus(src); err == nil && st.Attempt == it.Attempt {
			return src, wire.CollectHead{Found: true, Moved: moved}
		}
	}
	return "", wire.CollectHead{}
}

// openLog opens src/task.log when it is a regular file of at most max
// bytes, and says what it is otherwise.
func openLog(src string, max int64) (*os.File, string, int64) {
	p := filepath.Join(src, "task.log")
	switch fi, err := os.Lstat(p); {
	case errors.Is(err, os.ErrNotExist):
		return nil, wire.CollectMissing, 0
	case err == nil && !fi.Mode().IsRegular():
		return nil, wire.CollectNotFollowed, 0
	}
	// Opened without following a link or blocking on a FIFO, whatever
	// replaced it since.
	f, err := taskfiles.OpenControlFile(p, os.O_RDONLY)
	if err != nil {
		return nil, wire.CollectError, 0
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, wire.CollectError, 0
	}
	if fi.Size() > max {
		f.Close()
		return nil, wire.CollectOverQuota, fi.Size()
	}
	return f, wire.CollectSent, fi.Size()
}

// listedFile is a regular file of output/ as listOutput found it.
type listedFile struct {
	path string
	size int64
}

// listOutput counts src/output/ into head (its regular files and links,
// as the controller's listing counted them) and, when it is to be sent,
// opens it and returns its regular files: what is sent is this listing,
// each file up to the size listed, whatever changes after it.
func listOutput(src string, it wire.CollectItem, head *wire.CollectHead) (*os.Root, []listedFile) {
	dir := filepath.Join(src, "output")
	fi, err := os.Lstat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		head.Output = wire.CollectMissing
		return nil, nil
	case err != nil:
		head.Output, head.Error = wire.CollectError, err.Error()
		return nil, nil
	case !fi.IsDir():
		head.Output = wire.CollectNotFollowed
		return nil, nil
	}
	var listed []listedFile
	root, err := os.OpenRoot(dir)
	if err == nil {
		err = fs.WalkDir(root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			switch {
			case d.Type().IsRegular():
				info, err := d.Info()
				if err != nil {
					return err
				}
				head.Files++
				head.Bytes += info.Size()
				listed = append(listed, listedFile{p, info.Size()})
			case d.Type()&fs.ModeSymlink != 0:
				head.Files++
			}
			return nil
		})
	}
	switch {
	case err != nil:
		head.Output, head.Error = wire.CollectError, err.Error()
	case head.Files > it.MaxFiles || head.Bytes > it.MaxBytes:
		head.Output = wire.CollectOverQuota
	default:
		head.Output = wire.CollectSent
		return root, listed
	}
	if root != nil {
		root.Close()
	}
	return nil, nil
}

// sendOutput writes the listed files of root as prefix/output/<path>, each
// as it is now up to its listed size, and returns what was sent and what
// changed since the listing: a file that grew is sent as listed (its first
// bytes), one removed or no longer a regular file is not sent. A process
// the task left behind may go on writing there; what it writes after the
// attempt's files are collected is not taken.
func sendOutput(tw *tar.Writer, prefix string, root *os.Root, listed []listedFile) (wire.CollectEnd, error) {
	var end wire.CollectEnd
	for _, l := range listed {
		// A file replaced by a link since the listing is not followed
		// (os.Root keeps a link inside output/, but it is no file of it).
		if fi, err := root.Lstat(l.path); err == nil && !fi.Mode().IsRegular() {
			end.Change(wire.CollectChange{Path: l.path, Listed: l.size, Now: -1})
			continue
		}
		f, err := root.OpenFile(l.path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
		if errors.Is(err, fs.ErrNotExist) {
			end.Change(wire.CollectChange{Path: l.path, Listed: l.size, Now: -1})
			continue
		}
		if err != nil {
			return end, err
		}
		size, err := sendFile(tw, path.Join(prefix, "output", l.path), f, l.size)
		f.Close()
		if err != nil {
			return end, err
		}
		if size != l.size {
			end.Change(wire.CollectChange{Path: l.path, Listed: l.size, Now: size})
		}
		if size >= 0 {
			end.Files++
			end.Bytes += min(size, l.size)
		}
	}
	return end, nil
}

// sendFile writes the open regular file f as the entry name, with its
// size (at most max, when max >= 0) and permissions at the time it is
// sent, and returns that size: -1 when f is no longer a regular file (it
// is not sent). A file that shrank while it was read is padded to keep
// the stream whole and reported.
func sendFile(tw *tar.Writer, name string, f *os.File, max int64) (int64, error) {
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	if !fi.Mode().IsRegular() {
		return -1, nil // replaced since the walk saw it
	}
	size := fi.Size()
	if max >= 0 {
		size = min(size, max)
	}
	var short error
	r := &shortReader{r: io.LimitReader(f, size), left: size, err: &short, name: name}
	if err := writeEntry(tw, name, fi.Mode().Perm(), size, r); err != nil {
		return 0, err
	}
	return fi.Size(), short
}

// streamError is a failure to write the stream itself, which ends it.
type streamError struct{ err error }

func (e *streamError) Error() string { return e.err.Error() }

// writeEntry writes one regular entry; every error is the stream's.
func writeEntry(tw *tar.Writer, name string, mode fs.FileMode, size int64, r io.Reader) error {
	h := &tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: int64(mode), Size: size, Format: tar.FormatPAX}
	if err := tw.WriteHeader(h); err != nil {
		return &streamError{err}
	}
	if _, err := io.Copy(tw, r); err != nil {
		return &streamError{err}
	}
	return nil
}

// shortReader reads left bytes from r and, when r ends early (the file
// shrank) or fails, zeros for the rest, recording the failure in err.
type shortReader struct {
	r    io.Reader
	left int64
	err  *error
	name string
}

func (s *shortReader) Read(p []byte) (int, error) {
	if s.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > s.left {
		p = p[:s.left]
	}
	n := 0
	if *s.err == nil {
		var err error
		n, err = s.r.Read(p)
		if err != nil && (n == 0 || !errors.Is(err, io.EOF)) {
			*s.err = fmt.Errorf("%s changed while it was sent: %v", s.name, err)
			if errors.Is(err, io.EOF) {
				*s.err = fmt.Errorf("%s shrank while it was sent", s.name)
			}
		}
	}
	if *s.err != nil && n == 0 {
		clear(p)
		n = len(p)
	}
	s.left -= int64(n)
	return n, nil
}
