package wrapper

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/errkind"
	"github.com/dispatch-tool/dispatch/wrapper/launchfile"
	"github.com/dispatch-tool/dispatch/wrapper/nodestatus"
	"github.com/dispatch-tool/dispatch/wrapper/taskfiles"
)

// `launch` starts a batch of attempts on one node in one call: the
// controller sends each attempt's task directory, spec, launch.json and
// environment (the api_mode's secrets) as one document on stdin, and the
// wrapper writes spec.md and launch.json, then starts one supervisor for
// every attempt of the batch, handing it the environments over a pipe.
// Secrets are never written anywhere. It prints one result per attempt, in
// order.

// maxLaunchBatch caps the document on stdin.
const maxLaunchBatch = 64 << 20

func cmdLaunch(ctx context.Context, args []string, stdin io.Reader, stdout io.Writer) error {
	fs := newFlagSet("launch")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	data, err := io.ReadAll(io.LimitReader(stdin, maxLaunchBatch+1))
	if err != nil {
		return errkind.IO(fmt.Errorf("read the launches from stdin: %w", err))
	}
	if len(data) > maxLaunchBatch {
		return errkind.Usagef("launch: the document on stdin is larger than %d bytes", maxLaunchBatch)
	}
	var batch wire.LaunchBatch
	if err := json.Unmarshal(data, &batch); err != nil {
		return errkind.Usagef("launch: stdin: %v", err)
	}
	reply := wire.LaunchReply{Results: make([]wire.LaunchResult, len(batch.Launches))}
	var items []superviseItem
	var idx []int
	seen := map[string]bool{}
	for i, item := range batch.Launches {
		r := wire.LaunchResult{Dir: item.Dir}
		var dir string
		var err error
		if seen[item.Dir] {
			err = errkind.Usagef("launch: task directory %s is given twice", item.Dir)
		} else {
			dir, err = writeLaunchFiles(item)
		}
		if err != nil {
			r.Error, r.Kind = err.Error(), errkind.Of(err)
		} else {
			seen[dir] = true
			items = append(items, superviseItem{Dir: dir, Env: item.Env})
			idx = append(idx, i)
		}
		reply.Results[i] = r
	}
	if len(items) > 0 {
		// One supervisor runs every attempt of the batch: a process start
		// is the largest cost of a launch on a small node.
		results, err := startSupervisor(ctx, items)
		for j, i := range idx {
			switch {
			case err != nil:
				reply.Results[i].Error, reply.Results[i].Kind = err.Error(), errkind.Of(err)
			default:
				reply.Results[i] = results[j]
				reply.Results[i].Dir = batch.Launches[i].Dir
			}
		}
	}
	return printJSON(stdout, reply)
}

// writeLaunchFiles checks one attempt and writes its spec.md and
// launch.json; it returns the task directory.
func writeLaunchFiles(item wire.LaunchItem) (string, error) {
	dir, err := taskDirFlag("launch", item.Dir)
	if err != nil {
		return "", err
	}
	if dir != item.Dir {
		return "", errkind.Usagef("launch: task directory %q is not absolute and clean", item.Dir)
	}
	l := item.Launch
	if err := launchfile.Normalize(&l); err != nil {
		return "", errkind.Usagef("launch: %s: invalid launch: %v", dir, err)
	}
	if err := launchfile.CheckEnv(item.Env); err != nil {
		return "", errkind.Usagef("launch: %s: %v", dir, err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", errkind.IO(fmt.Errorf("create %s: %w", dir, err))
	}
	if alive, err := taskfiles.SupervisorAlive(dir); err != nil {
		return "", errkind.IO(err)
	} else if alive {
		return "", &errkind.Error{Kind: wire.KindAlreadyRunning, Err: fmt.Errorf("a supervisor is already running in %s", dir)}
	}
	launchJSON, err := json.MarshalIndent(item.Launch, "", "  ")
	if err != nil {
		return "", &errkind.Error{Kind: wire.KindInternal, Err: err}
	}
	// Written whole or not at all, replacing whatever the task left at
	// these names (a link is replaced, never followed).
	if err := taskfiles.WriteFileAtomic(filepath.Join(dir, taskfiles.FileSpec), []byte(item.Spec), 0o444); err != nil {
		return "", errkind.IO(err)
	}
	if err := taskfiles.WriteFileAtomic(filepath.Join(dir, taskfiles.FileLaunch), launchJSON, 0o644); err != nil {
		return "", errkind.IO(err)
	}
	// Before the supervisor starts, so that no moment of the attempt's
	// life is out of the live index.
	if err := nodestatus.MarkLive(dir, l.Attempt); err != nil {
		return "", errkind.IO(err)
	}
	return dir, nil
}
