package sandbox

import (
	"os"
	"path/filepath"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/proc"
)

// Which looks names up the way the supervisor looks up a tool: in the
// PATH of env (the tool's environment), from /; names not found are left
// out of Found. It says whether the sandbox works here (the wrapper of
// version runs it) and, under bwrap, which of the found tools it would
// refuse (next to this executable, the wrapper, nothing is refused).
func Which(version string, env []string, names []string) wire.WhichReply {
	path := proc.LookupEnv(env, "PATH")
	reply := wire.WhichReply{Found: map[string]string{}, Path: path}
	for _, name := range names {
		if p, err := proc.LookPath(name, path, "/"); err == nil {
			reply.Found[name] = p
		}
	}
	sb := Probe(version)
	reply.Sandbox = &sb
	if exe, err := os.Executable(); err == nil && sb.Sandbox == wire.SandboxBwrap {
		reply.SandboxRefused = Refusals(reply.Found, filepath.Dir(exe), NodeHomes())
	}
	return reply
}
