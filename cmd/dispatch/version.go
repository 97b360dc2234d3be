package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/urfave/cli/v2"

	"github.com/dispatch-tool/dispatch/nodes"
)

// version and commit are set at link time by make build (-X
// main.version=... -X main.commit=...); a plain go build leaves them empty
// and the build's own information (when Go stamped it) is used.
var version, commit string

func versionCommand() *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print dispatch's version, the commit it was built from and the wrapper version it installs on nodes (also --version)",
		Action: func(c *cli.Context) error {
			return printVersion(c.App.Writer)
		},
	}
}

// printVersion prints the version, the commit (with +dirty for a build of
// a modified checkout) and the wrapper version, which nodes are checked
// against on every connect.
func printVersion(w io.Writer) error {
	v, rev := buildVersion()
	wv, err := nodes.NewWrappers().Version()
	if err != nil {
		wv = "unknown (" + err.Error() + ")"
	}
	fmt.Fprintf(w, "dispatch %s\ncommit: %s\nwrapper: %s\ngo: %s %s/%s\n", v, rev, wv, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return nil
}

// buildVersion is this binary's version ("dev" for a plain go build) and
// the commit it was built from.
func buildVersion() (v, rev string) {
	v, rev, dirty := version, commit, false
	if bi, ok := debug.ReadBuildInfo(); ok && rev == "" {
		if v == "" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
	}
	if v == "" || v == "(devel)" {
		v = "dev"
	}
	if rev == "" {
		rev = "unknown (built without make build)"
	}
	if dirty {
		rev += "+dirty"
	}
	return v, rev
}
