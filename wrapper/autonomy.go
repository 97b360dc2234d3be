package wrapper

import (
	"sort"
	"strings"
)

// toolArgvEnv is the tool's command and environment: launch.json's
// sandbox_command and sandbox_env where the attempt really runs under
// bwrap, else its command and the environment as built. The controller
// cannot know for sandbox: auto whether bwrap works here; the agent runs
// autonomously only where it is confined.
func (s *supervisor) toolArgvEnv() ([]string, []string) {
	if s.sandbox == nil {
		return s.launch.Command, s.env
	}
	command := s.launch.Command
	if len(s.launch.SandboxCommand) > 0 {
		command = s.launch.SandboxCommand
	}
	return command, setEnv(s.env, s.launch.SandboxEnv)
}

// setEnv returns env with the variables of m set over it (in key order).
func setEnv(env []string, m map[string]string) []string {
	if len(m) == 0 {
		return env
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]string, 0, len(env)+len(m))
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if _, ok := m[k]; !ok {
			out = append(out, kv)
		}
	}
	for _, k := range keys {
		out = append(out, k+"="+m[k])
	}
	return out
}
