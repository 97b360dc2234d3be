package wrapper

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/dispatch-tool/dispatch/wrapper/subcmd"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/errkind"
	"github.com/dispatch-tool/dispatch/wrapper/launchfile"
	"github.com/dispatch-tool/dispatch/wrapper/nodestatus"
	"github.com/dispatch-tool/dispatch/wrapper/taskfiles"
)

// cmdRun starts attempts. Without --dir, stdin is one document with every
// attempt's directory, spec, launch.json and environment, as `launch`
// takes it (the controller's way: one round trip per node and tick). With
// --dir D, D holds spec.md and launch.json already and stdin is the
// environment map.
func cmdRun(ctx context.Context, args []string, stdin io.Reader, stdout io.Writer) error {
	fs := subcmd.FlagSet("run")
	dirFlag := fs.String("dir", "", "task directory (without it, stdin holds the launch document)")
	serve := fs.Bool("serve", false, "without --dir: answer launch documents, one a line on stdin, one reply a line, until stdin ends or a SIGTERM, SIGINT or SIGHUP")
	if err := subcmd.Parse(fs, args); err != nil {
		return err
	}
	if *dirFlag == "" && *serve {
		stop, work, release := serveContexts(ctx)
		defer release()
		return nodestatus.ServeLines(stop.Done(), stdin, stdout, "run", maxLaunchBatch, func(doc []byte) (any, error) { return startLaunches(work, doc) })
	} else if *dirFlag == "" {
		return cmdLaunch(ctx, nil, stdin, stdout)
	}
	dir, err := subcmd.DirFlag("run", *dirFlag)
	if err != nil {
		return err
	}
	fi, err := os.Stat(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return &errkind.Error{Kind: wire.KindNotFound, Err: fmt.Errorf("no task directory %s", dir)}
		}
		return errkind.IO(err)
	}
	if !fi.IsDir() {
		return errkind.Usagef("run: %s is not a directory", dir)
	}
	// Checked here for a clear error before anything starts; the lock
	// taken below is what makes the refusal race-free.
	launch, err := launchfile.Read(dir)
	if err != nil {
		return err
	}
	env, err := launchfile.ReadEnv(stdin)
	if err != nil {
		return err
	}
	lock, err := takeTaskLock(dir)
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := nodestatus.MarkLive(dir, launch.Attempt); err != nil {
		return errkind.IO(err)
	}
	item := superviseItem{Dir: dir, Env: env, Task: launch.Task, Attempt: launch.Attempt}
	pid, err := startSupervisor(ctx, []superviseItem{item}, []*os.File{lock})
	if err != nil {
		return err
	}
	return subcmd.PrintJSON(stdout, startedReply(item, pid))
}

// serveContexts are the contexts of a --serve loop under ctx (Main's,
// cancelled by SIGINT and SIGTERM): stop, done on those signals or SIGHUP,
// after which the loop ends once the document in hand is answered; and
// work, which that document is handled under and no signal cancels, so
// that a launch handed to a supervisor is never left half-done. release
// lets SIGHUP go back to its default.
func serveContexts(ctx context.Context) (stop, work context.Context, release context.CancelFunc) {
	stop, release = signal.NotifyContext(ctx, syscall.SIGHUP)
	return stop, context.WithoutCancel(ctx), release
}

// lockWait is how long `run` retries D/lock before deciding that a
// supervisor holds it; it only has to outlast a `status` probe.
const lockWait = 500 * time.Millisecond

// takeTaskLock takes dir's lock for the attempt about to start; the
// supervisor inherits it. A live supervisor there is already_running.
func takeTaskLock(dir string) (*os.File, error) {
	lock, ok, err := taskfiles.LockTask(dir, lockWait)
	if err != nil {
		return nil, errkind.IO(err)
	}
	if !ok {
		return nil, &errkind.Error{Kind: wire.KindAlreadyRunning, Err: fmt.Errorf("a supervisor is already running in %s", dir)}
	}
	return lock, nil
}

// startedReply is the reply for an attempt handed to supervisor pid (its
// lock held, its live marker written): its status.json follows.
func startedReply(item superviseItem, pid int) *wire.RunReply {
	return &wire.RunReply{Task: item.Task, Attempt: item.Attempt, PID: pid, Status: wire.StatusRunning}
}

// startSupervisor re-executes this binary as `supervise` in a new session
// (it outlives the caller's SSH session and gets no signals meant for it)
// to run the attempts in items, and returns its pid. It inherits each
// attempt's lock (locks[i], items[i]'s), so the attempts are its from the
// fork on: `run` replies without waiting, and a start failure from then on
// is a failed status.json. The attempts (with their secret environments)
// go over a pipe on its stdin, never argv or a file; its stderr is the
// first attempt's wrapper.log, where each attempt also logs to its own.
func startSupervisor(ctx context.Context, items []superviseItem, locks []*os.File) (int, error) {
	for i := range items {
		items[i].LockFD = firstLockFD + i
	}
	doc, err := json.Marshal(items)
	if err != nil {
		return 0, &errkind.Error{Kind: wire.KindInternal, Err: fmt.Errorf("encode the attempts: %w", err)}
	}
	exe, err := os.Executable()
	if err != nil {
		return 0, &errkind.Error{Kind: wire.KindInternal, Err: fmt.Errorf("find own executable: %w", err)}
	}
	docR, docW, err := os.Pipe()
	if err != nil {
		return 0, errkind.IO(fmt.Errorf("create pipe: %w", err))
	}
	defer docW.Close()
	logPath := filepath.Join(items[0].Dir, taskfiles.FileWrapper)
	logf, err := taskfiles.OpenWrapperLog(logPath)
	if err != nil {
		docR.Close()
		return 0, errkind.IO(fmt.Errorf("open %s: %w", taskfiles.FileWrapper, err))
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
		return 0, &errkind.Error{Kind: wire.KindInternal, Err: fmt.Errorf("start supervisor: %w", err)}
	}
	pid := cmd.Process.Pid
	// The supervisor is meant to outlive us; `run --serve` lives on, so
	// it reaps the ones that end before it does.
	go cmd.Wait()
	// Written whole before the reply: a supervisor that cannot read its
	// attempts has started none of them (it parses the document only once
	// it has all of it), and its locks die with it.
	docW.SetWriteDeadline(time.Now().Add(taskfiles.ReadyTimeout))
	stop := context.AfterFunc(ctx, func() { docW.SetWriteDeadline(time.Now()) })
	defer stop()
	if _, err := docW.Write(doc); err != nil {
		return 0, &errkind.Error{Kind: wire.KindInternal, Err: fmt.Errorf("hand the attempts to supervisor %d: %w; see %s", pid, err, logPath)}
	}
	return pid, nil
}
