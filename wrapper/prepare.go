package wrapper

import (
	"context"
	"encoding/json"
	"github.com/dispatch-tool/dispatch/wrapper/subcmd"
	"io"
	"path/filepath"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/errkind"
	"github.com/dispatch-tool/dispatch/wrapper/slurmjob"
	"github.com/dispatch-tool/dispatch/wrapper/taskfiles"
)

// prepareCommand writes each attempt's files as `launch` does, but starts
// no supervisor: a batch job (a Slurm node's, issue 36) starts it later,
// on a compute node, from the same task directory. The attempt's secret
// environment is left as the supervisor's stdin document in
// slurmjob.FileSecrets, 0600, which the job's script opens and deletes
// before the supervisor runs.
const prepareCommand = "prepare"

func cmdPrepare(_ context.Context, args []string, stdin io.Reader, stdout io.Writer) error {
	fs := subcmd.FlagSet(prepareCommand)
	if err := subcmd.Parse(fs, args); err != nil {
		return err
	}
	data, err := io.ReadAll(io.LimitReader(stdin, maxLaunchBatch+1))
	if err != nil {
		return errkind.IO(err)
	}
	if len(data) > maxLaunchBatch {
		return errkind.Usagef("%s: the document on stdin is larger than %d bytes", prepareCommand, maxLaunchBatch)
	}
	var batch wire.LaunchBatch
	if err := json.Unmarshal(data, &batch); err != nil {
		// Never quoted: the document holds secrets.
		return errkind.Usagef("%s: stdin: want a launch batch", prepareCommand)
	}
	reply := wire.LaunchReply{Results: make([]wire.LaunchResult, len(batch.Launches))}
	seen := map[string]bool{}
	for i, item := range batch.Launches {
		reply.Results[i] = wire.LaunchResult{Dir: item.Dir}
		err := prepareOne(item, seen)
		if err != nil {
			reply.Results[i].Error, reply.Results[i].Kind = err.Error(), errkind.Of(err)
		}
	}
	return subcmd.PrintJSON(stdout, reply)
}

// prepareOne writes one attempt's spec.md, launch.json and secrets file.
func prepareOne(item wire.LaunchItem, seen map[string]bool) error {
	if seen[item.Dir] {
		return errkind.Usagef("%s: task directory %s is given twice", prepareCommand, item.Dir)
	}
	// A previous attempt's secrets its job never read go first.
	if filepath.IsAbs(item.Dir) && filepath.Clean(item.Dir) == item.Dir {
		if err := slurmjob.DropSecrets(item.Dir); err != nil {
			return errkind.IO(err)
		}
	}
	dir, lock, err := writeLaunchFiles(item)
	if err != nil {
		return err
	}
	// The job's supervisor takes the lock when it starts (lock_fd 0).
	lock.Close()
	seen[dir] = true
	doc, err := json.Marshal([]superviseItem{{Dir: dir, Env: item.Env, Task: item.Launch.Task, Attempt: item.Launch.Attempt}})
	if err != nil {
		return &errkind.Error{Kind: wire.KindInternal, Err: err}
	}
	if err := taskfiles.WriteFileAtomic(filepath.Join(dir, slurmjob.FileSecrets), doc, 0o600); err != nil {
		return errkind.IO(err)
	}
	return nil
}
