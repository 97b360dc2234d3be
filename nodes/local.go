//go:build unix

package nodes

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"syscall"
	"time"
)

// execWaitDelay bounds how long Exec waits for the command's output pipes to close
// after the command itself has exited (or been killed): a child that inherited
// the pipes must not keep Exec blocked.
const execWaitDelay = 2 * time.Second

// Local is the Transport of the machine the controller runs on (a node with
// `ssh: null`). It needs no connection; Close does nothing.
type Local struct{}

var (
	_ Transport = (*Local)(nil)
	_ Converser = (*Local)(nil)
)

// NewLocal returns the transport of the local machine.
func NewLocal() *Local { return &Local{} }

// Home returns $HOME (os.UserHomeDir), which must be absolute.
func (l *Local) Home(ctx context.Context) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("home directory: %w", err)
	}
	if !filepath.IsAbs(home) {
		return "", fmt.Errorf("home directory %q is not absolute", home)
	}
	return filepath.Clean(home), nil
}

// Exec runs argv with os/exec, without a shell. The command runs in its own
// process group, so a terminal's Ctrl-C reaches the controller (which then
// cancels ctx) rather than the command, and cancelling ctx kills the whole group.
func (l *Local) Exec(ctx context.Context, argv []string, stdin []byte) (Result, error) {
	var in io.Reader
	if stdin != nil {
		in = bytes.NewReader(stdin)
	}
	return l.ExecFrom(ctx, argv, in)
}

// ExecFrom is Exec with the command's stdin copied from r as it runs (nil
// for none).
func (l *Local) ExecFrom(ctx context.Context, argv []string, stdin io.Reader) (Result, error) {
	if len(argv) == 0 || argv[0] == "" {
		return Result{}, errors.New("exec: empty command")
	}
	if err := ctx.Err(); err != nil {
		return Result{}, fmt.Errorf("exec %s: %w", argv[0], err)
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	if stdin != nil {
		cmd.Stdin = stdin
	}
	// Output past MaxExecOutput kills the command's group (writes only
	// happen once it has started, so Process is set).
	kill := func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	stdout, stderr := NewCappedBuffer(MaxExecOutput, kill), NewCappedBuffer(MaxExecOutput, kill)
	cmd.Stdout = stdout
	cmd.Stderr = stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		// The group id is the pid (Setpgid); kill the group, then the leader in
		// case the group is already gone.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		return cmd.Process.Kill()
	}
	cmd.WaitDelay = execWaitDelay

	err := cmd.Run()
	res := Result{Stdout: stdout.Bytes(), Stderr: stderr.Bytes()}
	if err != nil && ctx.Err() != nil {
		return res, fmt.Errorf("exec %s: %w", argv[0], ctx.Err())
	}
	if stdout.Overflowed() || stderr.Overflowed() {
		return Result{}, fmt.Errorf("exec %s: %w: it printed more than %d MiB and was killed", argv[0], ErrOutputTooLarge, MaxExecOutput>>20)
	}
	if cmd.ProcessState == nil {
		// A command that cannot be started is reported the way a remote
		// shell reports it (127 not found, 126 not executable), so callers
		// see the same result from every transport.
		switch {
		case errors.Is(err, fs.ErrNotExist) || errors.Is(err, exec.ErrNotFound) || errors.Is(err, syscall.ENOTDIR):
			res.ExitCode, res.Stderr = 127, []byte(err.Error()+"\n")
			return res, nil
		case errors.Is(err, fs.ErrPermission):
			res.ExitCode, res.Stderr = 126, []byte(err.Error()+"\n")
			return res, nil
		}
		return res, fmt.Errorf("exec %s: %w", argv[0], err)
	}
	// ErrWaitDelay (a child kept the pipes open after the command exited) and
	// ExitError both mean the command ran; its status is in ProcessState.
	var exitErr *exec.ExitError
	if err != nil && !errors.Is(err, exec.ErrWaitDelay) && !errors.As(err, &exitErr) {
		return res, fmt.Errorf("exec %s: %w", argv[0], err)
	}
	res.ExitCode = exitCode(cmd.ProcessState)
	return res, nil
}

// exitCode follows the shell convention, 128+N for death by signal N, so that a
// local command and one run by a remote shell report the same code.
func exitCode(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

// Put writes r to a temporary file next to p, syncs it, sets mode and renames it
// over p.
func (l *Local) Put(ctx context.Context, p string, r io.Reader, mode fs.FileMode) (err error) {
	if err := CheckPath(p); err != nil {
		return fmt.Errorf("put: %w", err)
	}
	defer func() {
		if err != nil {
			err = fmt.Errorf("put %s: %w", p, err)
		}
	}()
	if err := ctx.Err(); err != nil {
		return err
	}
	p = path.Clean(p)
	dir, base := path.Split(p)
	if err := mkdirPrivate(dir); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()
	if _, err := io.Copy(f, ctxReader{ctx, r}); err != nil {
		return err
	}
	// Chmod rather than CreateTemp's mode: the umask must not change what the
	// controller asked for (e.g. 0444 for spec.md, 0755 for the wrapper).
	if err := f.Chmod(mode.Perm()); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, p)
}

// Get copies the file at p to w.
func (l *Local) Get(ctx context.Context, p string, w io.Writer) error {
	if err := CheckPath(p); err != nil {
		return fmt.Errorf("get: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("get %s: %w", p, err)
	}
	// O_NOFOLLOW: a symbolic link a task left (to ~/.ssh/id_ed25519, say)
	// is refused, not read; O_NONBLOCK: opening a FIFO does not wait for a
	// writer. Both are checked again on the open file.
	fi, err := os.Lstat(p)
	if err != nil {
		return fmt.Errorf("get: %w", err)
	}
	if err := RegularFile(fi); err != nil {
		return fmt.Errorf("get %s: %w", p, err)
	}
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return fmt.Errorf("get: %w", err)
	}
	defer f.Close()
	fi, err = f.Stat()
	if err != nil {
		return fmt.Errorf("get: %w", err)
	}
	if err := RegularFile(fi); err != nil {
		return fmt.Errorf("get %s: %w", p, err)
	}
	if _, err := io.Copy(w, ctxReader{ctx, f}); err != nil {
		return fmt.Errorf("get %s: %w", p, err)
	}
	return nil
}

// Walk lists dir with os.ReadDir, which does not follow symbolic links below dir.
func (l *Local) Walk(ctx context.Context, dir string) ([]FileInfo, error) {
	if err := CheckPath(dir); err != nil {
		return nil, fmt.Errorf("walk: %w", err)
	}
	// Lstat: a root that is a symbolic link (a task's output/ replaced by a
	// link to ~) is refused, never followed.
	fi, err := os.Lstat(dir)
	if err != nil {
		return nil, fmt.Errorf("walk: %w", err)
	}
	if err := WalkRoot(fi); err != nil {
		return nil, fmt.Errorf("walk %s: %w", dir, err)
	}
	var files []FileInfo
	var walk func(rel string) error
	walk = func(rel string) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		entries, err := os.ReadDir(filepath.Join(dir, filepath.FromSlash(rel)))
		if err != nil {
			return err
		}
		for _, e := range entries {
			name := path.Join(rel, e.Name())
			switch {
			case e.IsDir():
				if err := walk(name); err != nil {
					return err
				}
			case e.Type().IsRegular() || e.Type()&fs.ModeSymlink != 0:
				info, err := e.Info()
				if errors.Is(err, fs.ErrNotExist) {
					continue // removed while we listed it
				}
				if err != nil {
					return err
				}
				files = append(files, FileInfo{Path: name, Size: info.Size(), Mode: info.Mode()})
			}
		}
		return nil
	}
	if err := walk(""); err != nil {
		return nil, fmt.Errorf("walk %s: %w", dir, err)
	}
	sort.Slice(files, func(i, j int) bool { return files[i].Path < files[j].Path })
	return files, nil
}

// Remove deletes p with os.RemoveAll. If that fails, it makes every directory in
// the tree writable and tries once more: tools leave read-only trees behind (Go's
// module cache is one) that the operator still expects cleanup to remove.
func (l *Local) Remove(ctx context.Context, p string) error {
	if err := CheckPath(p); err != nil {
		return fmt.Errorf("remove: %w", err)
	}
	if path.Clean(p) == "/" {
		return errors.New("remove: refusing to remove /")
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("remove %s: %w", p, err)
	}
	err := os.RemoveAll(p)
	if err == nil {
		return nil
	}
	_ = filepath.WalkDir(p, func(q string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			if info, ierr := d.Info(); ierr == nil && info.Mode().Perm()&0o700 != 0o700 {
				_ = os.Chmod(q, info.Mode().Perm()|0o700)
			}
		}
		return nil
	})
	if err := os.RemoveAll(p); err != nil {
		return fmt.Errorf("remove: %w", err)
	}
	return nil
}

// Close does nothing: the local transport holds no connection.
func (l *Local) Close() error { return nil }

// CheckPath refuses a relative path: every Transport method takes absolute
// paths on the node.
func CheckPath(p string) error {
	if !path.IsAbs(p) {
		return fmt.Errorf("%q is not an absolute path", p)
	}
	return nil
}

// ctxReader stops a copy when ctx ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if c.ctx.Err() != nil {
		return 0, context.Cause(c.ctx)
	}
	return c.r.Read(p)
}

// Lstat describes p without following a final symbolic link.
func (l *Local) Lstat(ctx context.Context, p string) (Stat, error) {
	if err := CheckPath(p); err != nil {
		return Stat{}, fmt.Errorf("lstat: %w", err)
	}
	fi, err := os.Lstat(p)
	if err != nil {
		return Stat{}, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return Stat{}, fmt.Errorf("lstat %s: no owner in %T", p, fi.Sys())
	}
	return Stat{UID: int(st.Uid), Mode: fi.Mode(), Size: fi.Size()}, nil
}

// UID is the controller's own uid: local tasks run as the operator.
func (l *Local) UID(context.Context) (int, error) { return os.Getuid(), nil }

// mkdirPrivate creates dir and its missing parents 0700, whatever the
// umask; existing directories are left as they are.
func mkdirPrivate(dir string) error {
	dir = filepath.Clean(dir)
	if fi, err := os.Stat(dir); err == nil {
		if !fi.IsDir() {
			return fmt.Errorf("%s is not a directory", dir)
		}
		return nil
	}
	if parent := filepath.Dir(dir); parent != dir {
		if err := mkdirPrivate(parent); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return os.Chmod(dir, 0o700)
}

// Converse starts argv in a process group of its own; see Converser.
// Closing the conversation closes its stdin, kills its group and reaps it.
func (l *Local) Converse(ctx context.Context, argv []string) (Conversation, error) {
	if len(argv) == 0 || argv[0] == "" {
		return nil, errors.New("converse: empty command")
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("converse %s: %w", argv[0], err)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("converse %s: %w", argv[0], err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("converse %s: %w", argv[0], err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("converse %s: %w", argv[0], err)
	}
	return NewLineConversation(stdin, stdout, func() error {
		stdin.Close()
		stdout.Close()
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
		return nil
	}), nil
}

// Stream runs argv on this machine; see Transport.
func (l *Local) Stream(ctx context.Context, argv []string, onLine func([]byte) bool) error {
	if len(argv) == 0 || argv[0] == "" {
		return errors.New("stream: empty command")
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return fmt.Errorf("stream %s: %w", argv[0], err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return fmt.Errorf("stream %s: %w", argv[0], err)
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("stream %s: %w", argv[0], err)
	}
	stop := context.AfterFunc(ctx, func() { stdout.Close() })
	err = ReadLines(stdout, onLine)
	stop()
	// Closing stdin asks the command to end; its group is killed for good
	// measure, then reaped.
	stdin.Close()
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	_ = cmd.Wait()
	if ctx.Err() != nil {
		return fmt.Errorf("stream %s: %w", argv[0], ctx.Err())
	}
	if err != nil {
		return fmt.Errorf("stream %s: %w", argv[0], err)
	}
	return nil
}
