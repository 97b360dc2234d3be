// Package agentcli finds the real agent CLIs (claude, codex, gemini) that
// .ci/test-deps installs with npm, at the versions pinned in
// .ci/agent-clis.txt, and gives each a private home that points it at a fake
// provider API (internal/fakeapi), offline.
package agentcli

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// Pins returns the package@version lines of .ci/agent-clis.txt.
func Pins(t testing.TB) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot(t), ".ci", "agent-clis.txt"))
	if err != nil {
		t.Fatalf("agentcli: %v", err)
	}
	var pins []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line != "" && !strings.HasPrefix(line, "#") {
			pins = append(pins, line)
		}
	}
	return pins
}

// Dir returns the directory holding the CLIs' executables
// (node_modules/.bin of the cache .ci/test-deps fills). Without it the test
// is skipped, or fails when CI=true.
func Dir(t testing.TB) string {
	t.Helper()
	pins := Pins(t)
	// The same name as .ci/test-deps': sha256 of the pins, one a line.
	sum := sha256.Sum256([]byte(strings.Join(pins, "\n") + "\n"))
	cache := os.Getenv("DISPATCH_TEST_CACHE")
	if cache == "" {
		base := os.Getenv("XDG_CACHE_HOME")
		if base == "" {
			home, _ := os.UserHomeDir()
			base = filepath.Join(home, ".cache")
		}
		cache = filepath.Join(base, "dispatch-test")
	}
	dir := filepath.Join(cache, "agent-clis-"+hex.EncodeToString(sum[:])[:12], "node_modules", ".bin")
	for _, name := range []string{"claude", "codex", "gemini"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			msg := fmt.Sprintf("agentcli: %s is not installed in %s: run ./.ci/test-deps (make test does)", name, dir)
			if os.Getenv("CI") == "true" {
				t.Fatal(msg)
			}
			t.Skip(msg)
		}
	}
	return dir
}

// Version runs name --version.
func Version(t testing.TB, dir, name string) string {
	t.Helper()
	out, err := exec.Command(filepath.Join(dir, name), "--version").Output()
	if err != nil {
		t.Fatalf("agentcli: %s --version: %v", name, err)
	}
	return strings.TrimSpace(string(out))
}

// PATH is a PATH for the CLIs: dir, then node's directory, then the
// system's.
func PATH(t testing.TB, dir string) string {
	t.Helper()
	parts := []string{dir}
	if node, err := exec.LookPath("node"); err == nil {
		parts = append(parts, filepath.Dir(node))
	}
	return strings.Join(append(parts, "/usr/local/bin", "/usr/bin", "/bin"), ":")
}

func repoRoot(t testing.TB) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("agentcli: no caller")
	}
	return filepath.Join(filepath.Dir(file), "..", "..")
}
