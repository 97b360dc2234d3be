// Command dispatch-wrapper is the node-side half of dispatch: it starts,
// supervises and reports on agent tasks. The controller installs it on every
// node and drives it over the node transport; see docs/PROTOCOL.md.
package main

import (
	"os"
	_ "time/tzdata" // rate-limit reset times name IANA zones; a node may have no zone database

	"github.com/dispatch-tool/dispatch/wrapper"
)

func main() {
	os.Exit(wrapper.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
