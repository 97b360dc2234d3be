package wrapper

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/dispatch-tool/dispatch/wrapper/subcmd"
	"io"
	"os"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/errkind"
	"github.com/dispatch-tool/dispatch/wrapper/launchfile"
)

// `launch` starts a batch of attempts on one node in one call: the
// controller sends each attempt's task directory, spec, launch.json and
// environment (the api_mode's secrets) as one document on stdin, and the
// wrapper takes each task's lock and writes spec.md, launch.json and the
// live marker, then starts one supervisor for every attempt of the batch,
// handing it the locks and, over a pipe, the environments. Secrets are
// never written anywhere. It prints one result per attempt, in order, as
// soon as the supervisor has the attempts: their status.json follows.

// maxLaunchBatch caps the document on stdin.
const maxLaunchBatch = 64 << 20

func cmdLaunch(ctx context.Context, args []string, stdin io.Reader, stdout io.Writer) error {
	fs := subcmd.FlagSet("launch")
	if err := subcmd.Parse(fs, args); err != nil {
		return err
	}
	data, err := io.ReadAll(io.LimitReader(stdin, maxLaunchBatch+1))
	if err != nil {
		return errkind.IO(fmt.Errorf("read the launches from stdin: %w", err))
	}
	if len(data) > maxLaunchBatch {
		return errkind.Usagef("launch: the document on stdin is larger than %d bytes", maxLaunchBatch)
	}
	reply, err := startLaunches(ctx, data)
	if err != nil {
		return err
	}
	return subcmd.PrintJSON(stdout, reply)
}

// startLaunches starts the attempts of one launch document (a LaunchBatch)
// and returns the result of each.
func startLaunches(ctx context.Context, data []byte) (*wire.LaunchReply, error) {
	var batch wire.LaunchBatch
	if err := json.Unmarshal(data, &batch); err != nil {
		return nil, errkind.Usagef("launch: stdin: %v", err)
	}
	reply := wire.LaunchReply{Results: make([]wire.LaunchResult, len(batch.Launches))}
	var items []superviseItem
	var locks []*os.File
	var idx []int
	seen := map[string]bool{}
	for i, item := range batch.Launches {
		r := wire.LaunchResult{Dir: item.Dir}
		var dir string
		var lock *os.File
		var err error
		if seen[item.Dir] {
			err = errkind.Usagef("launch: task directory %s is given twice", item.Dir)
		} else {
			dir, lock, err = writeLaunchFiles(item)
		}
		if err != nil {
			r.Error, r.Kind = err.Error(), errkind.Of(err)
		} else {
			seen[dir] = true
			items = append(items, superviseItem{Dir: dir, Env: item.Env, Task: item.Launch.Task, Attempt: item.Launch.Attempt})
			locks = append(locks, lock)
			idx = append(idx, i)
		}
		reply.Results[i] = r
	}
	if len(items) > 0 {
		// One supervisor runs every attempt of the batch: a process start
		// is the largest cost of a launch on a small node.
		pid, err := startSupervisor(ctx, items, locks)
		for _, l := range locks {
			l.Close() // the supervisor's now (or nobody's, when it failed)
		}
		for j, i := range idx {
			if err != nil {
				reply.Results[i].Error, reply.Results[i].Kind = err.Error(), errkind.Of(err)
			} else {
				reply.Results[i].Run = startedReply(items[j], pid)
			}
		}
	}
	return &reply, nil
}

// writeLaunchFiles checks one attempt, takes its task's lock and writes
// its spec.md, launch.json and live marker; it returns the task directory
// and the lock, held for the supervisor to inherit.
func writeLaunchFiles(item wire.LaunchItem) (dir string, lock *os.File, err error) {
	dir, err = subcmd.DirFlag("launch", item.Dir)
	if err != nil {
		return "", nil, err
	}
	if dir != item.Dir {
		return "", nil, errkind.Usagef("launch: task directory %q is not absolute and clean", item.Dir)
	}
	l := item.Launch
	if err := launchfile.Normalize(&l); err != nil {
		return "", nil, errkind.Usagef("launch: %s: invalid launch: %v", dir, err)
	}
	if err := launchfile.CheckEnv(item.Env); err != nil {
		return "", nil, errkind.Usagef("launch: %s: %v", dir, err)
	}
	// Made alone, but for a project's first launch (its tasks/ too).
	err = mkdirOnce(dir, 0o700)
	if errors.Is(err, os.ErrNotExist) {
		err = os.MkdirAll(dir, 0o700)
	}
	if err != nil {
		return "", nil, errkind.IO(fmt.Errorf("create %s: %w", dir, err))
	}
	lock, err = takeTaskLock(dir)
	if err != nil {
		return "", nil, err
	}
	if err := launchfile.WriteAttempt(dir, item, l.Attempt); err != nil {
		lock.Close()
		return "", nil, err
	}
	return dir, lock, nil
}
