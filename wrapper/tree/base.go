package tree

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/taskfiles"
)

// reservedNames are the entries of a task directory that belong to the
// wrapper or to an attempt; a base tree may not be one of them (or lie
// inside one), or moving an attempt aside would move it too.
var reservedNames = []string{
	taskfiles.FileSpec, taskfiles.FileLaunch, taskfiles.FileLock, taskfiles.FilePID, taskfiles.FileStatus, taskfiles.FileHeartbeat,
	taskfiles.FileLog, taskfiles.FileWrapper, taskfiles.FileKill, taskfiles.DirOutput, taskfiles.DirAttempts, wire.InputsDir,
}

// CheckBase rejects a Launch.Base that is not a path strictly inside the
// task directory, or that names one of the wrapper's own entries.
func CheckBase(base string) error {
	if base == "" {
		return nil
	}
	clean := filepath.Clean(base)
	if !filepath.IsLocal(clean) || clean == "." {
		return fmt.Errorf("base %q: want a directory path inside the task directory", base)
	}
	first, _, _ := strings.Cut(clean, string(filepath.Separator))
	for _, name := range reservedNames {
		if first == name {
			return fmt.Errorf("base %q: %s belongs to the wrapper", base, name)
		}
	}
	return nil
}

// CopyTree copies the directory tree at src into the existing directory
// dst: regular files with their permission bits and modification times,
// directories, and symbolic links recreated as links (never followed).
// Other file types (sockets, fifos, devices) are skipped and reported
// through skipped. src itself may be a symbolic link to a directory. stop
// is polled between entries; once it reports true the copy ends with
// ErrStopped.
func CopyTree(src, dst string, stop func() bool, skipped func(path string)) error {
	fi, err := os.Stat(src)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory", src)
	}
	c := treeCopier{stop: stop, skipped: skipped}
	return c.copyDir(src, dst)
}

type treeCopier struct {
	stop    func() bool
	skipped func(path string)
}

// copyDir fills the existing directory dst with the entries of src.
func (c *treeCopier) copyDir(src, dst string) error {
	entries, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if c.stop() {
			return ErrStopped
		}
		from, to := filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())
		switch t := e.Type(); {
		case t.IsDir():
			err = c.copySubdir(from, to)
		case t.IsRegular():
			err = copyFile(from, to)
		case t&fs.ModeSymlink != 0:
			err = copySymlink(from, to)
		default:
			c.skipped(from)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// copySubdir creates dst owner-writable, fills it, and only then gives it
// the mode and time of src, so that a read-only directory can be copied.
func (c *treeCopier) copySubdir(src, dst string) error {
	fi, err := os.Lstat(src)
	if err != nil {
		return err
	}
	if err := os.Mkdir(dst, 0o700); err != nil {
		return err
	}
	if err := c.copyDir(src, dst); err != nil {
		return err
	}
	if err := os.Chmod(dst, fileMode(fi)); err != nil {
		return err
	}
	return os.Chtimes(dst, time.Time{}, fi.ModTime())
}

func copyFile(src, dst string) (err error) {
	// O_NOFOLLOW: the entry was a regular file when listed; if it has been
	// swapped for a link since, fail rather than copy what it points to.
	in, err := os.OpenFile(src, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is no longer a regular file", src)
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := out.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	if _, err := io.Copy(out, in); err != nil {
		return fmt.Errorf("copy %s: %w", src, err)
	}
	// Chmod, not the mode given to OpenFile, so the umask does not apply.
	if err := out.Chmod(fileMode(fi)); err != nil {
		return err
	}
	return os.Chtimes(dst, time.Time{}, fi.ModTime())
}

func copySymlink(src, dst string) error {
	target, err := os.Readlink(src)
	if err != nil {
		return err
	}
	return os.Symlink(target, dst)
}

// fileMode keeps the permission, setuid, setgid and sticky bits of fi.
func fileMode(fi fs.FileInfo) fs.FileMode {
	return fi.Mode() & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
}

// ErrStopped is returned by CopyTree, and by the supervisor's startChild,
// once a stop has been asked for, so that nothing new starts after a kill
// or a timeout.
var ErrStopped = errors.New("attempt is stopping")
