package sandbox

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"github.com/dispatch-tool/dispatch/wrapper/proc"
)

// The node user's git identity goes into every sandboxed attempt's
// private HOME (and every sandboxed gate's). Reading it costs a git
// process (1.1 ms of CPU on a loaded 2-core node, 5 % of a sandboxed
// no-op attempt there), so its answer is kept: in memory for the attempts of one
// supervisor, and in the wrapper's private .ctl directory for the
// supervisors that follow.
// The key is the content of the global config files git reads, the
// environment that names them and the git binary: a changed
// ~/.gitconfig is read again at once. A config that includes other files
// (include, includeIf) is never cached, since what it includes may change
// without it.

// FileGitIdentityCache is the cached identity, in the wrapper's private
// .ctl directory (proc.CtlDir).
const FileGitIdentityCache = "git-identity.json"

// maxGitConfig bounds what is read of a global config file for the key.
const maxGitConfig = 1 << 20

// gitIdentity is what GitIdentity writes: user.name and user.email.
type gitIdentity struct {
	Name  string `json:"name,omitempty"`
	Email string `json:"email,omitempty"`
}

// gitIdentityFile is the cache file's content.
type gitIdentityFile struct {
	Key      string      `json:"key"`
	Identity gitIdentity `json:"identity"`
}

// identityCache keeps the identity for one key; mu serialises lookups, so
// the attempts of a batch start one git between them, and guards key, id.
type identityCache struct {
	// path is the cache file ("" keeps it in memory only), or, while
	// unset, made by dir once.
	path string
	dir  func() (string, error)
	// run is `git config --global --get-regexp` of the identity keys.
	run func(ctx context.Context, env []string) (out []byte, clean bool)

	mu  sync.Mutex
	key string
	id  gitIdentity
}

// nodeIdentity is the wrapper's cache.
var nodeIdentity = &identityCache{dir: proc.CtlDir, run: gitConfigIdentity}

// GitIdentity writes the node user's git identity (user.name and
// user.email of their global config), and nothing else of it, into the
// private HOME, so that a tool committing in its checkout does as it
// would outside the sandbox.
func GitIdentity(ctx context.Context, home string) error {
	cfg := nodeIdentity.get(ctx, gitEnvWithHome()).config()
	if cfg == "" {
		return nil
	}
	return os.WriteFile(filepath.Join(home, ".gitconfig"), []byte(cfg), 0o600)
}

// get returns the identity for env: the one kept when the key is the
// same, else git's answer (kept when the config can be).
func (c *identityCache) get(ctx context.Context, env []string) gitIdentity {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dir != nil {
		if dir, err := c.dir(); err == nil {
			c.path = filepath.Join(dir, FileGitIdentityCache)
		}
		c.dir = nil
	}
	key, ok := gitIdentityKey(env)
	if ok && key == c.key {
		return c.id
	}
	if ok && c.path != "" {
		if id, found := readIdentityCache(c.path, key); found {
			c.key, c.id = key, id
			return id
		}
	}
	out, clean := c.run(ctx, env)
	id := parseGitIdentity(out)
	if !ok || !clean {
		// A git that was killed, timed out or could not start says
		// nothing of the config: asked again next time, never cached.
		return id
	}
	c.key, c.id = key, id
	if c.path != "" {
		storeIdentityCache(c.path, gitIdentityFile{Key: key, Identity: id})
	}
	return id
}

// gitConfigIdentity runs one git for both keys; exit 1 (neither set) and
// a missing git give no output. clean is whether the answer is git's own
// about the config: exit 0, or exit 1 with nothing printed (no key set),
// or no git at all — not a git killed by its deadline or a signal, or
// one that could not start.
func gitConfigIdentity(ctx context.Context, env []string) (out []byte, clean bool) {
	cmd := exec.CommandContext(ctx, "git", "config", "--global", "--get-regexp", `^user\.(name|email)$`)
	cmd.Env = env
	out, err := cmd.Output()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return out, true
	case errors.Is(err, exec.ErrNotFound):
		return nil, true
	case errors.As(err, &ee) && ee.ExitCode() == 1 && len(out) == 0 && ctx.Err() == nil:
		return nil, true
	}
	return nil, false
}

// parseGitIdentity reads git's answer; a value with a newline, a quote or
// a backslash is left out (it would need quoting in the file written).
func parseGitIdentity(out []byte) gitIdentity {
	var id gitIdentity
	for _, line := range strings.Split(string(out), "\n") {
		k, v, _ := strings.Cut(line, " ")
		v = strings.TrimSpace(v)
		if v == "" || !validIdentityValue(v) {
			continue
		}
		// The last one written wins, as for git.
		switch k {
		case "user.name":
			id.Name = v
		case "user.email":
			id.Email = v
		}
	}
	return id
}

func validIdentityValue(v string) bool {
	return !strings.ContainsAny(v, "\n\"\\")
}

// config is the .gitconfig of id; "" when it has neither key (or one
// that is not valid: a forged cache file writes nothing else).
func (id gitIdentity) config() string {
	var cfg strings.Builder
	for _, kv := range [][2]string{{"name", id.Name}, {"email", id.Email}} {
		if kv[1] == "" || !validIdentityValue(kv[1]) {
			continue
		}
		if cfg.Len() == 0 {
			cfg.WriteString("[user]\n")
		}
		fmt.Fprintf(&cfg, "\t%s = \"%s\"\n", kv[0], kv[1])
	}
	return cfg.String()
}

// gitIdentityKey is what git's answer depends on under env: HOME and
// XDG_CONFIG_HOME, the content of the two global config files they name
// (a missing one counts as such) and the git binary. false when the
// answer must not be kept: no HOME, a file that cannot be read, or one
// that includes other files.
func gitIdentityKey(env []string) (string, bool) {
	var home, xdg, path string
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "HOME":
			home = v
		case "XDG_CONFIG_HOME":
			xdg = v
		case "PATH":
			path = v
		}
	}
	if !filepath.IsAbs(home) {
		return "", false
	}
	xdgFile := filepath.Join(home, ".config", "git", "config")
	if xdg != "" {
		xdgFile = filepath.Join(xdg, "git", "config")
	}
	h := sha256.New()
	fmt.Fprintf(h, "home=%s\x00xdg=%s\x00git=%s\x00", home, xdg, gitBinaryKey(path))
	for _, file := range []string{xdgFile, filepath.Join(home, ".gitconfig")} {
		data, err := readGitConfig(file)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			fmt.Fprintf(h, "%s\x00missing\x00", file)
			continue
		case err != nil:
			return "", false
		case bytes.Contains(bytes.ToLower(data), []byte("include")):
			return "", false
		}
		fmt.Fprintf(h, "%s\x00%d\x00", file, len(data))
		h.Write(data)
	}
	return hex.EncodeToString(h.Sum(nil)), true
}

// gitBinaryKey names the git that PATH finds: its path, size and
// modification time ("" when there is none: an installed one is a change).
func gitBinaryKey(path string) string {
	for _, dir := range filepath.SplitList(path) {
		if !filepath.IsAbs(dir) {
			continue
		}
		p := filepath.Join(dir, "git")
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return fmt.Sprintf("%s %d %d", p, fi.Size(), fi.ModTime().UnixNano())
		}
	}
	return ""
}

// readGitConfig reads a config file whole, up to maxGitConfig bytes.
func readGitConfig(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxGitConfig+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxGitConfig {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, maxGitConfig)
	}
	return data, nil
}

// readIdentityCache is the stored identity for key, if there is one.
func readIdentityCache(path, key string) (gitIdentity, bool) {
	f, err := os.Open(path)
	if err != nil {
		return gitIdentity{}, false
	}
	defer f.Close()
	var c gitIdentityFile
	if err := json.NewDecoder(io.LimitReader(f, maxProbeCache)).Decode(&c); err != nil || c.Key != key {
		return gitIdentity{}, false
	}
	return c.Identity, true
}

// storeIdentityCache replaces the cache file whole (0600); a failure only
// costs the next supervisor a git.
func storeIdentityCache(path string, c gitIdentityFile) {
	data, err := json.Marshal(c)
	if err != nil {
		return
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return
	}
	_, werr := tmp.Write(data)
	if cerr := tmp.Close(); werr != nil || cerr != nil || os.Rename(tmp.Name(), path) != nil {
		os.Remove(tmp.Name())
	}
}

// gitEnvWithHome is the environment of a git that reads the node user's
// global config: no system config, no prompt.
func gitEnvWithHome() []string {
	env := []string{"GIT_CONFIG_NOSYSTEM=1", "GIT_TERMINAL_PROMPT=0", "LC_ALL=C"}
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); k == "PATH" || k == "HOME" || k == "XDG_CONFIG_HOME" {
			env = append(env, kv)
		}
	}
	return env
}
