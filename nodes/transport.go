package nodes

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"path"
	"strings"
	"time"
)

// Transport is how the controller reaches one node: the local machine or an SSH
// host. Paths are absolute, '/'-separated paths on the node; a relative path is an
// error (expand "~" first with ExpandHome). A Transport is safe for concurrent use
// by multiple goroutines.
type Transport interface {
	// Home returns the absolute home directory of the user the node runs tasks as.
	// "~/x" in a work_dir means Home()+"/x".
	Home(ctx context.Context) (string, error)

	// Exec runs argv[0] with the arguments argv[1:] passed verbatim: no shell sees
	// them on the local node, and over SSH every argument is quoted for the remote
	// POSIX shell. stdin is fed to the command (nil means empty input). Stdout and
	// Stderr are captured whole up to MaxExecOutput each; a command that prints
	// more is killed and Exec returns an error wrapping ErrOutputTooLarge, so
	// no node can fill the controller's memory. A non-zero exit is not an error: it is reported in
	// Result.ExitCode (128+N when the command died of signal N; 127 when the
	// command does not exist, 126 when it is not executable). err is for failing
	// to reach the node or start anything there, or for ctx ending first, in which case the command
	// is killed and err wraps ctx.Err(). Exec returns once the command has exited,
	// even if it left a child running: at once when the child's stdio is
	// redirected, after a short delay (output after it is lost) when the child
	// still holds the command's stdout or stderr.
	Exec(ctx context.Context, argv []string, stdin []byte) (Result, error)

	// Stream runs argv, quoted as Exec quotes it, with its stdin held open,
	// and hands each line it prints on stdout (without the newline) to
	// onLine, in order, until the command exits, ctx ends or onLine returns
	// false. Then it closes the command's stdin, ends the command and
	// returns. A line longer than MaxStreamLine ends the stream with an
	// error. err is nil only when onLine ended the stream; a stream ended
	// by ctx returns an error wrapping ctx's.
	Stream(ctx context.Context, argv []string, onLine func(line []byte) bool) error

	// Put writes the content of r to path with permissions mode, creating missing
	// parent directories private to the node user (0700, whatever the umask). The write is atomic: content goes to a temporary name in
	// the same directory, which is renamed over path only once complete, so readers
	// see the old file or the new one and a failed Put leaves neither a partial file
	// nor the temporary behind. Put replaces a read-only file. Put has no
	// deadline of its own; PutIdle bounds it by progress.
	Put(ctx context.Context, path string, r io.Reader, mode fs.FileMode) error

	// Get copies the content of the file at path to w. A missing file is an error
	// wrapping fs.ErrNotExist. Only a regular file is read: a symbolic link (the
	// last component of path is never followed), a FIFO or a device is an
	// error. Get has no deadline of its own; GetIdle bounds it by progress.
	Get(ctx context.Context, path string, w io.Writer) error

	// Walk lists the regular files and symbolic links under dir, recursively, sorted
	// by Path. Paths are '/'-separated and relative to dir. Symbolic links are
	// reported with Mode&fs.ModeSymlink set and are not followed; directories and
	// other special files are not reported. A missing dir is an error wrapping
	// fs.ErrNotExist; a dir that is a symbolic link (even to a directory) is an
	// error, never followed.
	Walk(ctx context.Context, dir string) ([]FileInfo, error)

	// Lstat describes path without following a final symbolic link: the uid
	// that owns it, its mode (type and permission bits) and its size. A
	// missing path is an error wrapping fs.ErrNotExist.
	Lstat(ctx context.Context, path string) (Stat, error)

	// UID returns the uid the node runs commands and tasks as.
	UID(ctx context.Context) (int, error)

	// Remove removes the file or the whole directory tree at path, including
	// read-only directories inside it. A missing path is not an error. Removing "/"
	// is refused.
	Remove(ctx context.Context, path string) error

	// Close releases the connection, if any. Calling it more than once is allowed
	// and returns nil after the first call. No other method may be called after it.
	Close() error
}

// Hearer is implemented by transports that keep a connection open and
// watch it (SSH keepalives): they know how long their node has been silent.
type Hearer interface {
	// Silence returns how long ago the node last sent anything (zero when
	// nothing was ever received), and whether the transport has given the
	// node up for that silence: its connection dropped after keepalives went
	// unanswered, and no new one made since. A node given up is offline from
	// its last word, whatever a call started now finds.
	Silence() (since time.Duration, gaveUp bool)
}

// Stat is what Transport.Lstat reports of a path.
type Stat struct {
	UID  int
	Mode fs.FileMode
	Size int64 // bytes, as the node reports it
}

// Result is the outcome of a command run by Transport.Exec.
type Result struct {
	Stdout   []byte
	Stderr   []byte
	ExitCode int
}

// FileInfo describes one entry reported by Transport.Walk.
type FileInfo struct {
	Path string // relative to the walked directory, '/'-separated
	Size int64
	Mode fs.FileMode
}

// ErrUnreachable is wrapped by transport errors that mean the node could not be
// reached at all (refused, timed out, connection lost), as opposed to a command
// or file operation failing on a reachable node.
var ErrUnreachable = errors.New("node unreachable")

// UnreachableError is a failure to reach a node. Its message leads with the
// node and the cause ("node bx1 unreachable: lookup bx1: no such host"),
// then where and while doing what: an operator reads the cause first, not
// after a chain of what dispatch was doing. It wraps ErrUnreachable and Err.
type UnreachableError struct {
	Node  string // the node's name in nodes.yaml
	Addr  string // user@host:port dialled; may be empty
	Err   error  // the cause
	While string // what dispatch was doing ("resolving work_dir ~/dispatch"); may be empty
}

func (e *UnreachableError) Error() string {
	cause := e.Err.Error()
	// "dial tcp 127.0.0.1:22: connect: connection refused": the address
	// is in Addr; the cause is what follows it.
	var oe *net.OpError
	if errors.As(e.Err, &oe) && oe.Op == "dial" && oe.Err != nil {
		cause = strings.Replace(cause, oe.Error(), oe.Err.Error(), 1)
	}
	// A cause that names its fix keeps it last.
	cause, fix, hasFix := strings.Cut(cause, "\n  fix: ")
	var where []string
	if e.Addr != "" {
		where = append(where, "ssh "+e.Addr)
	}
	if e.While != "" {
		where = append(where, "while "+e.While)
	}
	msg := fmt.Sprintf("node %s unreachable: %s", e.Node, cause)
	if len(where) > 0 {
		msg += " (" + strings.Join(where, ", ") + ")"
	}
	if hasFix {
		msg += "\n  fix: " + fix
	}
	return msg
}

func (e *UnreachableError) Unwrap() []error { return []error{ErrUnreachable, e.Err} }

// CauseFirst returns err with a node's unreachability, wrapped in what
// dispatch was doing ("resolve work_dir ~/dispatch: expand ~/dispatch:
// node bx1 unreachable: ..."), turned around: the node and the cause first,
// what dispatch was doing after it. Other errors are returned as they are.
func CauseFirst(err error) error {
	var ue *UnreachableError
	if err == nil || !errors.As(err, &ue) {
		return err
	}
	outer, ok := strings.CutSuffix(err.Error(), ": "+ue.Error())
	if i := strings.LastIndex(outer, "\n"); i >= 0 {
		return err // the outer text is not one line of context
	}
	if !ok || outer == "" {
		return err
	}
	turned := *ue
	if turned.While != "" {
		outer += ", " + turned.While
	}
	turned.While = outer
	return &turned
}

// ExpandHome turns "~" and "~/..." into absolute paths on the node using t.Home.
// Absolute paths are returned cleaned. "~user" forms and relative paths are
// errors, since no transport method accepts them.
func ExpandHome(ctx context.Context, t Transport, p string) (string, error) {
	switch {
	case p == "~" || strings.HasPrefix(p, "~/"):
		home, err := t.Home(ctx)
		if errors.Is(err, ErrUnreachable) {
			return "", err // the node, not the path, is the problem
		}
		if err != nil {
			return "", fmt.Errorf("expand %s: %w", p, err)
		}
		return path.Join(home, p[1:]), nil
	case strings.HasPrefix(p, "~"):
		return "", fmt.Errorf("expand %s: only ~ and ~/ are supported, not ~user", p)
	case path.IsAbs(p):
		return path.Clean(p), nil
	default:
		return "", fmt.Errorf("expand %q: path must be absolute or start with ~/", p)
	}
}

// ErrNotFollowed is wrapped by the error of a Get or a Walk refused because
// its path is a symbolic link or a special file (FIFO, device), which are
// never followed or read.
var ErrNotFollowed = errors.New("not a regular file or directory")

// RegularFile refuses what Get must not read: a symbolic link, a FIFO, a
// device, a directory.
func RegularFile(fi fs.FileInfo) error {
	switch m := fi.Mode(); {
	case m&fs.ModeSymlink != 0:
		return fmt.Errorf("%w: a symbolic link", ErrNotFollowed)
	case !m.IsRegular():
		return fmt.Errorf("%w: %s", ErrNotFollowed, m.Type())
	}
	return nil
}

// WalkRoot refuses a Walk root that is not a directory itself: a symbolic
// link to one (an output/ a task replaced by a link to ~) is never followed.
func WalkRoot(fi fs.FileInfo) error {
	switch m := fi.Mode(); {
	case m&fs.ModeSymlink != 0:
		return fmt.Errorf("%w: a symbolic link, not a directory", ErrNotFollowed)
	case !m.IsDir():
		return fmt.Errorf("%w: not a directory", ErrNotFollowed)
	}
	return nil
}
