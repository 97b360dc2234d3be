package wrapper

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// killRequest is kill.json: `kill --grace` tells the supervisor its grace
// through the task directory, since a signal carries no value.
type killRequest struct {
	GraceSeconds float64 `json:"grace_seconds"`
}

// killMargin is how long `kill` waits beyond the grace before it stops
// trusting the supervisor and kills the tool group itself.
const killMargin = 5 * time.Second

func cmdKill(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlagSet("kill")
	dirFlag := fs.String("dir", "", "task directory")
	graceFlag := fs.String("grace", "", "time between SIGTERM and SIGKILL (default: launch.json's)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	dir, err := taskDirFlag("kill", *dirFlag)
	if err != nil {
		return err
	}
	grace, graceSet, err := parseGrace(*graceFlag)
	if err != nil {
		return err
	}
	if !graceSet {
		grace = seconds(DefaultGraceSeconds)
		if l, err := readLaunch(dir); err == nil {
			grace = seconds(l.GraceSeconds)
		}
	}

	// A `status` probe or a starting supervisor can hold the lock for a
	// moment, so deciding between the two paths may take a few rounds.
	for range 50 {
		alive, err := supervisorAlive(dir)
		if err != nil {
			return ioError(err)
		}
		var st *Status
		if alive {
			st, err = killLive(ctx, dir, grace, graceSet)
		} else {
			st, err = killOrphan(dir)
		}
		if errors.Is(err, errRetry) {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if err != nil {
			return err
		}
		return printJSON(stdout, st)
	}
	return &cmdError{KindInternal, fmt.Errorf("kill %s: the lock keeps changing hands", dir)}
}

// errRetry means the supervisor appeared or vanished while kill looked.
var errRetry = errors.New("retry")

// parseGrace accepts a Go duration ("30s") or plain seconds ("30", "0.5").
func parseGrace(v string) (time.Duration, bool, error) {
	if v == "" {
		return 0, false, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		f, ferr := strconv.ParseFloat(v, 64)
		if ferr != nil {
			return 0, false, usageErrorf("kill: --grace %q: want a duration like 30s", v)
		}
		d = seconds(f)
	}
	if d < 0 {
		return 0, false, usageErrorf("kill: --grace %q is negative", v)
	}
	return d, true, nil
}

// killLive asks the live supervisor to stop and waits for the final status.
// If the supervisor does not finish within grace plus a margin, kill sends
// SIGKILL to the tool group itself; the supervisor then records the kill.
func killLive(ctx context.Context, dir string, grace time.Duration, graceSet bool) (*Status, error) {
	data, err := os.ReadFile(filepath.Join(dir, filePID))
	if err != nil {
		return nil, ioError(fmt.Errorf("read supervisor pid: %w", err))
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 1 {
		return nil, ioError(fmt.Errorf("read supervisor pid: bad pid file %q", data))
	}
	if graceSet {
		if err := writeJSONAtomic(filepath.Join(dir, fileKill), killRequest{GraceSeconds: grace.Seconds()}); err != nil {
			return nil, ioError(err)
		}
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil && err != syscall.ESRCH {
		return nil, ioError(fmt.Errorf("signal supervisor %d: %w", pid, err))
	}

	if st, err := waitFinal(ctx, dir, grace+killMargin); st != nil || err != nil {
		return st, err
	}
	if st, err := readStatus(dir); err == nil && st.ToolPID > 0 {
		syscall.Kill(-st.ToolPID, syscall.SIGKILL)
	}
	if st, err := waitFinal(ctx, dir, killMargin); st != nil || err != nil {
		return st, err
	}
	return nil, &cmdError{KindInternal, fmt.Errorf("supervisor %d did not finish after SIGTERM and a SIGKILL of its tool; see %s", pid, fileWrapper)}
}

// waitFinal polls until status.json is final and the supervisor has let go
// of the lock (so a `run` right after kill is not refused), or until
// timeout, when it returns nil, nil.
func waitFinal(ctx context.Context, dir string, timeout time.Duration) (*Status, error) {
	deadline := time.Now().Add(timeout)
	for {
		st, err := readStatus(dir)
		if err == nil && st.Final() {
			alive, err := supervisorAlive(dir)
			if err != nil {
				return nil, ioError(err)
			}
			if !alive {
				return st, nil
			}
		}
		if err == nil && !st.Final() {
			// A supervisor killed meanwhile leaves running for ever.
			if alive, _ := supervisorAlive(dir); !alive {
				return nil, errRetry
			}
		}
		if time.Now().After(deadline) {
			return nil, nil
		}
		select {
		case <-ctx.Done():
			return nil, &cmdError{KindInternal, fmt.Errorf("interrupted waiting for the final status: %w", ctx.Err())}
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// killOrphan handles a task whose supervisor is not running: a final status
// is reported as it is; a running one means the supervisor died, so kill
// kills the recorded tool group and writes the killed status itself, under
// the lock so that no `run` starts meanwhile.
func killOrphan(dir string) (*Status, error) {
	if _, err := os.Stat(dir); err != nil {
		return nil, &cmdError{KindNotFound, fmt.Errorf("no task directory %s", dir)}
	}
	lock, ok, err := lockTask(dir, 0)
	if err != nil {
		return nil, ioError(err)
	}
	if !ok {
		return nil, errRetry
	}
	defer lock.Close()
	st, err := readStatus(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, &cmdError{KindNotFound, fmt.Errorf("no %s in %s: nothing to kill", fileStatus, dir)}
	}
	if err != nil {
		return nil, ioError(err)
	}
	if st.Final() {
		return st, nil
	}
	st.Status, st.ErrorClass = StatusKilled, ClassKilled
	st.Error = "killed on request; supervisor was not running"
	st.CompletedAt = timestamp(time.Now())
	st.ExitCode = -1
	// The supervisor that would have read the usage is gone; what it
	// stored of the tool's output may still hold some.
	if tail, err := readLogTail(filepath.Join(dir, fileLog), usageTail); err == nil {
		st.TokensIn, st.TokensOut, st.CostUSD = ParseUsage(tail)
	}
	if st.ToolPID > 0 {
		if err := syscall.Kill(-st.ToolPID, syscall.SIGKILL); err == nil {
			st.Signal = signalName(syscall.SIGKILL)
		}
	}
	if err := writeJSONAtomic(filepath.Join(dir, fileStatus), st); err != nil {
		return nil, ioError(err)
	}
	return st, nil
}
