package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/proc"
	"github.com/dispatch-tool/dispatch/wrapper/taskfiles"
)

// An agent CLI in the sandbox sees a private HOME, not the node user's:
// without its settings and its login (a subscription's OAuth token, an API
// key saved by its /login) it fails. So the wrapper copies a fixed list of
// each CLI's files from where the CLI would read them outside the sandbox
// into the same places in the private HOME, before setup. They are copies:
// never bound, never copied back, so nothing the task writes into its HOME
// reaches the node user's files. The login files among them are removed
// from the private HOME when the attempt ends; a resumed attempt, which
// keeps its HOME, gets them afresh.

// agentFile is one file of an agent CLI's settings or login.
type agentFile struct {
	// home is its path relative to HOME, where the CLI reads it when its
	// directory variable is unset, and where the copy goes; dir is its
	// path relative to the directory that variable names.
	home, dir string
	// login marks a file that holds (or may hold) a credential.
	login bool
}

// agentFiles are the files of one agent CLI the private HOME gets.
type agentFiles struct {
	// DirVar moves the CLI's files out of HOME when set (claude
	// CLAUDE_CONFIG_DIR, codex CODEX_HOME, gemini GEMINI_CLI_HOME): the
	// files are then copied from there, and the variable is unset in the
	// sandbox, so that the CLI reads the copies in its private HOME.
	DirVar string
	files  []agentFile
	// leftovers are what the CLI writes beside a login file that may hold
	// it too (claude's backups of .claude.json): removed with the logins.
	leftovers []string
}

// AgentHomeFiles lists, per agent CLI, what its private HOME gets: the
// files its settings and login are read from, as found in the sources of
// the releases docs/AGENTS.md names as tested. Sessions, histories, caches,
// MCP tokens and anything else of the node user's are not copied.
var AgentHomeFiles = map[string]agentFiles{
	wire.AgentClaude: {
		DirVar: "CLAUDE_CONFIG_DIR",
		files: []agentFile{
			// Global config: onboarding state, the account, and the
			// API key of a console /login (primaryApiKey) on Linux.
			{home: ".claude.json", dir: ".claude.json", login: true},
			{home: ".claude/settings.json", dir: "settings.json"},
			// The subscription's OAuth token (claudeAiOauth).
			{home: ".claude/.credentials.json", dir: ".credentials.json", login: true},
		},
		leftovers: []string{".claude.json.backup", ".claude/backups"},
	},
	wire.AgentCodex: {
		DirVar: "CODEX_HOME",
		files: []agentFile{
			{home: ".codex/config.toml", dir: "config.toml"},
			// ChatGPT tokens or OPENAI_API_KEY of `codex login`.
			{home: ".codex/auth.json", dir: "auth.json", login: true},
		},
	},
	wire.AgentGemini: {
		// GEMINI_CLI_HOME stands for the whole HOME.
		DirVar: "GEMINI_CLI_HOME",
		files: []agentFile{
			{home: ".gemini/settings.json", dir: ".gemini/settings.json"},
			// Google login: the OAuth token and the account it is for.
			{home: ".gemini/oauth_creds.json", dir: ".gemini/oauth_creds.json", login: true},
			{home: ".gemini/google_accounts.json", dir: ".gemini/google_accounts.json", login: true},
			// The encrypted file store (an API key saved by /auth, or
			// the OAuth token with GEMINI_FORCE_ENCRYPTED_FILE_STORAGE):
			// its key derives from host and user, the same inside.
			{home: ".gemini/gemini-credentials.json", dir: ".gemini/gemini-credentials.json", login: true},
			// Variables gemini loads itself (GEMINI_API_KEY).
			{home: ".gemini/.env", dir: ".gemini/.env", login: true},
		},
	},
}

// maxAgentFile caps a copied file: settings and tokens are small.
const maxAgentFile = 1 << 20

// AgentSource is where the CLI's files come from: the directory its
// variable names when set (dir true: paths are agentFile.dir), else the
// home (agentFile.home). "" when there is none to copy from.
func AgentSource(tool string, env []string) (root string, dir bool, err error) {
	af, ok := AgentHomeFiles[tool]
	if !ok {
		return "", false, nil
	}
	if v := proc.LookupEnv(env, af.DirVar); v != "" {
		if !filepath.IsAbs(v) {
			return "", true, fmt.Errorf("%s=%s is not an absolute path", af.DirVar, v)
		}
		return filepath.Clean(v), true, nil
	}
	if h := proc.LookupEnv(env, "HOME"); filepath.IsAbs(h) {
		return filepath.Clean(h), false, nil
	}
	return "", false, nil
}

// CopyAgentFiles copies tool's files from src (see AgentSource) into the
// private HOME home, each replacing whatever the HOME held at its path (a
// resumed attempt's, or one the task planted): a file the source lacks is
// then absent. A file that cannot be copied is passed to refused, and the
// copy goes on; the error is for the HOME itself.
func CopyAgentFiles(tool, src string, dir bool, home string, refused func(path string, err error)) error {
	af, ok := AgentHomeFiles[tool]
	if !ok {
		return nil
	}
	root, err := os.OpenRoot(home)
	if err != nil {
		return fmt.Errorf("open %s: %w", home, err)
	}
	defer root.Close()
	for _, f := range af.files {
		if err := removeInRoot(root, f.home); err != nil {
			refused(filepath.Join(home, f.home), err)
			continue
		}
		if src == "" {
			continue
		}
		from := filepath.Join(src, f.home)
		if dir {
			from = filepath.Join(src, f.dir)
		}
		data, err := readAgentFile(from)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			refused(from, err)
			continue
		}
		if err := writeInRoot(root, f.home, data); err != nil {
			refused(filepath.Join(home, f.home), err)
		}
	}
	return nil
}

// RemoveAgentLogins removes tool's login files, and what the CLI keeps of
// them beside, from the private HOME home, whatever the tool made of them.
func RemoveAgentLogins(tool, home string) error {
	af, ok := AgentHomeFiles[tool]
	if !ok {
		return nil
	}
	root, err := os.OpenRoot(home)
	if err != nil {
		return fmt.Errorf("open %s: %w", home, err)
	}
	defer root.Close()
	var errs []error
	for _, f := range af.files {
		if f.login {
			errs = append(errs, removeInRoot(root, f.home))
		}
	}
	for _, p := range af.leftovers {
		errs = append(errs, root.RemoveAll(p))
	}
	return errors.Join(errs...)
}

// readAgentFile reads a regular file of at most maxAgentFile bytes, not
// through a link at its own name, never blocking on a FIFO.
func readAgentFile(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil, errors.New("a symbolic link: not followed")
		}
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("not a regular file (%s)", fi.Mode().Type())
	}
	if fi.Size() > maxAgentFile {
		return nil, fmt.Errorf("larger than %d bytes", maxAgentFile)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxAgentFile+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxAgentFile {
		return nil, fmt.Errorf("larger than %d bytes", maxAgentFile)
	}
	return data, nil
}

// removeInRoot removes the file (or link, or empty directory) at rel; a
// missing one is no error. The root keeps a link in the HOME from leading
// the removal out of it.
func removeInRoot(root *os.Root, rel string) error {
	if err := root.Remove(rel); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// writeInRoot creates rel, mode 0600, in directories of mode 0700, with
// data. rel must not exist.
func writeInRoot(root *os.Root, rel string, data []byte) error {
	if d := filepath.Dir(rel); d != "." {
		if err := root.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	f, err := root.OpenFile(rel, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// PrepareHome makes the private HOME of the attempt in task directory dir:
// empty but for the node user's git identity (noIdentity hears why there
// is none) and what copyFiles puts there (the agent CLI's settings and
// login, see agenthome.go). A resumed attempt keeps the earlier one, where
// the tool keeps the session it continues, and gets the CLI's files afresh.
func PrepareHome(dir string, resume bool, copyFiles func(home string) error, noIdentity func(error)) error {
	home := filepath.Join(dir, taskfiles.DirHome)
	if fi, err := os.Lstat(home); err == nil {
		if resume && fi.IsDir() {
			return copyFiles(home)
		}
		if err := os.Rename(home, home+taskfiles.OldTmpSuffix+strconv.Itoa(os.Getpid())); err != nil {
			return fmt.Errorf("move the old %s aside: %w", taskfiles.DirHome, err)
		}
	}
	if err := os.Mkdir(home, 0o700); err != nil {
		return fmt.Errorf("create %s: %w", taskfiles.DirHome, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), ProbeTimeout)
	defer cancel()
	if err := GitIdentity(ctx, home); err != nil {
		noIdentity(err)
	}
	return copyFiles(home)
}
