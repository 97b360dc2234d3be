package nodes

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path"
	"strings"
)

// Installed is a node's wrapper, ready to run.
type Installed struct {
	WorkDir string // absolute work_dir on the node
	Path    string // absolute path of the wrapper binary
	Version string
	OS      string
	Arch    string
	// Reinstalled is set when this call uploaded the wrapper.
	Reinstalled bool
}

// versionReply is the wrapper's `version` output (see wrapper.VersionReply;
// nodes does not import the wrapper package).
type versionReply struct {
	Version string `json:"version"`
	OS      string `json:"os"`
	Arch    string `json:"arch"`
}

// EnsureWrapper resolves workDir ("~/..." is the node user's home) and makes
// sure the wrapper of this controller's version is installed there, the
// mutagen way: ask the installed one for its version; when it is missing or
// another version, probe the platform with `uname -s -m`, upload the matching
// binary under a hidden temporary name and rename it into
// <work_dir>/.bin/dispatch-wrapper-<version> (Transport.Put does both), then
// ask again. It reinstalls at most once.
func EnsureWrapper(ctx context.Context, tr Transport, workDir string, w *Wrappers) (Installed, error) {
	wd, err := ExpandHome(ctx, tr, workDir)
	if err != nil {
		return Installed{}, fmt.Errorf("resolve work_dir %s: %w", workDir, err)
	}
	version, err := w.Version()
	if err != nil {
		return Installed{}, err
	}
	inst := Installed{WorkDir: wd, Path: path.Join(wd, ".bin", "dispatch-wrapper-"+version), Version: version}
	for try := 0; ; try++ {
		res, err := tr.Exec(ctx, []string{inst.Path, "version"}, nil)
		if err != nil {
			return inst, fmt.Errorf("check wrapper: %w", err)
		}
		var v versionReply
		if res.ExitCode == 0 && json.Unmarshal(res.Stdout, &v) == nil && v.Version == version {
			inst.OS, inst.Arch = v.OS, v.Arch
			return inst, nil
		}
		if try == 1 {
			return inst, fmt.Errorf("wrapper at %s does not work after install (exit %d: %s)", inst.Path, res.ExitCode,
				strings.TrimSpace(string(res.Stderr)+string(res.Stdout)))
		}
		if err := install(ctx, tr, inst.Path, w); err != nil {
			return inst, err
		}
		inst.Reinstalled = true
	}
}

func install(ctx context.Context, tr Transport, bin string, w *Wrappers) error {
	res, err := tr.Exec(ctx, []string{"uname", "-s", "-m"}, nil)
	if err != nil {
		return fmt.Errorf("probe platform: %w", err)
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("probe platform: uname exited %d: %s", res.ExitCode, strings.TrimSpace(string(res.Stderr)))
	}
	goos, goarch, err := ParseUname(string(res.Stdout))
	if err != nil {
		return err
	}
	b, err := w.Binary(ctx, goos, goarch)
	if err != nil {
		return err
	}
	if err := tr.Put(ctx, bin, bytes.NewReader(b), 0o755); err != nil {
		return fmt.Errorf("install wrapper: %w", err)
	}
	return nil
}

// ParseUname maps `uname -s -m` output to Go's GOOS and GOARCH.
func ParseUname(s string) (goos, goarch string, err error) {
	f := strings.Fields(s)
	if len(f) != 2 {
		return "", "", fmt.Errorf("unexpected `uname -s -m` output %q", s)
	}
	switch strings.ToLower(f[0]) {
	case "linux":
		goos = "linux"
	case "darwin":
		goos = "darwin"
	default:
		return "", "", fmt.Errorf("unsupported node OS %q: dispatch runs tasks on Linux and macOS", f[0])
	}
	switch f[1] {
	case "x86_64", "amd64":
		goarch = "amd64"
	case "aarch64", "arm64":
		goarch = "arm64"
	default:
		return "", "", fmt.Errorf("unsupported node architecture %q: dispatch supports amd64 and arm64", f[1])
	}
	return goos, goarch, nil
}
