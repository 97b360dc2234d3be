package wrapper

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/dispatch-tool/dispatch/wire"
)

// readyTimeout bounds how long `run` waits for a new supervisor to take
// the attempts off its stdin pipe (a document larger than the pipe's
// buffer); a live marker older than twice this with no supervisor behind
// it is a launch that never started.
const readyTimeout = time.Minute

// cmdRun starts attempts. Without --dir, stdin is one document with every
// attempt's directory, spec, launch.json and environment, as `launch`
// takes it (the controller's way: one round trip per node and tick). With
// --dir D, D holds spec.md and launch.json already and stdin is the
// environment map.
func cmdRun(ctx context.Context, args []string, stdin io.Reader, stdout io.Writer) error {
	fs := newFlagSet("run")
	dirFlag := fs.String("dir", "", "task directory (without it, stdin holds the launch document)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *dirFlag == "" {
		return cmdLaunch(ctx, nil, stdin, stdout)
	}
	dir, err := taskDirFlag("run", *dirFlag)
	if err != nil {
		return err
	}
	fi, err := os.Stat(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return &cmdError{wire.KindNotFound, fmt.Errorf("no task directory %s", dir)}
		}
		return ioError(err)
	}
	if !fi.IsDir() {
		return usageErrorf("run: %s is not a directory", dir)
	}
	// Checked here for a clear error before anything starts; the lock
	// taken below is what makes the refusal race-free.
	launch, err := readLaunch(dir)
	if err != nil {
		return err
	}
	env, err := readEnvMap(stdin)
	if err != nil {
		return err
	}
	lock, err := takeTaskLock(dir)
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := markLive(dir, launch.Attempt); err != nil {
		return ioError(err)
	}
	item := superviseItem{Dir: dir, Env: env, Task: launch.Task, Attempt: launch.Attempt}
	pid, err := startSupervisor(ctx, []superviseItem{item}, []*os.File{lock})
	if err != nil {
		return err
	}
	return printJSON(stdout, startedReply(item, pid))
}

// takeTaskLock takes dir's lock for the attempt about to start; the
// supervisor inherits it. A live supervisor there is already_running.
func takeTaskLock(dir string) (*os.File, error) {
	lock, ok, err := lockTask(dir, lockWait)
	if err != nil {
		return nil, ioError(err)
	}
	if !ok {
		return nil, &cmdError{wire.KindAlreadyRunning, fmt.Errorf("a supervisor is already running in %s", dir)}
	}
	return lock, nil
}

// startedReply is the reply for an attempt handed to supervisor pid: it
// is recorded on the node (its lock held, its live marker written) and
// its status.json follows; a start failure from here on is written there.
func startedReply(item superviseItem, pid int) *wire.RunReply {
	return &wire.RunReply{Task: item.Task, Attempt: item.Attempt, PID: pid, Status: wire.StatusRunning}
}

// openWrapperLog opens D/wrapper.log for appending. The task can replace
// it: a link is never followed (the supervisor's lines would land in its
// target) and a FIFO never blocks; anything but a regular file is removed
// and the log started afresh.
func openWrapperLog(path string) (*os.File, error) {
	const flags = os.O_WRONLY | os.O_APPEND | os.O_CREATE | syscall.O_NOFOLLOW | syscall.O_NONBLOCK
	f, err := os.OpenFile(path, flags, 0o600)
	if err == nil {
		if fi, serr := f.Stat(); serr == nil && fi.Mode().IsRegular() {
			return f, nil
		}
		f.Close()
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("replace %s: %w", path, err)
	}
	return os.OpenFile(path, flags|os.O_EXCL, 0o600)
}

// startSupervisor re-executes this binary as `supervise` in a new session,
// so that it outlives the caller's SSH session and gets no signals meant for
// it, to run the attempts in items; it returns the supervisor's pid. The
// supervisor inherits each attempt's lock, taken by the caller (locks[i]
// is items[i]'s), so the attempts are the supervisor's from the moment it
// is forked: `run` replies without waiting for it to prepare them, and an
// attempt that fails to start from then on gets a failed status.json. The
// attempts (with their secret environments) go over a pipe on its stdin,
// never argv or a file. The supervisor holds neither the caller's stdout
// nor stderr: its stderr is the first attempt's wrapper.log, where each
// attempt also logs to its own.
func startSupervisor(ctx context.Context, items []superviseItem, locks []*os.File) (int, error) {
	for i := range items {
		items[i].LockFD = firstLockFD + i
	}
	doc, err := json.Marshal(items)
	if err != nil {
		return 0, &cmdError{wire.KindInternal, fmt.Errorf("encode the attempts: %w", err)}
	}
	exe, err := os.Executable()
	if err != nil {
		return 0, &cmdError{wire.KindInternal, fmt.Errorf("find own executable: %w", err)}
	}
	docR, docW, err := os.Pipe()
	if err != nil {
		return 0, ioError(fmt.Errorf("create pipe: %w", err))
	}
	defer docW.Close()
	logPath := filepath.Join(items[0].Dir, fileWrapper)
	logf, err := openWrapperLog(logPath)
	if err != nil {
		docR.Close()
		return 0, ioError(fmt.Errorf("open %s: %w", fileWrapper, err))
	}
	cmd := &exec.Cmd{
		Path:        exe,
		Args:        []string{exe, superviseCommand},
		Dir:         "/",
		Stdin:       docR,
		Stderr:      logf,
		ExtraFiles:  locks,
		SysProcAttr: &syscall.SysProcAttr{Setsid: true},
	}
	err = cmd.Start()
	docR.Close()
	logf.Close()
	if err != nil {
		return 0, &cmdError{wire.KindInternal, fmt.Errorf("start supervisor: %w", err)}
	}
	pid := cmd.Process.Pid
	// Nobody waits for the supervisor: it is meant to outlive us.
	cmd.Process.Release()
	// Written whole before the reply: a supervisor that cannot read its
	// attempts has started none of them (it parses the document only once
	// it has all of it), and its locks die with it.
	docW.SetWriteDeadline(time.Now().Add(readyTimeout))
	stop := context.AfterFunc(ctx, func() { docW.SetWriteDeadline(time.Now()) })
	defer stop()
	if _, err := docW.Write(doc); err != nil {
		return 0, &cmdError{wire.KindInternal, fmt.Errorf("hand the attempts to supervisor %d: %w; see %s", pid, err, logPath)}
	}
	return pid, nil
}
