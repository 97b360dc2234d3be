package nodes

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"
	"syscall"
	"time"
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

// versionReply is the wrapper's `version` output (see
// wire.VersionReply).
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
		return Installed{}, CauseFirst(fmt.Errorf("resolving work_dir %s: %w", workDir, err))
	}
	version, err := w.Version()
	if err != nil {
		return Installed{}, err
	}
	inst := Installed{WorkDir: wd, Path: path.Join(wd, ".bin", "dispatch-wrapper-"+version), Version: version}
	for try := 0; ; try++ {
		// Nothing in the work_dir runs, and no secret goes to it, before
		// it is known to be the node user's alone.
		if err := CheckWorkDir(ctx, tr, inst); err != nil {
			return inst, err
		}
		res, err := execBusy(ctx, tr, []string{inst.Path, "version"})
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
	if err := tr.Put(ctx, bin, bytes.NewReader(b), 0o700); err != nil {
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

// CheckWorkDir refuses a work_dir that another user could have written to,
// the way OpenSSH's StrictModes refuses an authorized_keys file: the
// work_dir, its .bin and the installed wrapper (those that exist) must
// belong to the node user (or root), must not be writable by group or
// others, and must not be symbolic links (the work_dir may be a link of the
// node user's to a directory that passes). A wrapper there is executed and
// gets the api_mode's secrets on its stdin; a wrapper planted by someone
// else would have them. The work_dir's parents are not checked: a work_dir
// under a shared sticky directory such as /tmp is fine once it is private.
// What does not exist yet is created 0700 by the install.
func CheckWorkDir(ctx context.Context, tr Transport, inst Installed) error {
	uid, err := tr.UID(ctx)
	if err != nil {
		return fmt.Errorf("check work_dir %s: %w", inst.WorkDir, err)
	}
	for _, c := range []struct {
		path string
		dir  bool
	}{{inst.WorkDir, true}, {path.Dir(inst.Path), true}, {inst.Path, false}} {
		st, err := tr.Lstat(ctx, c.path)
		if err == nil && c.path == inst.WorkDir && st.Mode&fs.ModeSymlink != 0 {
			// A work_dir that is a link (~/.dispatch/work → /data/dispatch) is
			// fine when the link is the node user's (or root's): its
			// target is what must be safe.
			if st.UID != uid && st.UID != 0 {
				return &UnsafeWorkDirError{Path: c.path, Why: fmt.Sprintf("is a symbolic link of uid %d, not of the node user (uid %d)", st.UID, uid), WorkDir: inst.WorkDir}
			}
			st, err = tr.Lstat(ctx, c.path+"/.")
		}
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
			// Neither it nor what is below it exists yet (a path through
			// a file fails at install, naming the cause).
			return nil
		}
		if err != nil {
			return fmt.Errorf("check work_dir %s: %w", inst.WorkDir, err)
		}
		if why := unsafeMode(st, uid, c.dir); why != "" {
			return &UnsafeWorkDirError{Path: c.path, Why: why, WorkDir: inst.WorkDir}
		}
	}
	return nil
}

// UnsafeWorkDirError is a work_dir, .bin or wrapper that another user could
// have written to: the node takes no work until it is fixed.
type UnsafeWorkDirError struct {
	Path, Why, WorkDir string
}

func (e *UnsafeWorkDirError) Error() string {
	msg := fmt.Sprintf("unsafe work_dir: %s %s, so another user could have planted the wrapper that gets the secrets; "+
		"fix: make it yours and private (chown it to the node user; chmod go-w %s), or set work_dir to a directory of your own (e.g. ~/.dispatch/work)",
		e.Path, e.Why, e.Path)
	if strings.HasPrefix(e.Why, "belongs to uid") {
		// Two users' nodes over one directory: the first one's it stays.
		msg += "; if it is the work_dir of another user's node, do not chown it (that node would lose it): give each node a work_dir of its own"
	}
	return msg
}

// unsafeMode says what is wrong with st for the node user uid, or "".
func unsafeMode(st Stat, uid int, dir bool) string {
	switch {
	case st.Mode&fs.ModeSymlink != 0:
		return "is a symbolic link"
	case dir && !st.Mode.IsDir():
		return "is not a directory"
	case !dir && !st.Mode.IsRegular():
		return "is not a regular file"
	case st.UID != uid && st.UID != 0:
		return fmt.Sprintf("belongs to uid %d, not to the node user (uid %d)", st.UID, uid)
	case st.Mode.Perm()&0o022 != 0:
		return fmt.Sprintf("is writable by its group or by others (mode %04o)", st.Mode.Perm())
	}
	return ""
}

// execBusy runs argv, trying again for a while when the binary is "busy":
// a binary just written can fail to exec with ETXTBSY while a process
// forked elsewhere in this program (another node's install, say) still
// holds the write descriptor between its fork and its exec (golang/go#22315).
func execBusy(ctx context.Context, tr Transport, argv []string) (Result, error) {
	for try := 0; ; try++ {
		res, err := tr.Exec(ctx, argv, nil)
		if !errors.Is(err, syscall.ETXTBSY) || try == 50 {
			return res, err
		}
		select {
		case <-ctx.Done():
			return res, err
		case <-time.After(20 * time.Millisecond):
		}
	}
}
