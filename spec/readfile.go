package spec

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// ErrNotRegular is ReadFile's error for a FIFO, device, socket or
// directory.
var ErrNotRegular = errors.New("not a regular file")

// TooLargeError is ReadFile's error for a file over its limit.
type TooLargeError struct {
	Limit int64
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("file is larger than %s", SizeString(e.Limit))
}

// SizeString writes a byte count as the operator would: 8 MiB, 64 KiB.
func SizeString(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

// ReadFile reads the regular file at path, at most limit bytes of it. It
// opens the file without blocking, so that a FIFO put in its place is
// reported (ErrNotRegular) instead of hanging the reader, and checks the
// type of what it opened, not of what a check before the open saw. A file
// over limit yields *TooLargeError without reading more than limit+1 bytes.
func ReadFile(path string, limit int64) ([]byte, error) {
	f, err := os.OpenFile(path, openReadFlags, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readOpened(f, limit)
}

// readOpened reads f, just opened without blocking, as ReadFile does:
// only a regular file, at most limit bytes.
func readOpened(f *os.File, limit int64) ([]byte, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, ErrNotRegular
	}
	if fi.Size() > limit {
		return nil, &TooLargeError{Limit: limit}
	}
	// Sized from the file, with one byte more to see it grew meanwhile:
	// io.ReadAll would grow its buffer by doubling.
	raw := make([]byte, 0, min(fi.Size(), limit)+1)
	for {
		n, err := f.Read(raw[len(raw):cap(raw)])
		raw = raw[:len(raw)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		if len(raw) == cap(raw) {
			if int64(len(raw)) > limit {
				break
			}
			raw = append(raw, 0)[:len(raw)]
		}
	}
	if int64(len(raw)) > limit {
		return nil, &TooLargeError{Limit: limit}
	}
	return raw, nil
}

// testHookChecked, when set, runs after a file of the specs directory is
// checked and before it is opened: tests swap the file there.
var testHookChecked func(path string)

// errBecameLink is openChecked's error for a file that was no symbolic
// link when checked and is one when opened.
var errBecameLink = errors.New("became a symbolic link while dispatch was reading it")

// outsideError is openChecked's error for a symbolic link that resolves
// outside the project and the specs directory.
type outsideError struct{ resolved string }

func (e *outsideError) Error() string {
	return "symbolic link to " + e.resolved + ", outside the specs directory"
}

// changedError is openChecked's error when a link's resolved path, checked
// inside, cannot be opened inside any more: a part of it was removed or
// became a link out since.
type changedError struct{ err error }

func (e *changedError) Error() string {
	return "changed while dispatch was reading it (" + e.err.Error() + ")"
}

// readChecked reads path, a file of the specs directory whose Lstat is fi,
// with what openChecked opened: a regular file of at most maxFileSize.
func (l *loader) readChecked(path string, fi fs.FileInfo) ([]byte, error) {
	f, err := l.openChecked(path, fi)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readOpened(f, maxFileSize)
}

// openChecked opens path, whose Lstat is fi, so that what is read is what
// was checked, whoever writes the specs directory meanwhile. A file of the
// project directory that is no link is opened with O_NOFOLLOW: a link put
// in its place is refused, not followed (errBecameLink). Any other path is
// resolved and judged as within does, then opened by its resolved path
// relative to the root it was found in (os.Root): a part of that path
// swapped for a link out of the root is refused (*changedError). Neither
// open blocks on a FIFO; the caller checks the type of what was opened.
func (l *loader) openChecked(path string, fi fs.FileInfo) (*os.File, error) {
	abs := l.absPath(path)
	if l.plain(abs, fi) {
		if testHookChecked != nil {
			testHookChecked(path)
		}
		f, err := os.OpenFile(path, openNoFollowFlags, 0)
		switch {
		case isLinkErr(err):
			return nil, errBecameLink
		case errors.Is(err, fs.ErrNotExist):
			return nil, &changedError{err: err}
		}
		return f, err
	}
	root, rel, resolved, err := l.resolve(abs)
	if err != nil {
		return nil, err
	}
	if root == "" {
		return nil, &outsideError{resolved: resolved}
	}
	if testHookChecked != nil {
		testHookChecked(path)
	}
	r, err := os.OpenRoot(root)
	if err != nil {
		return nil, &changedError{err: err}
	}
	defer r.Close()
	f, err := r.OpenFile(rel, openReadFlags, 0)
	switch {
	case errors.Is(err, fs.ErrPermission):
		// os.Root opens each directory on the way, which takes read
		// permission where a path needs search only (a directory of
		// mode 0711): such a path is opened by name, its last component
		// not followed (the directories on the way were resolved at the
		// check; one swapped meanwhile is followed, as before os.Root).
		f, err = os.OpenFile(filepath.Join(root, rel), openNoFollowFlags, 0)
		if isLinkErr(err) {
			return nil, errBecameLink
		}
		return f, err
	case err != nil:
		return nil, &changedError{err: err}
	}
	return f, nil
}

// plain reports whether abs, whose Lstat is fi (nil: unknown), is a file of
// the project directory that is no link: inside it, whatever the
// directory resolves to. Resolving every spec's path and the two roots
// again cost 15 lstats a spec at Load and as many at each Snapshot (5 % of
// the controller's CPU for 200 no-op tasks, issue 35).
func (l *loader) plain(abs string, fi fs.FileInfo) bool {
	return fi != nil && filepath.Dir(abs) == l.abs && fi.Mode()&fs.ModeSymlink == 0
}

// resolve follows the links of abs and finds the root it stays in: the
// specs directory, else the project directory (which may be a link out of
// it), both resolved; rel is the resolved path relative to root. root is
// "" when the path leaves both.
func (l *loader) resolve(abs string) (root, rel, resolved string, err error) {
	resolved, err = evalSymlinks(abs)
	if err != nil {
		return "", "", "", err
	}
	var roots []string
	for _, d := range []string{filepath.Dir(l.abs), l.abs} {
		if r, err := evalSymlinks(d); err == nil {
			roots = append(roots, r)
		}
	}
	for _, r := range roots {
		if rel, err := filepath.Rel(r, resolved); err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			return r, rel, resolved, nil
		}
	}
	return "", "", resolved, nil
}

// outsideProblem is the message and fix for a link to resolved, outside
// the specs directory.
func (l *loader) outsideProblem(resolved string) (msg, fix string) {
	return fmt.Sprintf("is a symbolic link to %s, outside the specs directory %s", resolved, filepath.Dir(l.dir)),
		fmt.Sprintf("copy what it needs into %s instead of linking to it: dispatch sends the project's files to the nodes", l.dir)
}

// changedFix is the fix for a file that changed between its check and its
// read.
func (l *loader) changedFix() string {
	return fmt.Sprintf("run the command again once the specs directory stops changing; a spec that is a symbolic link must point inside %s", filepath.Dir(l.dir))
}
