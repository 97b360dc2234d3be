package wrapper

import (
	"context"
	"errors"
	"github.com/dispatch-tool/dispatch/wrapper/subcmd"
	"io"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/collect"
	"github.com/dispatch-tool/dispatch/wrapper/errkind"
)

// cmdCollect writes, as one tar stream on stdout, the files the controller
// collects of a node's finished attempts (wire.CollectRequest on stdin; see
// package collect). It replaces a status.json read, a task.log read and an
// output/ listing per attempt, each a round trip.
func cmdCollect(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	err := collectStream(ctx, args, stdin, stdout)
	var ce *errkind.Error
	if errors.As(err, &ce) && ce.Kind == wire.KindUsage {
		// stdout is a tar stream: the reply there is not read as one.
		subcmd.PrintJSON(stderr, wire.ErrorReply{Error: err.Error(), Kind: ce.Kind})
	}
	return err
}

// collectStream is cmdCollect but for where a refused request is said.
// With --serve it answers requests, one a line, until stdin ends or a
// signal (SIGTERM, SIGINT, SIGHUP) stops it after the request in hand: the
// controller's collect conversation, held per node (collect.Serve).
func collectStream(ctx context.Context, args []string, stdin io.Reader, stdout io.Writer) error {
	fs := subcmd.FlagSet("collect")
	serve := fs.Bool("serve", false, "answer requests, one a line on stdin, each with its stream in frames, until stdin ends")
	if err := subcmd.Parse(fs, args); err != nil {
		return err
	}
	if *serve {
		stop, work, release := serveContexts(ctx)
		defer release()
		return collect.Serve(work, stop.Done(), stdin, stdout)
	}
	req, err := collect.ReadRequest(stdin)
	if err != nil {
		return err
	}
	return collect.Write(ctx, req, stdout)
}
