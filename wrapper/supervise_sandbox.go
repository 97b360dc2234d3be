package wrapper

// The supervisor's side of the sandbox (package sandbox): deciding whether
// and how the tool is confined, its network, its home, and the note a
// failure gets.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/attempt"
	"github.com/dispatch-tool/dispatch/wrapper/egress"
	"github.com/dispatch-tool/dispatch/wrapper/gate"
	"github.com/dispatch-tool/dispatch/wrapper/launchfile"
	"github.com/dispatch-tool/dispatch/wrapper/sandbox"
	"github.com/dispatch-tool/dispatch/wrapper/taskfiles"
)

// decideSandbox settles whether this attempt runs in the sandbox: under
// bwrap when launch.json asks for it (or for auto) and bwrap works here
// (probe says whether); an attempt that must be sandboxed where it cannot
// be fails to start. An agent's default allow list does not make it so.
// attempt.DecideSandbox plans it; this builds the sandbox of the plan.
func (s *supervisor) decideSandbox(probe func() wire.SandboxReply) {
	plan := attempt.DecideSandbox(&s.launch, s.dir, probe)
	if plan.Err != "" || plan.Bwrap == "" {
		s.sandboxErr, s.sandboxPermanent = plan.Err, plan.Permanent
		return
	}
	exe, err := os.Executable()
	if err != nil {
		s.sandboxErr = "sandbox: find own executable: " + err.Error()
		return
	}
	repo := ""
	if s.launch.Repo != nil {
		repo = s.launch.Repo.Dir
	}
	homes := sandbox.NodeHomes()
	sp := sandbox.NewSpec(plan.Bwrap, s.dir, s.launch.WorkDir, homes, filepath.Dir(exe), repo)
	if s.launch.Inputs {
		// Seen, never written: the dependencies' outputs are theirs.
		sp.Ro = append(sp.Ro, filepath.Join(s.dir, wire.InputsDir))
	}
	home := ""
	if len(homes) > 0 {
		home = homes[0]
	}
	missing, err := sp.OpenPaths(s.launch.SandboxPaths, home, s.dir, s.launch.WorkDir)
	if err != nil {
		s.sandboxErr = err.Error() + "; fix: correct the node's sandbox_paths in nodes.yaml"
		s.sandboxPermanent = true
		return
	}
	for _, p := range missing {
		s.logger.Info("sandbox_paths: not on this node, skipped", "path", p)
	}
	sp.NoNetwork = plan.NoNetwork
	s.sandbox = sp
	// Where the agent CLI would read its settings and login unconfined:
	// its private HOME gets copies of them (see sandbox/agenthome.go).
	var unset []string
	if af, ok := sandbox.AgentHomeFiles[s.launch.Agent]; ok {
		_, env := s.toolArgvEnv()
		s.agentSrc, s.agentSrcDir, s.agentSrcErr = sandbox.AgentSource(s.launch.Agent, env)
		unset = append(unset, af.DirVar)
	}
	s.env = sandbox.Env(s.env, s.dir, unset...)
	if s.launch.Network == wire.NetworkAllow {
		allow, _ := launchfile.AllowList(&s.launch) // checked with launch.json
		sp.Net = &sandbox.Net{Dir: filepath.Join(s.dir, egress.DirNet), Exe: exe, Port: egress.ProxyPort(allow),
			Forwards: egress.LoopbackForwards(allow)}
		s.allow = allow
		s.env = egress.ProxyEnv(s.env, sp.Net.Port)
	}
}

// startNet serves the attempt's network allow list, when it has one:
// a fresh <task>/net with the proxy's socket and the mount point of
// net-init. The caller closes the proxy when the attempt ends.
func (s *supervisor) startNet() error {
	if s.sandbox == nil || s.sandbox.Net == nil {
		return nil
	}
	dir := s.sandbox.Net.Dir
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("network: clear %s: %w", dir, err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return fmt.Errorf("network: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, egress.FileNetInit), nil, 0o500); err != nil {
		return fmt.Errorf("network: %w", err)
	}
	p, err := egress.StartNetProxy(filepath.Join(dir, egress.FileNetSock), s.allow, func(format string, args ...any) {
		fmt.Fprintf(s.tlog, "dispatch-wrapper: "+format+"\n", args...)
	})
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.proxy = p
	s.mu.Unlock()
	return nil
}

// stopNet stops the attempt's proxy, if it runs.
func (s *supervisor) stopNet() {
	s.mu.Lock()
	p := s.proxy
	s.proxy = nil
	s.mu.Unlock()
	if p != nil {
		p.Close()
		s.netRefused = p.Refused()
	}
}

// sandboxName is status.json's sandbox.
func (s *supervisor) sandboxName() string {
	if s.sandbox != nil {
		return wire.SandboxBwrap
	}
	return ""
}

// prepareHome makes the attempt's private HOME (sandbox.PrepareHome) with
// the agent CLI's files.
func (s *supervisor) prepareHome() error {
	return sandbox.PrepareHome(s.dir, s.launch.Resume, s.copyAgentFiles, func(err error) {
		s.logger.Warn("no git identity in the sandbox's HOME", taskfiles.LogKeyErr, err)
	})
}

// sandbox.CopyAgentFiles copies the agent CLI's settings and login into the
// private HOME; what is refused is said in wrapper.log.
func (s *supervisor) copyAgentFiles(home string) error {
	if _, ok := sandbox.AgentHomeFiles[s.launch.Agent]; !ok {
		return nil
	}
	if s.agentSrcErr != nil {
		s.logger.Warn("the agent's settings and login are not copied into the sandbox's HOME", taskfiles.LogKeyErr, s.agentSrcErr)
	}
	return sandbox.CopyAgentFiles(s.launch.Agent, s.agentSrc, s.agentSrcDir, home, func(path string, err error) {
		s.logger.Warn("not copied into the sandbox's HOME", taskfiles.LogKeyPath, path, taskfiles.LogKeyErr, err)
	})
}

// sandbox.RemoveAgentLogins removes the agent CLI's login files from the private
// HOME once the attempt's processes are gone: no copy of a credential
// stays in the attempt's directory.
func (s *supervisor) removeAgentLogins() {
	if s.sandbox == nil {
		return
	}
	if err := sandbox.RemoveAgentLogins(s.launch.Agent, filepath.Join(s.dir, taskfiles.DirHome)); err != nil {
		s.logger.Warn("remove the agent's login from the sandbox's HOME", taskfiles.LogKeyErr, err)
	}
}

// sandboxed returns cmd run under bwrap: the same program, arguments,
// working directory and environment (which bwrap passes on to it).
func (s *supervisor) sandboxed(cmd *exec.Cmd) *exec.Cmd {
	argv := append([]string{cmd.Path}, cmd.Args[1:]...)
	args := s.sandbox.Args(cmd.Dir, argv)
	return &exec.Cmd{Path: s.sandbox.Bwrap, Args: args, Env: cmd.Env, Dir: cmd.Dir, Stdin: cmd.Stdin}
}

// failureNote is what the error of the final status st of an attempt
// that ended with res adds: the destinations its network allow list
// refused, with the line to add, when it failed and there were some (a
// refusal seen, so no guess besides); else the sandbox's note.
func (s *supervisor) failureNote(st *wire.Status, res outcome) string {
	if note := sandbox.RefusedNote(s.netRefused, s.launch.NetworkDefault); st.Status == wire.StatusFailed && note != "" {
		return note
	}
	return s.sandboxFailureNote(st, res.confined && res.resultErr == "")
}

// sandboxFailureNote is the note for the final status st of an attempt
// whose processes ran confined or not (confined); "" when none applies.
func (s *supervisor) sandboxFailureNote(st *wire.Status, confined bool) string {
	if s.sandbox == nil || !sandbox.NoteApplies(st.Status, st.ErrorClass, confined) {
		return ""
	}
	if st.ErrorClass == wire.ClassGate {
		sp := gate.Spec(s.sandbox, s.dir, filepath.Join(s.dir, taskfiles.DirGate))
		return sandbox.Note("its gate", s.launch.Node, sp.Writable())
	}
	return sandbox.Note("it", s.launch.Node, s.sandbox.Writable())
}
