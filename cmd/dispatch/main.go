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
	"strings"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/dispatch-tool/dispatch/internal/termtext"
)

func main() {
	ctx, cancel := context.WithCancelCause(context.Background())
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		if s, ok := <-sigs; ok {
			cancel(interrupted{s})
		}
	}()
	stdout, stderr := openDetachedLog(os.Stdout, os.Stderr)
	code := run(ctx, os.Args, stdout, stderr)
	signal.Stop(sigs)
	close(sigs)
	os.Exit(interruptedCode(context.Cause(ctx), code))
}

// interrupted is the cause of the root context's end when a signal
// arrived.
type interrupted struct{ sig os.Signal }

func (i interrupted) Error() string { return "interrupted by " + i.sig.String() }

// interruptedCode is the exit code of a command that ended with code
// after cause: 130 (128 + SIGINT) when Ctrl-C ended it, as shells expect
// of a program the operator interrupted, so `dispatch start p && next`
// does not go on. SIGTERM (a service manager stopping `serve`) keeps the
// command's own code.
func interruptedCode(cause error, code int) int {
	var i interrupted
	if errors.As(cause, &i) && i.sig == os.Interrupt {
		return 128 + int(syscall.SIGINT)
	}
	return code
}

// run executes the CLI and maps errors to exit codes: 0 success, 1 the work
// failed, 2 usage or configuration error.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	app := newApp(stdout, stderr)
	err := app.RunContext(ctx, flagsFirst(app, args))
	if err == nil {
		return 0
	}
	// Errors may carry what a node or the controller said.
	stderr = cleanWriter{stderr}
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

// cleanWriter escapes terminal controls in what is written to it
// (termtext.Clean); run prints a command's error through it.
type cleanWriter struct{ w io.Writer }

func (c cleanWriter) Write(p []byte) (int, error) {
	if _, err := io.WriteString(c.w, termtext.Clean(string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}

func newApp(stdout, stderr io.Writer) *cli.App {
	usageErr := func(_ *cli.Context, err error, _ bool) error {
		return &usageError{err: err, hint: "dispatch --help"}
	}
	app := &cli.App{
		Name:                 "dispatch",
		Usage:                "run a batch of AI coding-agent tasks in parallel across machines",
		Writer:               stdout,
		ErrWriter:            stderr,
		EnableBashCompletion: true,
		HideVersion:          true,
		Flags:                globalFlags(),
		Commands: []*cli.Command{
			initCommand(),
			validateCommand(),
			startCommand(),
			runCommand(),
			statusCommand(),
			reportCommand(),
			runsCommand(),
			serveCommand(),
			scheduleCommand(),
			nodesCommand(),
			retryCommand(),
			cancelCommand(),
			stopCommand(),
			logsCommand(),
			eventsCommand(),
			cleanupCommand(),
			pruneCommand(),
			mcpCommand(),
			completionCommand(),
			versionCommand(),
		},
		// Errors reach run, which alone decides the exit code.
		ExitErrHandler: func(*cli.Context, error) {},
		OnUsageError:   usageErr,
		// Without an Action, urfave/cli answers an unknown command with help
		// and exit 0.
		Action: func(c *cli.Context) error {
			if c.Bool("version") {
				return printVersion(c.App.Writer)
			}
			if c.Args().Present() {
				return usagef("dispatch --help", "unknown command %q", c.Args().First())
			}
			return cli.ShowAppHelp(c)
		},
		CommandNotFound: func(c *cli.Context, name string) {
			fmt.Fprintf(c.App.ErrWriter, "dispatch: unknown command %q\nTry: dispatch --help\n", name)
		},
	}
	// A command without its own OnUsageError prints its whole help and
	// returns a plain error, which would exit 1.
	for _, cmd := range app.Commands {
		if cmd.OnUsageError == nil {
			cmd.OnUsageError = func(_ *cli.Context, err error, _ bool) error {
				return &usageError{err: err, hint: "dispatch " + cmd.Name + " --help"}
			}
		}
	}
	noHelpCommand(app.Commands)
	return app
}

// noHelpCommand keeps urfave/cli from adding its `help` command (alias `h`)
// to the commands that take arguments: `dispatch validate h` would print
// help instead of validating the project h. --help and -h stay.
func noHelpCommand(cmds []*cli.Command) {
	for _, cmd := range cmds {
		if len(cmd.Subcommands) > 0 {
			noHelpCommand(cmd.Subcommands)
			continue
		}
		cmd.HideHelpCommand = true
		if cmd.CustomHelpTemplate == "" {
			// Without its help command, urfave/cli would print a command's
			// --help with the template of a command that has subcommands.
			cmd.CustomHelpTemplate = cli.CommandHelpTemplate
		}
	}
}

// flagsFirst moves a command's flags that follow its arguments in front of
// them, so that `dispatch status demo --json` works as SPEC §9 writes it:
// urfave/cli v2 stops parsing flags at the first argument. Arguments after
// "--" stay where they are.
func flagsFirst(app *cli.App, args []string) []string {
	i := 1
	for i < len(args) && isFlag(args[i]) {
		if takesValue(app.Flags, args[i]) {
			i++
		}
		i++
	}
	if i >= len(args) {
		return args
	}
	cmd := app.Command(args[i])
	if cmd == nil {
		return args
	}
	i++
	// Descend into a subcommand (`nodes check --json`) named right after
	// its command's own leading flags.
	for {
		j := i
		for j < len(args) && isFlag(args[j]) {
			if takesValue(cmd.Flags, args[j]) {
				j++
			}
			j++
		}
		if j >= len(args) {
			break
		}
		sub := cmd.Command(args[j])
		if sub == nil {
			break
		}
		cmd, i = sub, j+1
	}
	out := append([]string(nil), args[:i]...)
	var pos []string
	for ; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			pos = append(pos, args[i:]...)
			break
		}
		if !isFlag(a) {
			pos = append(pos, a)
			continue
		}
		out = append(out, a)
		if takesValue(cmd.Flags, a) && i+1 < len(args) {
			i++
			out = append(out, args[i])
		}
	}
	return append(out, pos...)
}

// boolLike reports whether f stands alone: a bool flag, or one whose value
// may be left out (serve's --http): the argument after it is an argument,
// as the flag package reads it.
func boolLike(f cli.Flag) bool {
	switch f := f.(type) {
	case *cli.BoolFlag:
		return true
	case *cli.GenericFlag:
		b, ok := f.Value.(interface{ IsBoolFlag() bool })
		return ok && b.IsBoolFlag()
	}
	return false
}

func isFlag(arg string) bool { return len(arg) > 1 && arg[0] == '-' && arg != "--" }

// takesValue reports whether arg is one of flags that takes its value from
// the next argument.
func takesValue(flags []cli.Flag, arg string) bool {
	if strings.Contains(arg, "=") {
		return false
	}
	name := strings.TrimLeft(arg, "-")
	for _, f := range flags {
		for _, n := range f.Names() {
			if n == name {
				return !boolLike(f)
			}
		}
	}
	return false
}
