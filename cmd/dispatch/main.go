// Command dispatch runs a batch of AI coding-agent task specs in parallel
// across local and SSH nodes from one controller. See README.md.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/urfave/cli/v2"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes the CLI and maps errors to exit codes: 0 success, 1 the work
// failed, 2 usage or configuration error.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	app := newApp(stdout, stderr)
	err := app.RunContext(ctx, args)
	if err == nil {
		return 0
	}
	var fail *workFailed
	if errors.As(err, &fail) {
		if fail.msg != "" {
			fmt.Fprintln(stderr, fail.msg)
		}
		return 1
	}
	var ue *usageError
	switch {
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "dispatch: %v\n", ue.err)
		if ue.hint != "" {
			fmt.Fprintf(stderr, "Try: %s\n", ue.hint)
		}
		return 2
	case isConfigError(err):
		fmt.Fprintf(stderr, "dispatch: %v\n", err)
		return 2
	case errors.Is(err, context.Canceled):
		fmt.Fprintln(stderr, "dispatch: interrupted")
		return 1
	}
	fmt.Fprintf(stderr, "dispatch: %v\n", err)
	return 1
}

func newApp(stdout, stderr io.Writer) *cli.App {
	return &cli.App{
		Name:                 "dispatch",
		Usage:                "run a batch of AI coding-agent tasks in parallel across machines",
		Writer:               stdout,
		ErrWriter:            stderr,
		EnableBashCompletion: true,
		HideVersion:          true,
		Flags:                globalFlags(),
		Commands: []*cli.Command{
			validateCommand(),
			startCommand(),
			statusCommand(),
			reportCommand(),
		},
		// Errors reach run, which alone decides the exit code.
		ExitErrHandler: func(*cli.Context, error) {},
		OnUsageError: func(_ *cli.Context, err error, _ bool) error {
			return &usageError{err: err, hint: "dispatch --help"}
		},
		CommandNotFound: func(c *cli.Context, name string) {
			fmt.Fprintf(c.App.ErrWriter, "dispatch: unknown command %q\nTry: dispatch --help\n", name)
		},
	}
}
