package subcmd

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/dispatch-tool/dispatch/wrapper/errkind"
	"github.com/dispatch-tool/dispatch/wrapper/taskfiles"
)

// PrintJSON writes v as one line of JSON.
func PrintJSON(w io.Writer, v any) error {
	if err := json.NewEncoder(w).Encode(v); err != nil {
		return errkind.IO(fmt.Errorf("write reply: %w", err))
	}
	return nil
}

// FlagSet returns a flag set that reports errors instead of printing
// them.
func FlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

// Parse parses args into fs; an error or a positional argument is a
// usage error.
func Parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return errkind.Usagef("%s: %v", fs.Name(), err)
	}
	if fs.NArg() > 0 {
		return errkind.Usagef("%s: unexpected argument %q", fs.Name(), fs.Arg(0))
	}
	return nil
}

// DirFlag resolves a required directory flag (--dir of run, kill and
// tail; --repo of the git commands) of cmd.
func DirFlag(cmd, dir string) (string, error) {
	if dir == "" {
		return "", errkind.Usagef("%s: --dir is required", cmd)
	}
	abs, err := taskfiles.ExpandPath(dir)
	if err != nil {
		return "", errkind.Usagef("%s: %v", cmd, err)
	}
	return abs, nil
}

// StringList is a repeatable string flag.
type StringList []string

func (s *StringList) String() string     { return strings.Join(*s, ",") }
func (s *StringList) Set(v string) error { *s = append(*s, v); return nil }
