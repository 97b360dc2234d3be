package wrapper

import (
	"context"
	"github.com/dispatch-tool/dispatch/wrapper/subcmd"
	"io"
	"os"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/errkind"
	"github.com/dispatch-tool/dispatch/wrapper/launchfile"
	"github.com/dispatch-tool/dispatch/wrapper/limits"
	"github.com/dispatch-tool/dispatch/wrapper/proc"
	"github.com/dispatch-tool/dispatch/wrapper/sandbox"
)

// cmdWhich looks executables up the way the supervisor looks up a tool:
// in the PATH of the tool's environment, which is the wrapper's own
// overlaid with the JSON map of variables on stdin (the api_mode's env may
// set PATH). Names not found are left out of Found.
func cmdWhich(args []string, stdin io.Reader, stdout io.Writer) error {
	if len(args) == 0 {
		return errkind.Usagef("which: name the executables to look for")
	}
	extra, err := launchfile.ReadEnv(stdin)
	if err != nil {
		return err
	}
	env := proc.BuildEnv(os.Environ(), extra, wire.Launch{}, "/", "/")
	return subcmd.PrintJSON(stdout, sandbox.Which(Version, env, args))
}

// cmdSandbox prints whether the sandbox works on this node.
func cmdSandbox(args []string, stdout io.Writer) error {
	fs := subcmd.FlagSet("sandbox")
	if err := subcmd.Parse(fs, args); err != nil {
		return err
	}
	// The controller asks when it connects: a fresh answer, kept for the
	// attempts that follow.
	reply := sandbox.ProbeWithCache(context.Background(), Version, true)
	reply.Limits = limits.LimitEnforcement()
	return subcmd.PrintJSON(stdout, reply)
}
