package taskfiles

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/dispatch-tool/dispatch/wire"
)

// Names of the files in a task directory.
const (
	FileSpec      = "spec.md"
	FileLaunch    = "launch.json"
	FileLock      = "lock"
	FilePID       = "pid"
	FileStatus    = "status.json"
	FileHeartbeat = "heartbeat"
	FileLog       = "task.log"
	FileWrapper   = "wrapper.log"
	FileKill      = "kill.json"
	DirOutput     = "output"
	DirAttempts   = "attempts"
	// DirTmp is the tool's TMPDIR, emptied at the start of each attempt.
	DirTmp = "tmp"
	// DirHome is the tool's private HOME in the sandbox.
	DirHome = "home"
	// DirGate is the fresh copy of the result the gate runs in, made
	// again for every gate run (whatever the tool left there is gone).
	DirGate = "gate"
	// DirGateHome and DirGateTmp are the gate's HOME (sandboxed) and
	// TMPDIR, made afresh for every gate run: what the tool left in its
	// own (a go env file, a pip or npm config) would decide the gate's
	// verdict.
	DirGateHome = "gate-home"
	DirGateTmp  = "gate-tmp"
	// OldTmpSuffix names an earlier attempt's tmp/ moved aside for removal.
	OldTmpSuffix = ".old."
)

// WriteFileAtomic replaces path with data so that readers see either the old
// or the new content, never a mix: temp file in the same directory, then
// rename. Nothing is synced to disk: a node that loses power loses its
// running attempts anyway (the controller finds them dead and runs them
// again), and syncing every bookkeeping file (spec, launch, pid, record,
// heartbeat, each status) cost several journal commits per attempt, the
// largest share of a launch on a busy node. The one write that must
// survive a crash is an attempt's final status: see WriteStatusDurable.
func WriteFileAtomic(path string, data []byte, perm os.FileMode) error {
	return writeFile(path, data, perm, false)
}

// writeFile is WriteFileAtomic; with durable, the content and the rename
// are synced to disk before it returns. It calls the kernel directly: an
// *os.File would try to add each file to the runtime's poller (five
// futile calls a file) and os.Rename stats the target first (for a case
// of directories, never ours); on a busy node these were a third of the
// calls of an attempt's bookkeeping.
func writeFile(path string, data []byte, perm os.FileMode, durable bool) error {
	dir := filepath.Dir(path)
	tmp, fd, err := createTemp(dir, "."+filepath.Base(path)+".tmp")
	if err != nil {
		return fmt.Errorf("create temp file for %s: %w", path, err)
	}
	fail := func(err error) error {
		syscall.Close(fd)
		syscall.Unlink(tmp)
		return err
	}
	if err := writeAll(fd, data); err != nil {
		return fail(fmt.Errorf("write %s: %w", tmp, err))
	}
	if err := IgnoringEINTR(func() error { return syscall.Fchmod(fd, uint32(perm.Perm())) }); err != nil {
		return fail(fmt.Errorf("chmod %s: %w", tmp, err))
	}
	if !durable {
		if err := syscall.Close(fd); err != nil {
			syscall.Unlink(tmp)
			return fmt.Errorf("close %s: %w", tmp, err)
		}
	}
	if err := IgnoringEINTR(func() error { return sysRename(tmp, path) }); err != nil {
		if durable {
			syscall.Close(fd)
		}
		syscall.Unlink(tmp)
		return fmt.Errorf("rename %s: %w", tmp, &os.LinkError{Op: "rename", Old: tmp, New: path, Err: err})
	}
	if durable {
		// Synced after the rename: readers (the node's status stream, the
		// controller) see the new content at once, and the disk has it a
		// moment later, however busy the disk is. The rename itself is
		// durable once the directory is synced. A failure here loses
		// nothing readers can see, so it is not reported.
		fsync(fd)
		syscall.Close(fd)
		if d, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0); err == nil {
			fsync(d)
			syscall.Close(d)
		}
	}
	return nil
}

// createTemp makes a new file prefix<random> in dir, open for writing,
// mode 0600, as os.CreateTemp does, and returns its path and descriptor.
func createTemp(dir, prefix string) (string, int, error) {
	for try := 0; ; try++ {
		path := filepath.Join(dir, prefix+strconv.FormatUint(uint64(rand.Uint32()), 10))
		fd, err := syscall.Open(path, syscall.O_RDWR|syscall.O_CREAT|syscall.O_EXCL|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
		if err == nil {
			return path, fd, nil
		}
		if err == syscall.EINTR || err == syscall.EEXIST && try < 10000 {
			continue
		}
		return "", -1, &os.PathError{Op: "open", Path: path, Err: err}
	}
}

// writeAll writes data to fd, all of it.
func writeAll(fd int, data []byte) error {
	for len(data) > 0 {
		n, err := syscall.Write(fd, data)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		data = data[n:]
	}
	return nil
}

// The kernel's calls that WriteFileAtomic and CreateTaskLog make, each
// retried when a signal interrupts it (as os's calls are: a network or FUSE
// file system can return EINTR even to a handler that asks for restarts).
// Variables so that a test can interrupt them.
var (
	sysRename = syscall.Rename
	sysOpen   = syscall.Open
)

// IgnoringEINTR calls fn until it is not interrupted: a raw call of the
// kernel, which os would have retried.
func IgnoringEINTR(fn func() error) error {
	for {
		if err := fn(); err != syscall.EINTR {
			return err
		}
	}
}

func WriteJSONAtomic(path string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s: %w", filepath.Base(path), err)
	}
	return WriteFileAtomic(path, append(data, '\n'), 0o644)
}

// WriteStatusDurable writes an attempt's final status and syncs it: once
// the database records the attempt as ended, nothing runs it again, so its
// status must not come back empty or older after a crash of the node
// (collection would find "no files of this attempt" and keep nothing).
func WriteStatusDurable(dir string, st *wire.Status) error {
	data, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("encode %s: %w", FileStatus, err)
	}
	return writeFile(filepath.Join(dir, FileStatus), append(data, '\n'), 0o644, true)
}

// ReadStatus reads D/status.json. A missing file gives an error satisfying
// errors.Is(err, os.ErrNotExist).
func ReadStatus(dir string) (*wire.Status, error) {
	st, _, err := ReadStatusVersion(dir)
	return st, err
}

// FileVersion identifies one version of a file: a rename replaces its
// inode, a write changes its size or modification time (in nanoseconds).
type FileVersion struct {
	Ino, Size, Mtime int64
}

// ReadStatusVersion is ReadStatus that also says which version of
// status.json it read, from the open file (the zero value when none was
// opened): what a reader probed before may belong to an older one.
func ReadStatusVersion(dir string) (*wire.Status, FileVersion, error) {
	data, v, err := readControlVersion(filepath.Join(dir, FileStatus), MaxControlFile)
	if err != nil {
		return nil, v, err
	}
	var st wire.Status
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, v, fmt.Errorf("parse %s: %w", FileStatus, err)
	}
	if st.Status == "" {
		return nil, v, fmt.Errorf("parse %s: no status field", FileStatus)
	}
	return &st, v, nil
}

// MaxControlFile caps what the wrapper reads of one control file.
const MaxControlFile = 64 << 10

// OpenControlFile opens a file of a task directory, which the task itself
// may have replaced with anything: it never follows a symbolic link in the
// last component, never blocks (a FIFO), and accepts regular files only.
func OpenControlFile(path string, flag int) (*os.File, error) {
	fd, err := openControl(path, flag)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), path), nil
}

// openControl is OpenControlFile's descriptor, opened by the kernel's
// call: a control file read and closed at once needs no *os.File (the
// runtime tries to add each to its poller).
func openControl(path string, flag int) (int, error) {
	fd, _, err := openControlStat(path, flag)
	return fd, err
}

// openControlStat is openControl that also returns the file's fstat.
func openControlStat(path string, flag int) (int, syscall.Stat_t, error) {
	var st syscall.Stat_t
	var fd int
	var err error
	for {
		fd, err = syscall.Open(path, flag|syscall.O_NONBLOCK|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o644)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		if err == syscall.ELOOP {
			return -1, st, fmt.Errorf("%s is a symbolic link, not a regular file", filepath.Base(path))
		}
		return -1, st, &os.PathError{Op: "open", Path: path, Err: err}
	}
	if err := syscall.Fstat(fd, &st); err != nil {
		syscall.Close(fd)
		return -1, st, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		syscall.Close(fd)
		return -1, st, fmt.Errorf("%s is not a regular file (%s)", filepath.Base(path), modeType(uint32(st.Mode)))
	}
	return fd, st, nil
}

// modeType is the type bits of a stat mode as os.FileMode says them.
func modeType(mode uint32) os.FileMode {
	switch mode & syscall.S_IFMT {
	case syscall.S_IFDIR:
		return os.ModeDir
	case syscall.S_IFLNK:
		return os.ModeSymlink
	case syscall.S_IFIFO:
		return os.ModeNamedPipe
	case syscall.S_IFSOCK:
		return os.ModeSocket
	case syscall.S_IFCHR:
		return os.ModeDevice | os.ModeCharDevice
	case syscall.S_IFBLK:
		return os.ModeDevice
	}
	return os.ModeIrregular
}

// ReadControlFile reads a control file (see OpenControlFile) of at most
// MaxControlFile bytes; a larger one is an error, not read.
func ReadControlFile(path string) ([]byte, error) {
	return ReadControlFileMax(path, MaxControlFile)
}

// MaxLaunchFile caps what the wrapper reads of launch.json: a gate's known
// results and a retry's gate output make it larger than the other
// control files (the controller keeps it under 512 KiB, see
// controller.gateLaunch).
const MaxLaunchFile = 1 << 20

// MaxRecordFile caps what the wrapper reads of a private process record,
// which holds a gate's output tail (wire.GateTailBytes, six times that
// JSON-escaped at worst).
const MaxRecordFile = 1 << 20

// ReadControlFileMax is ReadControlFile with a cap of its own.
func ReadControlFileMax(path string, limit int) ([]byte, error) {
	data, _, err := readControlVersion(path, limit)
	return data, err
}

// readControlVersion is ReadControlFileMax that also says which version
// of the file it opened (zero when it opened none).
func readControlVersion(path string, limit int) ([]byte, FileVersion, error) {
	fd, st, err := openControlStat(path, os.O_RDONLY)
	if err != nil {
		return nil, FileVersion{}, err
	}
	defer syscall.Close(fd)
	v := FileVersion{Ino: int64(st.Ino), Size: st.Size, Mtime: statMtime(&st)}
	data, err := readAllMax(fd, limit+1)
	if err != nil {
		return nil, v, &os.PathError{Op: "read", Path: path, Err: err}
	}
	if len(data) > limit {
		return nil, v, fmt.Errorf("%s is larger than %d KiB", filepath.Base(path), limit>>10)
	}
	return data, v, nil
}

// readAllMax reads fd, a regular file, to its end, or max bytes. A read
// shorter than asked is the end (a regular file's), without the read of
// nothing that tells it otherwise.
func readAllMax(fd, max int) ([]byte, error) {
	buf := make([]byte, min(max, 512))
	n := 0
	for n < max {
		if n == len(buf) {
			buf = append(buf, make([]byte, min(len(buf), max-len(buf)))...)
		}
		k, err := syscall.Read(fd, buf[n:])
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		short := k < len(buf)-n
		n += k
		if k == 0 || short {
			break
		}
	}
	return buf[:n], nil
}

// ExpandPath resolves a leading "~/" to the home directory and makes the path
// absolute, because the supervisor runs with "/" as its working directory.
func ExpandPath(p string) (string, error) {
	if p == "~" || strings.HasPrefix(p, "~/") {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("expand %s: %w", p, err)
		}
		p = filepath.Join(home, strings.TrimPrefix(p[1:], "/"))
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", fmt.Errorf("resolve %s: %w", p, err)
	}
	return abs, nil
}

func flock(f *os.File, how int) error {
	return flockFD(int(f.Fd()), how)
}

func flockFD(fd, how int) error {
	for {
		err := syscall.Flock(fd, how)
		if err != syscall.EINTR {
			return err
		}
	}
}

// LockTask takes D/lock exclusively for the life of the returned file. The
// file is close-on-exec (os.OpenFile sets O_CLOEXEC), so the tool never holds
// the lock. Short-lived shared locks taken by `status` probes can make a
// non-blocking attempt fail, so it retries for up to wait before reporting
// the lock as held.
func LockTask(dir string, wait time.Duration) (*os.File, bool, error) {
	path := filepath.Join(dir, FileLock)
	f, err := OpenControlFile(path, os.O_RDWR|os.O_CREATE)
	if err != nil {
		return nil, false, fmt.Errorf("open lock: %w", err)
	}
	deadline := time.Now().Add(wait)
	for {
		err := flock(f, syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return f, true, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, false, fmt.Errorf("lock %s: %w", path, err)
		}
		if time.Now().After(deadline) {
			f.Close()
			return nil, false, nil
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// SupervisorAlive reports whether a supervisor holds D/lock. A shared
// non-blocking lock succeeds only when nobody holds it exclusively.
func SupervisorAlive(dir string) (bool, error) {
	fd, err := openControl(filepath.Join(dir, FileLock), os.O_RDONLY)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return false, nil
		}
		return false, fmt.Errorf("open lock: %w", err)
	}
	defer syscall.Close(fd)
	err = flockFD(fd, syscall.LOCK_SH|syscall.LOCK_NB)
	if err == nil {
		return false, nil
	}
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return true, nil
	}
	return false, fmt.Errorf("probe lock: %w", err)
}

// DiskFree reports the space available to unprivileged users on the file
// system holding path, or on its nearest existing parent.
func DiskFree(path string) int64 {
	for {
		var st syscall.Statfs_t
		if err := syscall.Statfs(path, &st); err == nil {
			return int64(st.Bavail) * int64(st.Bsize)
		}
		parent := filepath.Dir(path)
		if parent == path {
			return 0
		}
		path = parent
	}
}
