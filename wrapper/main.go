package wrapper

import (
	"context"
	"fmt"
	"github.com/dispatch-tool/dispatch/wrapper/gitcmd"
	"github.com/dispatch-tool/dispatch/wrapper/subcmd"
	"io"
	"os"
	"os/signal"
	"runtime"
	"syscall"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/egress"
	"github.com/dispatch-tool/dispatch/wrapper/errkind"
	"github.com/dispatch-tool/dispatch/wrapper/limits"
)

// superviseCommand is the hidden subcommand `run` re-executes itself with.
const superviseCommand = "supervise"

const usageText = `usage: dispatch-wrapper <command> [flags]

commands (see docs/PROTOCOL.md):
  version
  run    --dir D                  (stdin: JSON map of environment variables)
  run    [--serve]                (stdin: launch documents, one a line with --serve)
  status --root R [--project P]... [--live] [--node N]  (--live: stdin {"tasks":["P/ID",…]})
  kill   --dir D [--grace 30s] [--node N]
  tail   --dir D [--follow]
  which  NAME...                  (stdin: JSON map of environment variables)
  sandbox                         (whether bwrap works here for this user)
  untar  --archive A --dir D [--merge]  (replaces D, or with --merge its top entries, with A's tree; removes A)
  inputs --dir D                  (stdin: dependencies to copy from this node into D, verified)
  tar    --dir D --out A [--max-bytes N]
  collect [--serve]               (stdin: the finished attempts; stdout: one tar of their files; --serve: a request a line, each answer in frames)
  git-receive --repo R --commit C   (stdin: a pack completing base commit C)
  git-have    --repo R
  git-pack    --dir D --base B --branch dispatch/P/ID --out A
`

// Main runs the wrapper with the command line args (without the program
// name) and returns the process exit status: 0 on success, 1 after printing
// a wire.ErrorReply on stdout. Diagnostics for humans go to stderr.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		return fail(stdout, errkind.Usagef("no command; want version, run, status, kill or tail"))
	}
	name, rest := args[0], args[1:]
	if name == limits.LimitExecCommand {
		// Replaced by the program it runs; it prints only on failure.
		if err := limits.CmdLimitExec(rest); err != nil {
			fmt.Fprintln(stderr, "dispatch-wrapper:", err)
			return 127
		}
		return 0
	}
	if name == egress.NetInitCmd {
		// The first process in a sandbox with a network allow list.
		return egress.CmdNetInit(rest, stderr)
	}
	if name == superviseCommand {
		// The supervisor handles SIGTERM itself: it is how `kill` asks it
		// to stop, so it must not cancel a context and vanish.
		return supervise(rest, stdin, stderr)
	}

	// Main is the wrapper's main: the one place the root context is made.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	var err error
	switch name {
	case "version":
		err = cmdVersion(rest, stdout)
	case "run":
		err = cmdRun(ctx, rest, stdin, stdout)
	case "status":
		err = cmdStatus(ctx, rest, stdin, stdout)
	case "kill":
		err = cmdKill(ctx, rest, stdout)
	case "tail":
		err = cmdTail(ctx, rest, stdout)
	case "which":
		err = cmdWhich(rest, stdin, stdout)
	case "sandbox":
		err = cmdSandbox(rest, stdout)
	case "watch":
		err = cmdWatch(ctx, rest, stdin, stdout)
	case "launch":
		err = cmdLaunch(ctx, rest, stdin, stdout)
	case prepareCommand:
		err = cmdPrepare(ctx, rest, stdin, stdout)
	case "untar":
		err = cmdUntar(ctx, rest, stdin, stdout)
	case "inputs":
		err = cmdInputs(ctx, rest, stdin, stdout)
	case "tar":
		err = cmdTar(ctx, rest, stdout)
	case "collect":
		err = cmdCollect(ctx, rest, stdin, stdout, stderr)
	case "git-receive":
		err = gitcmd.Receive(ctx, rest, stdin, stdout)
	case "git-have":
		err = gitcmd.Have(ctx, rest, stdout)
	case "git-pack":
		err = gitcmd.Pack(ctx, rest, stdout)
	case "git-spare":
		err = gitcmd.Spare(ctx, rest, stdout)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stderr, usageText)
		return 0
	default:
		err = errkind.Usagef("unknown command %q; want version, run, status, kill or tail", name)
	}
	if err != nil {
		return fail(stdout, err)
	}
	return 0
}

func fail(stdout io.Writer, err error) int {
	subcmd.PrintJSON(stdout, wire.ErrorReply{Error: err.Error(), Kind: errkind.Of(err)})
	return 1
}

func cmdVersion(args []string, stdout io.Writer) error {
	if err := subcmd.Parse(subcmd.FlagSet("version"), args); err != nil {
		return err
	}
	return subcmd.PrintJSON(stdout, wire.VersionReply{Version: Version, OS: runtime.GOOS, Arch: runtime.GOARCH})
}
