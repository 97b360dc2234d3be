package wrapper

// The kill subcommand, over package kill.

import (
	"context"
	"github.com/dispatch-tool/dispatch/wrapper/subcmd"
	"io"
	"strconv"
	"time"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/errkind"
	"github.com/dispatch-tool/dispatch/wrapper/kill"
	"github.com/dispatch-tool/dispatch/wrapper/launchfile"
)

func cmdKill(ctx context.Context, args []string, stdout io.Writer) error {
	fs := subcmd.FlagSet("kill")
	dirFlag := fs.String("dir", "", "task directory")
	graceFlag := fs.String("grace", "", "time between SIGTERM and SIGKILL (default: launch.json's)")
	node := fs.String("node", "", "kill only an attempt of this node (or of no known node)")
	if err := subcmd.Parse(fs, args); err != nil {
		return err
	}
	dir, err := subcmd.DirFlag("kill", *dirFlag)
	if err != nil {
		return err
	}
	grace, graceSet, err := parseGrace(*graceFlag)
	if err != nil {
		return err
	}
	if !graceSet {
		grace = seconds(wire.DefaultGraceSeconds)
		if l, err := launchfile.Read(dir); err == nil {
			grace = seconds(l.GraceSeconds)
		}
	}

	st, err := kill.Task(ctx, dir, *node, grace, graceSet)
	if err != nil {
		return err
	}
	return subcmd.PrintJSON(stdout, st)
}

// parseGrace accepts a Go duration ("30s") or plain seconds ("30", "0.5").
func parseGrace(v string) (time.Duration, bool, error) {
	if v == "" {
		return 0, false, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		f, ferr := strconv.ParseFloat(v, 64)
		if ferr != nil {
			return 0, false, errkind.Usagef("kill: --grace %q: want a duration like 30s", v)
		}
		d = seconds(f)
	}
	if d < 0 {
		return 0, false, errkind.Usagef("kill: --grace %q is negative", v)
	}
	return d, true, nil
}
