// Package logrotate rotates the detached controller's dispatch.log by
// size. The log is the process's own stdout and stderr (a panic, a
// library's print go there too), so a rotation renames the files and
// points those descriptors at the new log (dup2): no process holds the
// old file open and writes into it after the rename.
package logrotate

import (
	"fmt"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// File is a log rotated by size: once a write would take it over its
// maximum, path is renamed path.1 (path.1 path.2, …, keeping Keep old
// logs) and a new path is opened in its place.
type File struct {
	path string
	keep int
	// out is where writes go: a file whose descriptor is one of fds.
	out *os.File
	fds []int

	// mu guards max and serializes writes with rotations.
	mu  sync.Mutex
	max int64
}

// New returns the log at path, written through out, rotated when over
// max bytes with keep old logs; on rotation every descriptor of fds is
// pointed at the new file (out's among them).
func New(path string, max int64, keep int, out *os.File, fds ...int) *File {
	return &File{path: path, keep: keep, out: out, fds: fds, max: max}
}

// SetMax sets the size at which the log is rotated (nodes.yaml's
// log_max_size, known once the configuration is read).
func (f *File) SetMax(n int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if n > 0 {
		f.max = n
	}
}

// Write appends p, rotating first when p would take the log over its
// maximum. A rotation that fails is reported in the log it leaves, which
// goes on.
func (f *File) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if fi, err := f.out.Stat(); err == nil && fi.Size() > 0 && fi.Size()+int64(len(p)) > f.max {
		if err := f.rotate(); err != nil {
			fmt.Fprintf(f.out, "dispatch: rotate %s: %v\n", f.path, err)
		}
	}
	return f.out.Write(p)
}

// rotate shifts path.1…path.keep-1 up by one, renames path to path.1 and
// points the descriptors at a new path.
func (f *File) rotate() error {
	for i := f.keep - 1; i >= 1; i-- {
		if err := os.Rename(fmt.Sprintf("%s.%d", f.path, i), fmt.Sprintf("%s.%d", f.path, i+1)); err != nil && !os.IsNotExist(err) {
			return err
		}
	}
	if err := os.Rename(f.path, f.path+".1"); err != nil && !os.IsNotExist(err) {
		return err
	}
	nf, err := os.OpenFile(f.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer nf.Close()
	for _, fd := range f.fds {
		if err := unix.Dup2(int(nf.Fd()), fd); err != nil {
			return fmt.Errorf("point descriptor %d at the new log: %w", fd, err)
		}
	}
	return nil
}
