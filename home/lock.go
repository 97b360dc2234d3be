package home

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// LockFile is the name of the controller lock next to the database.
const LockFile = "dispatch.lock"

// ErrLocked means another controller holds the home's lock.
var ErrLocked = errors.New("another controller is running on this home")

// Lock is the exclusive OS file lock (flock) that makes one controller the
// only writer of a home's database. The kernel drops it when the process
// dies, so a killed controller never blocks the next start.
type Lock struct {
	f *os.File
}

// AcquireLock takes the home's controller lock without waiting. When another
// process holds it, the error names that process.
func AcquireLock(home string) (*Lock, error) {
	path := filepath.Join(home, LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open controller lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder, _ := os.ReadFile(path)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w (%s): %s", ErrLocked, path, strings.TrimSpace(string(holder)))
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	// The holder line first: until it is written the file names the last
	// holder, and ControllerMayRun would take the home for one nobody holds.
	host, _ := os.Hostname()
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(fmt.Sprintf("pid %d on %s since %s\n", os.Getpid(), host, time.Now().Format(time.RFC3339))), 0)
	if err := privateHome(home, f); err != nil {
		f.Close()
		return nil, err
	}
	return &Lock{f: f}, nil
}

// privateHome makes what the lock holder writes private to its owner,
// whatever the umask: the lock file 0600 and runs/ 0700 (created here, so
// that the outputs, logs and reports collected into it are never readable
// by others). The database is made 0600 by store.Open.
func privateHome(home string, lock *os.File) error {
	if err := lock.Chmod(0o600); err != nil {
		return fmt.Errorf("make %s private: %w", lock.Name(), err)
	}
	runs := RunsRoot(home)
	if err := os.Mkdir(runs, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("create %s: %w", runs, err)
	}
	if err := os.Chmod(runs, 0o700); err != nil {
		return fmt.Errorf("make %s private: %w", runs, err)
	}
	return nil
}

// Release drops the lock.
func (l *Lock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}

// TickFile is the file whose modification time is when the home's
// controller last finished a tick.
const TickFile = "controller.tick"

// MarkTick records that the controller holding the home's lock finished a
// tick at t: the modification time of TickFile (created 0600 on first use).
// What `status`, `nodes`, the API and MCP show is what the last tick saw;
// when no controller runs, LastTick says since when the figures are stale.
// It is not the lock file's time, which `nodes check` and a `retry` without
// a controller also take.
func MarkTick(home string, t time.Time) {
	path := filepath.Join(home, TickFile)
	if err := os.Chtimes(path, t, t); errors.Is(err, fs.ErrNotExist) {
		if f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE, 0o600); err == nil {
			f.Close()
			_ = os.Chtimes(path, t, t)
		}
	}
}

// LastTick is when a controller of this home last finished a tick; zero
// when none ever did.
func LastTick(home string) time.Time {
	fi, err := os.Stat(filepath.Join(home, TickFile))
	if err != nil {
		return time.Time{}
	}
	return fi.ModTime()
}

// ControllerMayRun reports whether a controller may hold home's lock,
// without touching the lock (a probe that took it, even shared, would
// make a `dispatch start` of that instant fail as locked). It is false
// only on evidence: no lock file, or one whose holder line names a
// process of this host that is gone. A holder line not yet written, or
// another host's, may be a controller.
func ControllerMayRun(home string) bool {
	b, err := os.ReadFile(filepath.Join(home, LockFile))
	if errors.Is(err, fs.ErrNotExist) {
		return false
	}
	if err != nil {
		return true
	}
	var pid int
	var host string
	if _, err := fmt.Sscanf(string(b), "pid %d on %s since", &pid, &host); err != nil || pid <= 0 {
		return true
	}
	if self, _ := os.Hostname(); host != self {
		return true
	}
	return !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}
