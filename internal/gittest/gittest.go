// Package gittest gives tests a real git repository in a temporary
// directory, with a fixed identity and no system or global config.
package gittest

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Repo is a git repository (or work tree) in Dir.
type Repo struct {
	T   testing.TB
	Dir string
}

// New initialises a repository on branch main in a new temporary
// directory. Without git it fails under CI=true and skips elsewhere.
func New(t testing.TB) *Repo {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("git not found; `make test` installs it")
		}
		t.Skip("git not found")
	}
	r := &Repo{T: t, Dir: t.TempDir()}
	r.Git("init", "-q", "-b", "main")
	return r
}

// Git runs git in the repository and returns its trimmed output, failing
// the test on an error.
func (r *Repo) Git(args ...string) string {
	r.T.Helper()
	out, err := r.Run(nil, args...)
	if err != nil {
		r.T.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// Run runs git with stdin (none when nil) and returns its stdout.
func (r *Repo) Run(stdin []byte, args ...string) ([]byte, error) {
	return r.RunEnv(nil, stdin, args...)
}

// RunEnv is Run with extra environment.
func (r *Repo) RunEnv(env []string, stdin []byte, args ...string) ([]byte, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = r.Dir
	cmd.Env = append(append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "LC_ALL=C",
		"GIT_AUTHOR_NAME=op", "GIT_AUTHOR_EMAIL=op@example.com", "GIT_COMMITTER_NAME=op", "GIT_COMMITTER_EMAIL=op@example.com"), env...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var errb bytes.Buffer
	cmd.Stderr = &errb
	out, err := cmd.Output()
	if err != nil {
		return append(out, errb.Bytes()...), err
	}
	return out, nil
}

// Write writes a file of the work tree, creating its directories.
func (r *Repo) Write(name, content string) {
	r.T.Helper()
	p := filepath.Join(r.Dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		r.T.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		r.T.Fatal(err)
	}
}

// Commit commits everything and returns the commit.
func (r *Repo) Commit(msg string) string {
	r.T.Helper()
	r.Git("add", "-A")
	r.Git("commit", "-q", "-m", msg)
	return r.Git("rev-parse", "HEAD")
}

// Pack is a pack of want less what have reaches, as the controller sends
// one.
func (r *Repo) Pack(want string, have ...string) []byte {
	r.T.Helper()
	revs := want + "\n"
	for _, h := range have {
		revs += "^" + h + "\n"
	}
	out, err := r.Run([]byte(revs), "pack-objects", "--stdout", "--revs", "--thin", "--quiet")
	if err != nil {
		r.T.Fatalf("pack-objects: %v %s", err, out)
	}
	return out
}

// WaitForSpares waits until no `wrapper git-spare` works under dir: they
// outlive the attempts that start them, and the test's directories can go
// only after them. Linux only (it reads /proc); elsewhere it returns.
func WaitForSpares(t testing.TB, dir string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		busy := false
		procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
		for _, p := range procs {
			b, err := os.ReadFile(p)
			if err == nil && bytes.Contains(b, []byte("git-spare")) && bytes.Contains(b, []byte(dir)) {
				busy = true
				break
			}
		}
		if !busy {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Errorf("a git-spare under %s still runs after 30 s", dir)
}
