//go:build linux

package sandbox

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/internal/wtest"
)

// listTree returns every file and link under root (relative paths), with
// the content of files.
func listTree(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		data, _ := os.ReadFile(p)
		if fi.Mode()&os.ModeSymlink != 0 {
			data = []byte("link")
		}
		out[rel] = string(data)
		return nil
	})
	return out
}

// TestCopyAgentFiles: per tool, the private HOME gets exactly the listed
// files that the node user's home holds, at the same places, mode 0600 in
// directories of mode 0700, and nothing else of that home (another tool's
// files, sessions, keys); its login files are removed at the end, its
// settings stay.
func TestCopyAgentFiles(t *testing.T) {
	node := map[string]string{
		".claude.json": "claude-global", ".claude/settings.json": "claude-settings", ".claude/.credentials.json": "claude-oauth",
		".claude/projects/x/s.jsonl": "session", ".claude/settings.local.json": "local",
		".codex/config.toml": "codex-config", ".codex/auth.json": "codex-auth", ".codex/sessions/s.jsonl": "session",
		".gemini/settings.json": "gemini-settings", ".gemini/oauth_creds.json": "gemini-oauth", ".gemini/google_accounts.json": "gemini-accounts",
		".gemini/gemini-credentials.json": "gemini-enc", ".gemini/.env": "GEMINI_API_KEY=k", ".gemini/mcp-oauth-tokens.json": "mcp",
		".ssh/id_ed25519": "key", ".gitconfig": "git", ".env": "OTHER=1",
	}
	cases := []struct {
		tool             string
		copied, settings []string
	}{
		{wire.AgentClaude, []string{".claude.json", ".claude/.credentials.json", ".claude/settings.json"}, []string{".claude/settings.json"}},
		{wire.AgentCodex, []string{".codex/auth.json", ".codex/config.toml"}, []string{".codex/config.toml"}},
		{wire.AgentGemini, []string{".gemini/.env", ".gemini/gemini-credentials.json", ".gemini/google_accounts.json", ".gemini/oauth_creds.json", ".gemini/settings.json"}, []string{".gemini/settings.json"}},
		{"shell", nil, nil},
	}
	for _, tc := range cases {
		t.Run(tc.tool, func(t *testing.T) {
			src, home := t.TempDir(), t.TempDir()
			wtest.WriteTree(t, src, node)
			var refused []string
			if err := CopyAgentFiles(tc.tool, src, false, home, func(p string, err error) { refused = append(refused, p+": "+err.Error()) }); err != nil {
				t.Fatal(err)
			}
			if len(refused) > 0 {
				t.Errorf("refused: %q", refused)
			}
			got := listTree(t, home)
			var names []string
			for p, data := range got {
				names = append(names, p)
				if data != node[p] {
					t.Errorf("%s: %q, want %q", p, data, node[p])
				}
				fi, err := os.Lstat(filepath.Join(home, p))
				if err != nil || fi.Mode() != 0o600 {
					t.Errorf("%s: mode %v (%v), want a regular file of mode 0600", p, fi.Mode(), err)
				}
				if d := filepath.Dir(p); d != "." {
					if fi, err := os.Stat(filepath.Join(home, d)); err != nil || fi.Mode().Perm() != 0o700 {
						t.Errorf("%s: mode %v (%v), want 0700", d, fi.Mode(), err)
					}
				}
			}
			sort.Strings(names)
			if strings.Join(names, " ") != strings.Join(tc.copied, " ") {
				t.Errorf("copied %q, want %q", names, tc.copied)
			}

			// The task changes everything; at the end only the settings stay.
			for p := range got {
				os.WriteFile(filepath.Join(home, p), []byte("changed"), 0o600)
			}
			if tc.tool == wire.AgentClaude {
				wtest.WriteTree(t, home, map[string]string{".claude.json.backup": "copy", ".claude/backups/.claude.json.backup.1": "copy"})
			}
			if err := RemoveAgentLogins(tc.tool, home); err != nil {
				t.Fatal(err)
			}
			var left []string
			for p := range listTree(t, home) {
				left = append(left, p)
			}
			sort.Strings(left)
			if strings.Join(left, " ") != strings.Join(tc.settings, " ") {
				t.Errorf("left after the attempt: %q, want only the settings %q", left, tc.settings)
			}
			if after := listTree(t, src); len(after) != len(node) || after[".codex/auth.json"] != "codex-auth" || after[".claude/.credentials.json"] != "claude-oauth" {
				t.Errorf("the node user's home changed: %v", after)
			}
		})
	}
}

// TestCopyAgentFilesRefused: a file at a listed path that is a link, a
// FIFO, a directory or over the size cap is refused (and said), a missing
// one skipped silently; the others are still copied.
func TestCopyAgentFilesRefused(t *testing.T) {
	outside := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(outside, []byte("SECRET"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		make func(t *testing.T, path string)
		want string // in the refusal; "" for none
	}{
		{"symlink", func(t *testing.T, p string) { os.Symlink(outside, p) }, "symbolic link"},
		{"fifo", func(t *testing.T, p string) { syscall.Mkfifo(p, 0o600) }, "not a regular file"},
		{"directory", func(t *testing.T, p string) { os.Mkdir(p, 0o700) }, "not a regular file"},
		{"oversize", func(t *testing.T, p string) { os.WriteFile(p, make([]byte, maxAgentFile+1), 0o600) }, "larger than"},
		{"at the cap", func(t *testing.T, p string) { os.WriteFile(p, make([]byte, maxAgentFile), 0o600) }, ""},
		{"missing", func(t *testing.T, p string) {}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			src, home := t.TempDir(), t.TempDir()
			wtest.WriteTree(t, src, map[string]string{".codex/config.toml": "config"})
			auth := filepath.Join(src, ".codex", "auth.json")
			tc.make(t, auth)
			var refused []string
			CopyAgentFiles(wire.AgentCodex, src, false, home, func(p string, err error) { refused = append(refused, p+": "+err.Error()) })
			got := listTree(t, home)
			if got[".codex/config.toml"] != "config" {
				t.Errorf("config.toml not copied: %v", got)
			}
			_, copied := got[".codex/auth.json"]
			if tc.want == "" {
				if len(refused) > 0 {
					t.Errorf("refused %q, want nothing refused", refused)
				}
				if fi, err := os.Stat(auth); err == nil && !copied && fi.Mode().IsRegular() {
					t.Errorf("auth.json not copied")
				}
				return
			}
			if copied || len(refused) != 1 || !strings.Contains(refused[0], auth) || !strings.Contains(refused[0], tc.want) {
				t.Errorf("copied %v, refused %q; want only auth.json refused (%s)", copied, refused, tc.want)
			}
		})
	}
}

// TestCopyAgentFilesReplacesThePlanted: in a resumed HOME, what the task
// left at a listed path is replaced by the node user's file or, when the
// node user has none, removed; a link the task made to lead the copy (or
// the removal) out of the HOME is not followed.
func TestCopyAgentFilesReplacesThePlanted(t *testing.T) {
	src, home, outside := t.TempDir(), t.TempDir(), t.TempDir()
	wtest.WriteTree(t, src, map[string]string{".gemini/oauth_creds.json": "real-token", ".codex/auth.json": "real-auth"})
	wtest.WriteTree(t, home, map[string]string{".gemini/oauth_creds.json": "planted", ".gemini/settings.json": "planted hooks", ".gemini/history": "kept"})
	wtest.WriteTree(t, outside, map[string]string{"auth.json": "outside"})
	if err := os.Symlink(outside, filepath.Join(home, ".codex")); err != nil {
		t.Fatal(err)
	}
	for _, tool := range []string{wire.AgentGemini, wire.AgentCodex} {
		var refused []string
		CopyAgentFiles(tool, src, false, home, func(p string, err error) { refused = append(refused, p) })
		if tool == wire.AgentCodex && (len(refused) != 2 || !strings.HasPrefix(refused[0], filepath.Join(home, ".codex")+"/")) {
			t.Errorf("codex: refused %q, want both files behind the link out of the HOME refused", refused)
		}
		if err := RemoveAgentLogins(tool, home); tool == wire.AgentCodex && err == nil {
			t.Errorf("codex: removing through the link out of the HOME: no error")
		}
	}
	got := listTree(t, home)
	want := map[string]string{".gemini/history": "kept", ".codex": "link"}
	if len(got) != len(want) || got[".gemini/history"] != "kept" || got[".codex"] != "link" {
		t.Errorf("the HOME holds %v, want %v (the node user has no gemini settings: the planted ones go)", got, want)
	}
	if data, _ := os.ReadFile(filepath.Join(outside, "auth.json")); string(data) != "outside" {
		t.Errorf("the file outside the HOME: %q, want it untouched", data)
	}
}

// TestAgentSource: the files come from the CLI's directory variable when
// the tool's environment sets it (an absolute path), else from its HOME.
func TestAgentSource(t *testing.T) {
	cases := []struct {
		name, tool string
		env        []string
		root       string
		dir, err   bool
	}{
		{"home", wire.AgentCodex, []string{"HOME=/h/u"}, "/h/u", false, false},
		{"codex home", wire.AgentCodex, []string{"HOME=/h/u", "CODEX_HOME=/etc/codex/"}, "/etc/codex", true, false},
		{"claude config dir", wire.AgentClaude, []string{"HOME=/h/u", "CLAUDE_CONFIG_DIR=/c"}, "/c", true, false},
		{"gemini cli home", wire.AgentGemini, []string{"HOME=/h/u", "GEMINI_CLI_HOME=/g"}, "/g", true, false},
		{"another tool's variable", wire.AgentClaude, []string{"HOME=/h/u", "CODEX_HOME=/c"}, "/h/u", false, false},
		{"relative", wire.AgentCodex, []string{"HOME=/h/u", "CODEX_HOME=codex"}, "", true, true},
		{"no home", wire.AgentCodex, []string{"HOME="}, "", false, false},
		{"not an agent", "shell", []string{"HOME=/h/u"}, "", false, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			root, dir, err := AgentSource(tc.tool, tc.env)
			if root != tc.root || dir != tc.dir || (err != nil) != tc.err {
				t.Errorf("agentSource = %q, %v, %v; want %q, %v, error %v", root, dir, err, tc.root, tc.dir, tc.err)
			}
		})
	}
}

// TestSandboxEnvUnsetsTheAgentDir: in the sandbox the CLI's directory
// variable is unset, so that it reads the copies in its private HOME.
func TestSandboxEnvUnsetsTheAgentDir(t *testing.T) {
	env := Env([]string{"HOME=/h/u", "CODEX_HOME=/h/u/.codex", "TMPDIR=/x", "KEEP=1"}, "/w/t", "CODEX_HOME")
	if got := strings.Join(env, " "); got != "KEEP=1 HOME=/w/t/home TMPDIR=/tmp" {
		t.Errorf("sandboxEnv = %q", got)
	}
}
