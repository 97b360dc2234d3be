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
	"strconv"
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
			return &errkind.Error{Kind: wire.KindNotFound, Err: fmt.Errorf("no task directory %s", dir)}
		}
		return errkind.IO(err)
	}
	if !fi.IsDir() {
		return errkind.Usagef("run: %s is not a directory", dir)
	}
	// Checked here for a clear error before anything starts; the supervisor
	// checks both again, and its lock is what makes the refusal race-free.
	launch, err := launchfile.Read(dir)
	if err != nil {
		return err
	}
	env, err := launchfile.ReadEnv(stdin)
	if err != nil {
		return err
	}
	if alive, err := taskfiles.SupervisorAlive(dir); err != nil {
		return errkind.IO(err)
	} else if alive {
		return &errkind.Error{Kind: wire.KindAlreadyRunning, Err: fmt.Errorf("a supervisor is already running in %s", dir)}
	}
	if err := nodestatus.MarkLive(dir, launch.Attempt); err != nil {
		return errkind.IO(err)
	}
	results, err := startSupervisor(ctx, []superviseItem{{Dir: dir, Env: env}})
	if err != nil {
		return err
	}
	r := results[0]
	if r.Run == nil {
		return &errkind.Error{Kind: r.Kind, Err: errors.New(r.Error)}
	}
	return printJSON(stdout, r.Run)
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
// it, to run the attempts in items. The attempts (with their secret
// environments) go over a pipe on its stdin, never argv or a file; each
// attempt's start comes back on a second pipe (fd 3), in the order of
// items. The supervisor holds neither the caller's stdout nor stderr: its
// stderr is the first attempt's wrapper.log, where each attempt also logs
// to its own.
func startSupervisor(ctx context.Context, items []superviseItem) ([]wire.LaunchResult, error) {
	doc, err := json.Marshal(items)
	if err != nil {
		return nil, &errkind.Error{Kind: wire.KindInternal, Err: fmt.Errorf("encode the attempts: %w", err)}
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, &errkind.Error{Kind: wire.KindInternal, Err: fmt.Errorf("find own executable: %w", err)}
	}
	readyR, readyW, err := os.Pipe()
	if err != nil {
		return nil, errkind.IO(fmt.Errorf("create pipe: %w", err))
	}
	defer readyR.Close()
	docR, docW, err := os.Pipe()
	if err != nil {
		readyW.Close()
		return nil, errkind.IO(fmt.Errorf("create pipe: %w", err))
	}
	logPath := filepath.Join(items[0].Dir, taskfiles.FileWrapper)
	logf, err := openWrapperLog(logPath)
	if err != nil {
		readyW.Close()
		docR.Close()
		docW.Close()
		return nil, errkind.IO(fmt.Errorf("open %s: %w", taskfiles.FileWrapper, err))
	}
	cmd := &exec.Cmd{
		Path:        exe,
		Args:        []string{exe, superviseCommand, "--ready-fd", strconv.Itoa(3)},
		Dir:         "/",
		Stdin:       docR,
		Stderr:      logf,
		ExtraFiles:  []*os.File{readyW},
		SysProcAttr: &syscall.SysProcAttr{Setsid: true},
	}
	err = cmd.Start()
	readyW.Close()
	docR.Close()
	logf.Close()
	if err != nil {
		docW.Close()
		return nil, &errkind.Error{Kind: wire.KindInternal, Err: fmt.Errorf("start supervisor: %w", err)}
	}
	// Nobody waits for the supervisor: it is meant to outlive us.
	cmd.Process.Release()

	go func() {
		// An error means the supervisor died, which the ready pipe reports.
		docW.Write(doc)
		docW.Close()
	}()

	type result struct {
		data []byte
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		data, err := io.ReadAll(readyR)
		ch <- result{data, err}
	}()
	var res result
	select {
	case res = <-ch:
	case <-ctx.Done():
		return nil, &errkind.Error{Kind: wire.KindInternal, Err: fmt.Errorf("interrupted waiting for the supervisor: %w", ctx.Err())}
	case <-time.After(taskfiles.ReadyTimeout):
		return nil, &errkind.Error{Kind: wire.KindInternal, Err: fmt.Errorf("supervisor not ready after %s; see %s", taskfiles.ReadyTimeout, logPath)}
	}
	if res.err != nil {
		return nil, &errkind.Error{Kind: wire.KindInternal, Err: fmt.Errorf("read supervisor report: %w", res.err)}
	}
	if len(res.data) == 0 {
		return nil, &errkind.Error{Kind: wire.KindInternal, Err: fmt.Errorf("supervisor exited before it was ready; see %s", logPath)}
	}
	var er wire.ErrorReply
	if err := json.Unmarshal(res.data, &er); err == nil && er.Error != "" {
		return nil, &errkind.Error{Kind: er.Kind, Err: errors.New(er.Error)}
	}
	var results []wire.LaunchResult
	if err := json.Unmarshal(res.data, &results); err != nil {
		return nil, &errkind.Error{Kind: wire.KindInternal, Err: fmt.Errorf("parse supervisor report: %w", err)}
	}
	if len(results) != len(items) {
		return nil, &errkind.Error{Kind: wire.KindInternal, Err: fmt.Errorf("supervisor reported %d attempts of %d", len(results), len(items))}
	}
	return results, nil
}
