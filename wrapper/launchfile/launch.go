package launchfile

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/dispatch-tool/dispatch/internal/netallow"
	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/errkind"
	"github.com/dispatch-tool/dispatch/wrapper/limits"
	"github.com/dispatch-tool/dispatch/wrapper/taskfiles"
	"github.com/dispatch-tool/dispatch/wrapper/tree"
)

// maxResumePrompt bounds launch.json's resume_prompt: it goes through a
// pipe the wrapper writes without waiting.
const maxResumePrompt = 4096

// minLogLimit keeps room for the cut marker and a useful tail.
const minLogLimit = 1024

// checkRepo rejects a launch.json repo whose dir is not a repo.git path,
// whose base is not a full commit id or whose branch is not under
// dispatch/.
func checkRepo(r *wire.LaunchRepo) error {
	if !filepath.IsAbs(r.Dir) || filepath.Clean(r.Dir) != r.Dir || filepath.Base(r.Dir) != "repo.git" {
		return fmt.Errorf("repo.dir %q: want an absolute, clean path ending in repo.git", r.Dir)
	}
	if !wire.IsCommitID(r.Base) {
		return fmt.Errorf("repo.base %q is not a full commit id", r.Base)
	}
	if r.Spares < 0 || r.Spares > 64 {
		return fmt.Errorf("repo.spares %d: want 0 to 64", r.Spares)
	}
	if !strings.HasPrefix(r.Branch, "dispatch/") || strings.Contains(r.Branch, "..") || strings.ContainsAny(r.Branch, " ~^:?*[\\\x00") || strings.HasSuffix(r.Branch, "/") {
		return fmt.Errorf("repo.branch %q: want a branch name under dispatch/", r.Branch)
	}
	return nil
}

// checkSandboxPaths rejects sandbox paths that are not absolute or ~/,
// clean, and other than / and the home.
func checkSandboxPaths(sp *wire.SandboxPaths) error {
	if sp == nil {
		return nil
	}
	for _, p := range append(append([]string{}, sp.RO...), sp.RW...) {
		rest, home := strings.CutPrefix(p, "~/")
		if !home {
			rest = strings.TrimPrefix(p, "/")
		}
		if (!home && !filepath.IsAbs(p)) || rest == "" || filepath.Clean("/"+rest) != "/"+rest {
			return fmt.Errorf("sandbox_paths: %q: want an absolute or ~/ path, clean, other than / and ~", p)
		}
	}
	return nil
}

// normalizeLaunch fills in l's defaults and rejects what no attempt could
// run with.
func Normalize(l *wire.Launch) error {
	if len(l.Command) == 0 || l.Command[0] == "" {
		return fmt.Errorf("command is empty")
	}
	switch l.Stdin {
	case "", "spec":
	case "resume":
		if !l.Resume || l.ResumePrompt == "" || len(l.ResumePrompt) > maxResumePrompt {
			return fmt.Errorf("stdin \"resume\" needs resume: true and a resume_prompt of 1 to %d bytes", maxResumePrompt)
		}
	default:
		return fmt.Errorf("stdin %q: want \"spec\", \"resume\" or \"\"", l.Stdin)
	}
	if len(l.SandboxCommand) > 0 && (l.SandboxCommand[0] == "" || l.Sandbox == "") {
		return fmt.Errorf("sandbox_command needs sandbox and a program")
	}
	if l.StallSeconds < 0 {
		return fmt.Errorf("negative stall_seconds")
	}
	if l.Agent != "" && !wire.IsAgent(l.Agent) {
		return fmt.Errorf("agent %q: want one of %v or none", l.Agent, wire.Agents)
	}
	switch l.Sandbox {
	case "":
	case wire.SandboxBwrap, wire.SandboxAuto:
		if !filepath.IsAbs(l.WorkDir) || filepath.Clean(l.WorkDir) != l.WorkDir || l.WorkDir == "/" {
			return fmt.Errorf("sandbox %q needs work_dir, an absolute, clean path other than /", l.Sandbox)
		}
	default:
		return fmt.Errorf("sandbox %q: want %q, %q or none", l.Sandbox, wire.SandboxBwrap, wire.SandboxAuto)
	}
	switch l.Network {
	case "", wire.NetworkOpen, wire.NetworkNone:
		if len(l.NetworkAllow) > 0 || l.NetworkDefault {
			return fmt.Errorf("network_allow and network_default need network %q", wire.NetworkAllow)
		}
	case wire.NetworkAllow:
		if _, err := AllowList(l); err != nil {
			return err
		}
	default:
		return fmt.Errorf("network %q: want %q, %q or %q", l.Network, wire.NetworkOpen, wire.NetworkNone, wire.NetworkAllow)
	}
	if err := checkSandboxPaths(l.SandboxPaths); err != nil {
		return err
	}
	if l.Limits != nil {
		if err := limits.CheckLimits(l.Limits); err != nil {
			return err
		}
	}
	if err := tree.CheckBase(l.Base); err != nil {
		return err
	}
	if l.Repo != nil {
		if l.Base != "" {
			return fmt.Errorf("base and repo are exclusive")
		}
		if err := checkRepo(l.Repo); err != nil {
			return err
		}
	}
	if l.Attempt < 0 || l.TimeoutSeconds < 0 || l.GraceSeconds < 0 || l.HeartbeatSeconds < 0 || l.LogLimitBytes < 0 {
		return fmt.Errorf("negative attempt, timeout, grace, heartbeat or log limit")
	}
	if l.Attempt == 0 {
		l.Attempt = 1
	}
	if l.TimeoutSeconds == 0 {
		l.TimeoutSeconds = wire.DefaultTimeoutSeconds
	}
	if l.GraceSeconds == 0 {
		l.GraceSeconds = wire.DefaultGraceSeconds
	}
	if l.HeartbeatSeconds == 0 {
		l.HeartbeatSeconds = wire.DefaultHeartbeatSeconds
	}
	if l.LogLimitBytes == 0 {
		l.LogLimitBytes = wire.DefaultLogLimitBytes
	}
	if l.LogLimitBytes < minLogLimit {
		l.LogLimitBytes = minLogLimit
	}
	return nil
}

// AllowList is l.NetworkAllow parsed.
func AllowList(l *wire.Launch) (netallow.List, error) {
	var out netallow.List
	for _, s := range l.NetworkAllow {
		e, err := netallow.Parse(s)
		if err != nil {
			return nil, fmt.Errorf("network_allow: %w", err)
		}
		out = append(out, e)
	}
	return out, nil
}

// readLaunch reads and normalizes D/launch.json.
func Read(dir string) (wire.Launch, error) {
	var l wire.Launch
	data, err := taskfiles.ReadControlFileMax(filepath.Join(dir, taskfiles.FileLaunch), taskfiles.MaxLaunchFile)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return l, &errkind.Error{Kind: wire.KindNotFound, Err: fmt.Errorf("no %s in %s", taskfiles.FileLaunch, dir)}
		}
		return l, &errkind.Error{Kind: wire.KindIO, Err: fmt.Errorf("read %s: %w", taskfiles.FileLaunch, err)}
	}
	if err := json.Unmarshal(data, &l); err != nil {
		return l, &errkind.Error{Kind: wire.KindUsage, Err: fmt.Errorf("parse %s: %w", taskfiles.FileLaunch, err)}
	}
	if err := Normalize(&l); err != nil {
		return l, &errkind.Error{Kind: wire.KindUsage, Err: fmt.Errorf("invalid %s: %w", taskfiles.FileLaunch, err)}
	}
	if l.Task == "" {
		l.Task = filepath.Base(dir)
	}
	if l.Project == "" {
		l.Project = filepath.Base(filepath.Dir(filepath.Dir(dir)))
	}
	return l, nil
}
