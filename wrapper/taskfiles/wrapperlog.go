package taskfiles

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
)

// LogWrapper appends a warning to D/wrapper.log, as the supervisors log
// there, for a process that holds no logger of the directory (kill, a
// supervisor whose attempt did not start); it is best effort. The task
// can replace wrapper.log: a link is not followed, a FIFO not waited on.
func LogWrapper(dir, format string, args ...any) {
	f, err := os.OpenFile(filepath.Join(dir, FileWrapper), os.O_WRONLY|os.O_APPEND|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0o600)
	if err != nil {
		return
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return
	}
	slog.New(slog.NewTextHandler(f, nil)).Warn(fmt.Sprintf(format, args...), LogKeyDir, dir, LogKeyPID, os.Getpid())
}

// OpenWrapperLog opens D/wrapper.log (path) for appending, for a
// supervisor's own logging. The task can replace it: a link is never
// followed (the supervisor's lines would land in its target) and a FIFO
// never blocks; anything but a regular file is removed and the log
// started afresh.
func OpenWrapperLog(path string) (*os.File, error) {
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
