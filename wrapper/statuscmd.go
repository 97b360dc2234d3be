package wrapper

// The node-status subcommands: status, watch and tail, over package
// nodestatus.

import (
	"context"
	"errors"
	"fmt"
	"github.com/dispatch-tool/dispatch/wrapper/subcmd"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/errkind"
	"github.com/dispatch-tool/dispatch/wrapper/nodestatus"
	"github.com/dispatch-tool/dispatch/wrapper/taskfiles"
)

func cmdStatus(ctx context.Context, args []string, stdin io.Reader, stdout io.Writer) error {
	fs := subcmd.FlagSet("status")
	rootFlag := fs.String("root", "", "work directory holding <project>/tasks/<ID>")
	var projects subcmd.StringList
	fs.Var(&projects, "project", "project to list (repeatable; default all)")
	live := fs.Bool("live", false, "list only the live index and the tasks named on stdin ({\"tasks\":[\"project/ID\",…]})")
	node := fs.String("node", "", "report only this node's attempts (and those of no known node)")
	serve := fs.Bool("serve", false, "answer requests, one a line on stdin ({\"projects\":[…],\"live\":true,\"tasks\":[…],\"tags\":[…]}), one reply a line, until stdin ends or a SIGTERM, SIGINT or SIGHUP")
	if err := subcmd.Parse(fs, args); err != nil {
		return err
	}
	if *rootFlag == "" {
		return errkind.Usagef("status: --root is required")
	}
	root, err := taskfiles.ExpandPath(*rootFlag)
	if err != nil {
		return errkind.Usagef("status: %v", err)
	}
	for _, p := range projects {
		if !nodestatus.ValidName(p) {
			return errkind.Usagef("status: invalid project name %q", p)
		}
	}
	if *serve {
		if *live || len(projects) > 0 {
			return errkind.Usagef("status: --serve takes its projects and --live in each request")
		}
		stop, work, release := serveContexts(ctx)
		defer release()
		return nodestatus.ServeStatus(work, stop.Done(), Version, root, *node, stdin, stdout)
	}
	var ns *wire.NodeStatus
	if *live {
		named, held, err := nodestatus.ReadLiveRequest(stdin)
		if err != nil {
			return err
		}
		ns, err = nodestatus.LiveStatus(ctx, Version, root, *node, projects, named, held)
		if err != nil {
			return err
		}
	} else if ns, err = nodestatus.NodeStatus(ctx, Version, root, *node, projects); err != nil {
		return err
	}
	return subcmd.PrintJSON(stdout, ns)
}

func cmdWatch(ctx context.Context, args []string, stdin io.Reader, stdout io.Writer) error {
	fs := subcmd.FlagSet("watch")
	rootFlag := fs.String("root", "", "work directory holding <project>/tasks/<ID>")
	beat := fs.Duration("beat", nodestatus.DefaultBeat, "how often to print a beat frame")
	node := fs.String("node", "", "stream only this node's attempts (and those of no known node)")
	if err := subcmd.Parse(fs, args); err != nil {
		return err
	}
	if *rootFlag == "" {
		return errkind.Usagef("watch: --root is required")
	}
	if *beat < 10*time.Millisecond {
		return errkind.Usagef("watch: --beat must be at least 10ms")
	}
	root, err := taskfiles.ExpandPath(*rootFlag)
	if err != nil {
		return errkind.Usagef("watch: %v", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The controller closes the session, and so stdin, when it is done.
	go func() {
		io.Copy(io.Discard, stdin)
		cancel()
	}()
	return nodestatus.Watch(ctx, Version, root, *node, *beat, stdout, true)
}

func cmdTail(ctx context.Context, args []string, stdout io.Writer) error {
	fs := subcmd.FlagSet("tail")
	dirFlag := fs.String("dir", "", "task directory")
	follow := fs.Bool("follow", false, "keep printing until the attempt is over")
	from := fs.Int64("from", 0, "skip the first N bytes of what tail would print (a caller polling for more)")
	if err := subcmd.Parse(fs, args); err != nil {
		return err
	}
	if *from < 0 {
		return errkind.Usagef("tail: --from must not be negative")
	}
	stdout = &nodestatus.SkipWriter{W: stdout, Skip: *from}
	dir, err := subcmd.DirFlag("tail", *dirFlag)
	if err != nil {
		return err
	}
	if _, err := os.Stat(dir); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return &errkind.Error{Kind: wire.KindNotFound, Err: fmt.Errorf("no task directory %s", dir)}
		}
		return errkind.IO(err)
	}
	r := &nodestatus.LogReader{Path: filepath.Join(dir, taskfiles.FileLog), W: stdout}
	defer r.Close()
	if !*follow {
		return r.Drain()
	}
	for {
		// Checked before draining: output written before the final status
		// is then certain to be read.
		over := nodestatus.AttemptOver(dir)
		if err := r.Drain(); err != nil {
			return err
		}
		if over {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(nodestatus.TailPoll):
		}
	}
}
