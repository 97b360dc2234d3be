package wrapper

import (
	"io"
	"os"

	"github.com/dispatch-tool/dispatch/wire"
)

// cmdWhich looks executables up the way the supervisor looks up a tool:
// in the PATH of the tool's environment, which is the wrapper's own
// overlaid with the JSON map of variables on stdin (the api_mode's env may
// set PATH). Names not found are left out of Found.
func cmdWhich(args []string, stdin io.Reader, stdout io.Writer) error {
	if len(args) == 0 {
		return usageErrorf("which: name the executables to look for")
	}
	extra, err := readEnvMap(stdin)
	if err != nil {
		return err
	}
	env := buildEnv(os.Environ(), extra, wire.Launch{}, "/", "/")
	path := lookupEnv(env, "PATH")
	reply := wire.WhichReply{Found: map[string]string{}, Path: path}
	for _, name := range args {
		if p, err := lookPath(name, path, "/"); err == nil {
			reply.Found[name] = p
		}
	}
	sb := sandboxProbe()
	reply.Sandbox = &sb
	return printJSON(stdout, reply)
}
