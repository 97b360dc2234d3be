package wrapper

// Preparing a task directory for a new attempt: the earlier one moved
// aside, the base copied, old scratch removed.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/proc"
	"github.com/dispatch-tool/dispatch/wrapper/taskfiles"
	"github.com/dispatch-tool/dispatch/wrapper/tree"
)

// prepare readies the task directory for this attempt. It runs under the
// lock, so no other supervisor can be moving the same files.
func (s *supervisor) prepare() error {
	if path, err := proc.KillRequestPath(s.dir); err != nil {
		return err
	} else if err := removeFile(path); err != nil {
		return fmt.Errorf("remove a stale kill request: %w", err)
	}
	entries, err := s.moveAside()
	if err != nil {
		return err
	}
	// Read once, under the lock: nothing but this supervisor moves
	// scratch aside here until it lets go.
	s.oldTmps = taskfiles.OldTmps(entries)
	if err := s.ownRecord(); err != nil {
		return err
	}
	if !s.quickStart() {
		// A base copy, a checkout, the proxy or setup may take long:
		// the supervisor must be killable meanwhile.
		if err := s.writeRecord(); err != nil {
			return err
		}
	}
	if err := mkdirOnce(filepath.Join(s.dir, taskfiles.DirOutput), 0o755); err != nil {
		return fmt.Errorf("create %s: %w", taskfiles.DirOutput, err)
	}
	pid := []byte(strconv.Itoa(os.Getpid()) + "\n")
	if err := taskfiles.WriteFileAtomic(filepath.Join(s.dir, taskfiles.FilePID), pid, 0o644); err != nil {
		return err
	}
	tlog, err := taskfiles.CreateTaskLog(filepath.Join(s.dir, taskfiles.FileLog), s.launch.LogLimitBytes)
	if err != nil {
		return err
	}
	s.tlog = tlog
	tlog.Watch = &taskfiles.LineWatcher{On: s.onLine}
	// The tool's temporary files stay in the attempt, private: the CLIs
	// write error reports (with the prompt) and caches under TMPDIR.
	// The old one is renamed aside (instant, whatever it holds) and
	// removed once the attempt is under way: a million files left there
	// must not hold up the start.
	tmp := filepath.Join(s.dir, taskfiles.DirTmp)
	if has(entries, taskfiles.DirTmp) {
		old := taskfiles.DirTmp + taskfiles.OldTmpSuffix + strconv.Itoa(os.Getpid())
		if err := os.Rename(tmp, filepath.Join(s.dir, old)); err != nil {
			return fmt.Errorf("move the old %s aside: %w", taskfiles.DirTmp, err)
		}
		s.oldTmps = append(s.oldTmps, old)
	}
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return fmt.Errorf("create %s: %w", taskfiles.DirTmp, err)
	}
	if s.sandbox != nil {
		if has(entries, taskfiles.DirHome) {
			// Where sandbox.PrepareHome moves it, unless resumed.
			s.oldTmps = append(s.oldTmps, taskfiles.DirHome+taskfiles.OldTmpSuffix+strconv.Itoa(os.Getpid()))
		}
		if err := s.prepareHome(); err != nil {
			return err
		}
	}
	if err := s.beat(); err != nil {
		return err
	}
	s.st = wire.Status{
		Task:           s.launch.Task,
		Attempt:        s.launch.Attempt,
		Status:         wire.StatusRunning,
		PID:            os.Getpid(),
		StartedAt:      taskfiles.Timestamp(s.begun),
		WrapperVersion: Version,
		Sandbox:        s.sandboxName(),
	}
	return s.updateStatus(func(*wire.Status) bool { return true })
}

// quickStart reports whether nothing that may take long (a base copy, a
// checkout, the network proxy, setup) runs between prepare and the tool:
// the process record is then written once, by setTool, with the tool,
// not also a moment before (one file creation fewer, each a new inode,
// most of what an attempt costs a node); `kill` waits for it meanwhile,
// as while the supervisor moves the earlier attempt aside.
func (s *supervisor) quickStart() bool {
	return s.sandboxErr == "" && s.launch.Base == "" && s.launch.Repo == nil && s.launch.Setup == "" &&
		(s.sandbox == nil || s.sandbox.Net == nil)
}

// moveAside moves an earlier attempt's files to attempts/<n>/, first killing
// its tool group if its supervisor died and left it running. n comes from
// the old status.json (0 when it is unreadable); a taken attempts/<n> gets a
// suffix rather than being overwritten. It returns the task directory's
// entries, listed once that group is gone, before the move.
func (s *supervisor) moveAside() ([]os.DirEntry, error) {
	// The pids come from the process record, which the task cannot write,
	// never from status.json, which it can.
	switch rec, err := proc.ReadRecord(s.dir); {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		s.logger.Warn("no usable process record of the earlier attempt; signalling nothing", taskfiles.LogKeyErr, err)
	default:
		err := rec.KillToolGroup(syscall.SIGKILL)
		switch {
		case errors.Is(err, proc.ErrNoGroup):
		case err != nil:
			s.logger.Warn("not killing the recorded tool group of an earlier attempt", taskfiles.LogKeyPGID, rec.ToolPGID, taskfiles.LogKeyOldAttempt, rec.Attempt, taskfiles.LogKeyErr, err)
		default:
			s.logger.Warn("killed the tool group of an earlier attempt", taskfiles.LogKeyPGID, rec.ToolPGID, taskfiles.LogKeyOldAttempt, rec.Attempt)
			deadline := time.Now().Add(time.Second)
			for proc.GroupAlive(rec.ToolPGID) && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
		}
	}
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", s.dir, err)
	}
	found := taskfiles.AttemptFiles(entries)
	haveOutput := has(entries, taskfiles.DirOutput)
	if len(found) == 0 && (!haveOutput || (s.launch.Base == "" && s.launch.Repo == nil)) {
		// First attempt; an output/ the controller may have seeded stays,
		// unless a base tree or a git workspace is to be made afresh.
		return entries, nil
	}
	n := 0
	if has(entries, taskfiles.FileStatus) {
		if old, err := taskfiles.ReadStatus(s.dir); err == nil {
			n = old.Attempt
		}
	}
	if haveOutput && s.launch.Resume {
		// The resumed session works on where the earlier attempt left.
		s.keptOutput = true
	} else if haveOutput {
		found = append(found, taskfiles.DirOutput)
	}
	// attempts/ is the wrapper's, but the task can replace it: a link (or
	// anything but a directory) is removed, never followed out of the task
	// directory.
	attempts := filepath.Join(s.dir, taskfiles.DirAttempts)
	if fi, err := os.Lstat(attempts); err == nil && !fi.IsDir() {
		s.logger.Warn("removing an attempts/ that is not a directory", taskfiles.LogKeyPath, attempts)
		if err := os.Remove(attempts); err != nil {
			return nil, fmt.Errorf("remove %s: %w", attempts, err)
		}
	}
	base := filepath.Join(attempts, strconv.Itoa(n))
	target := base
	for i := 2; ; i++ {
		if _, err := os.Lstat(target); errors.Is(err, os.ErrNotExist) {
			break
		}
		target = base + "." + strconv.Itoa(i)
	}
	if err := os.MkdirAll(target, 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w", target, err)
	}
	for _, name := range found {
		if err := os.Rename(filepath.Join(s.dir, name), filepath.Join(target, name)); err != nil {
			return nil, fmt.Errorf("move %s aside: %w", name, err)
		}
	}
	s.logger.Info("moved earlier attempt aside", taskfiles.LogKeyTo, target)
	return entries, nil
}

// copyBase copies launch.json's base tree into output/. A missing or
// unreadable base fails the attempt with class start; a kill or the
// timeout interrupts the copy.
func (s *supervisor) copyBase(out string) error {
	src := filepath.Join(s.dir, s.launch.Base)
	skipped := func(path string) {
		s.logger.Warn("base: skipped an entry that is not a file, directory or link", taskfiles.LogKeyPath, path)
	}
	if err := tree.CopyTree(src, out, s.stopping, skipped); err != nil {
		if errors.Is(err, tree.ErrStopped) {
			return err
		}
		return fmt.Errorf("copy base %q into %s: %w", s.launch.Base, taskfiles.DirOutput, err)
	}
	return nil
}

// removeOldTmps removes the earlier attempts' scratch directories that
// prepare found or moved aside (tmp/, home/, the gate's; and any a killed
// supervisor left). RemoveAll never follows a link: a task that put one
// there loses only the link.
func (s *supervisor) removeOldTmps() {
	for _, name := range s.oldTmps {
		p := filepath.Join(s.dir, name)
		if err := os.RemoveAll(p); err != nil {
			s.logger.Warn("remove an old tmp", taskfiles.LogKeyPath, p, taskfiles.LogKeyErr, err)
		}
	}
}

// has reports whether entries (a directory's listing) hold name.
func has(entries []os.DirEntry, name string) bool {
	for _, e := range entries {
		if e.Name() == name {
			return true
		}
	}
	return false
}

// sysUnlink is removeFile's call of the kernel, a variable so that a test
// can interrupt it.
var sysUnlink = syscall.Unlink

// removeFile removes path, a file; one missing is no error. One call, not
// os.Remove's two (it tries a directory after a file), retried when a
// signal interrupts it as os.Remove's is.
func removeFile(path string) error {
	err := taskfiles.IgnoringEINTR(func() error { return sysUnlink(path) })
	switch {
	case err == nil || err == syscall.ENOENT:
		return nil
	case err == syscall.EISDIR || err == syscall.EPERM:
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	}
	return &os.PathError{Op: "remove", Path: path, Err: err}
}

// mkdirOnce makes dir, or finds a directory (or a link to one) there, as
// os.MkdirAll does for a path whose parent exists; in one call when it
// is new, where MkdirAll stats the path and its parent first.
func mkdirOnce(dir string, perm os.FileMode) error {
	err := os.Mkdir(dir, perm)
	if err == nil || !errors.Is(err, os.ErrExist) {
		return err
	}
	if fi, serr := os.Stat(dir); serr == nil && fi.IsDir() {
		return nil
	}
	return err
}
