package sandbox

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/taskfiles"
)

// macOS's sandbox (issue 20): Seatbelt, sandbox-exec with a profile the
// wrapper would write per attempt. No macOS machine runs dispatch's tests,
// so the profile is generated and unit-tested here but never used: on
// darwin the probe reports the sandbox unavailable (ProbeBwrap), and
// `sandbox: auto` there stays off until a real Mac has run it.

// darwinUnavailable is why the probe reports no sandbox on macOS.
const darwinUnavailable = "untested on a real Mac; sandbox-exec support is generated but not enabled"

// noSandboxOn is the probe's reply where goos has no sandbox dispatch
// runs, nil on Linux (where bwrap decides).
func noSandboxOn(goos string) *wire.SandboxReply {
	switch goos {
	case "linux":
		return nil
	case "darwin":
		return &wire.SandboxReply{Error: darwinUnavailable, Fix: "run tasks that need sandbox: on on Linux nodes"}
	}
	return &wire.SandboxReply{Error: "no sandbox for " + goos + " (bubblewrap is Linux only)", Fix: "run tasks that need sandbox: on on Linux nodes"}
}

// seatbeltSpec is what an attempt's Seatbelt profile shows of the node.
// Every path is absolute; ~/ paths of sandbox_paths are expanded.
type seatbeltSpec struct {
	// TaskDir is the attempt's task directory: its output/, home/ and
	// tmp/ are read-write, its spec.md read-only.
	TaskDir string
	// WorkDir is the node's work_dir and Homes the node user's home
	// directories: denied but for what is listed here.
	WorkDir string
	Homes   []string
	// Tool are the directories of the tool's installation, read-only.
	Tool []string
	// Repo is a git-native project's repo.git, read-only ("" for none).
	Repo string
	// RO and RW are the node's sandbox_paths.
	RO, RW []string
}

// seatbeltSystem is what every process needs to read on macOS: the
// system, its libraries and dyld's shared caches, /etc, the devices.
var seatbeltSystem = []string{
	"/usr", "/bin", "/sbin", "/System", "/Library", "/opt",
	"/private/etc", "/private/var/db/dyld", "/private/var/db/timezone", "/private/var/select",
	"/System/Volumes/Preboot/Cryptexes", "/dev",
}

// seatbeltDevices may be written by any process: the null device, the
// terminal, the random devices.
var seatbeltDevices = []string{"/dev/null", "/dev/zero", "/dev/tty", "/dev/dtracehelper", "/dev/random", "/dev/urandom"}

// seatbeltCanonical is p as macOS resolves it: /tmp, /var and /etc are
// links into /private, and Seatbelt matches the resolved path. p must be
// absolute and clean, without control characters.
func seatbeltCanonical(p string) (string, error) {
	if !filepath.IsAbs(p) || filepath.Clean(p) != p {
		return "", fmt.Errorf("seatbelt: %q is not an absolute, clean path", p)
	}
	if strings.ContainsFunc(p, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return "", fmt.Errorf("seatbelt: %q holds a control character", p)
	}
	for _, l := range []string{"/tmp", "/var", "/etc"} {
		if Under(p, l) {
			return "/private" + p, nil
		}
	}
	return p, nil
}

// sbplString is s as an SBPL string literal: in double quotes, with \ and
// " escaped by a backslash.
func sbplString(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}

// seatbeltProfile is the SBPL profile of the attempt: deny everything,
// then allow processes, reading the system, the network (open, as on
// Linux for now); deny the node user's homes and the work_dir; then
// allow, last so that they win (SBPL's later rules take precedence), the
// tool's installation and sandbox_paths ro read-only, the task's
// workspace, HOME, tmp and sandbox_paths rw read-write, its spec.md and
// repo.git read-only, and the metadata of their parent directories.
func seatbeltProfile(sp seatbeltSpec) (string, error) {
	canon := func(list []string) ([]string, error) {
		out := make([]string, 0, len(list))
		for _, p := range list {
			c, err := seatbeltCanonical(p)
			if err != nil {
				return nil, err
			}
			out = append(out, c)
		}
		return out, nil
	}
	if sp.TaskDir == "" || sp.WorkDir == "" {
		return "", fmt.Errorf("seatbelt: the task directory and the work_dir are required")
	}
	hidden, err := canon(append([]string{sp.WorkDir}, sp.Homes...))
	if err != nil {
		return "", err
	}
	task, err := canon([]string{sp.TaskDir})
	if err != nil {
		return "", err
	}
	if !Under(task[0], hidden[0]) || task[0] == hidden[0] {
		return "", fmt.Errorf("seatbelt: the task directory %s is not in the work_dir %s", sp.TaskDir, sp.WorkDir)
	}
	ro := append(append([]string{}, sp.Tool...), sp.RO...)
	if sp.Repo != "" {
		ro = append(ro, sp.Repo)
	}
	if ro, err = canon(ro); err != nil {
		return "", err
	}
	rw, err := canon(append([]string{
		filepath.Join(sp.TaskDir, taskfiles.DirOutput), filepath.Join(sp.TaskDir, taskfiles.DirHome), filepath.Join(sp.TaskDir, taskfiles.DirTmp),
	}, sp.RW...))
	if err != nil {
		return "", err
	}
	roFiles := []string{filepath.Join(task[0], taskfiles.FileSpec)}
	for _, p := range append(append([]string{}, ro...), rw...) {
		if p == "/" {
			return "", fmt.Errorf("seatbelt: / cannot be opened")
		}
		for _, h := range hidden {
			if Under(h, p) {
				return "", fmt.Errorf("seatbelt: %s would open all of %s", p, h)
			}
		}
	}

	var b strings.Builder
	rule := func(action string, filter string, paths []string) {
		if len(paths) == 0 {
			return
		}
		fmt.Fprintf(&b, "(%s", action)
		for _, p := range paths {
			fmt.Fprintf(&b, "\n    (%s %s)", filter, sbplString(p))
		}
		b.WriteString(")\n")
	}
	b.WriteString("(version 1)\n(deny default)\n")
	b.WriteString("(allow process-exec process-fork)\n(allow signal (target same-sandbox))\n")
	b.WriteString("(allow sysctl-read)\n(allow mach-lookup)\n(allow ipc-posix-shm)\n")
	b.WriteString("(allow network*)\n")
	rule("allow file-read*", "subpath", seatbeltSystem)
	rule("allow file-read* file-write-data", "literal", seatbeltDevices)
	b.WriteString("(allow file-read* file-write* (regex #\"^/dev/ttys[0-9]+$\"))\n")
	rule("deny file-read* file-write*", "subpath", hidden)
	rule("allow file-read*", "subpath", ro)
	rule("allow file-read*", "literal", roFiles)
	rule("allow file-read* file-write*", "subpath", rw)
	// Listing the way down to what is open (stat, realpath, getcwd).
	parents := map[string]bool{}
	for _, p := range append(append(append([]string{}, ro...), rw...), roFiles...) {
		for d := filepath.Dir(p); ; d = filepath.Dir(d) {
			parents[d] = true
			if d == "/" {
				break
			}
		}
	}
	ps := make([]string, 0, len(parents))
	for d := range parents {
		ps = append(ps, d)
	}
	sort.Strings(ps)
	rule("allow file-read-metadata", "literal", ps)
	return b.String(), nil
}
