package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// The tests drive the real binary, built once by TestMain.
var (
	dispatchBin string
	// baseEnv is the environment of every dispatch subprocess: HOME and the
	// cache directory point into a temporary directory shared by the whole run,
	// so the node wrapper is built once, while the Go build cache stays the
	// real one so that building it is quick.
	baseEnv []string
	// sharedHome is HOME in baseEnv.
	sharedHome string
)

// cmdTimeout bounds every dispatch subprocess: a hang fails the test instead
// of blocking the run.
const cmdTimeout = 120 * time.Second

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	tmp, err := os.MkdirTemp("", "dispatch-cli-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(tmp)

	dispatchBin = filepath.Join(tmp, "dispatch")
	build := exec.Command("go", "build", "-o", dispatchBin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build ./cmd/dispatch: %v\n%s", err, out)
		return 1
	}

	goEnv, err := exec.Command("go", "env", "GOCACHE", "GOMODCACHE", "GOPATH", "GOENV").Output()
	if err != nil {
		fmt.Fprintf(os.Stderr, "go env: %v\n", err)
		return 1
	}
	vals := strings.Split(strings.TrimRight(string(goEnv), "\n"), "\n")
	if len(vals) != 4 {
		fmt.Fprintf(os.Stderr, "go env: unexpected output %q\n", goEnv)
		return 1
	}
	sharedHome = filepath.Join(tmp, "home")
	cache := filepath.Join(tmp, "cache")
	for _, d := range []string{sharedHome, cache} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "HOME", "XDG_CACHE_HOME", "DISPATCH_HOME", "NO_COLOR", "GOCACHE", "GOMODCACHE", "GOPATH", "GOENV":
			continue
		}
		baseEnv = append(baseEnv, kv)
	}
	baseEnv = append(baseEnv, "HOME="+sharedHome, "XDG_CACHE_HOME="+cache,
		"GOCACHE="+vals[0], "GOMODCACHE="+vals[1], "GOPATH="+vals[2], "GOENV="+vals[3])
	return m.Run()
}

// result is what one dispatch run left behind.
type result struct {
	code   int
	stdout string
	stderr string
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\n--- stdout:\n%s--- stderr:\n%s", r.code, r.stdout, r.stderr)
}

// dispatchCmd prepares a dispatch subprocess with baseEnv plus env (later
// entries win).
func dispatchCmd(ctx context.Context, env []string, args ...string) (*exec.Cmd, *bytes.Buffer, *bytes.Buffer) {
	cmd := exec.CommandContext(ctx, dispatchBin, args...)
	cmd.Env = append(slices.Clone(baseEnv), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	return cmd, &stdout, &stderr
}

// runDispatch runs dispatch to the end with stdout and stderr piped.
func runDispatch(t *testing.T, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	cmd, stdout, stderr := dispatchCmd(ctx, env, args...)
	return wait(t, ctx, cmd, stdout, stderr)
}

func wait(t *testing.T, ctx context.Context, cmd *exec.Cmd, stdout, stderr *bytes.Buffer) result {
	t.Helper()
	return finish(t, ctx, cmd, cmd.Run(), stdout, stderr)
}

func finish(t *testing.T, ctx context.Context, cmd *exec.Cmd, err error, stdout, stderr *bytes.Buffer) result {
	t.Helper()
	if ctx.Err() != nil {
		t.Fatalf("dispatch %s: did not finish within %s\n--- stdout:\n%s--- stderr:\n%s",
			strings.Join(cmd.Args[1:], " "), cmdTimeout, stdout, stderr)
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) || cmd.ProcessState == nil {
		t.Fatalf("dispatch %s: %v", strings.Join(cmd.Args[1:], " "), err)
	}
	return result{code: cmd.ProcessState.ExitCode(), stdout: stdout.String(), stderr: stderr.String()}
}

// copyFixture copies testdata/<name> into a new directory and returns it.
func copyFixture(t *testing.T, name string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "home")
	copyDir(t, filepath.Join("testdata", name), dst)
	return dst
}

func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, 0o644)
	})
	if err != nil {
		t.Fatalf("copy fixture %s: %v", src, err)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// tree lists every entry under dir with its kind, mode and content hash, so
// that two listings are equal only when nothing was created, removed or
// changed.
func tree(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		line := fmt.Sprintf("%s %s", rel, fi.Mode())
		if fi.Mode().IsRegular() {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			line += " " + hex.EncodeToString(sum[:8])
		}
		out = append(out, line)
		return nil
	})
	if err != nil {
		t.Fatalf("list %s: %v", dir, err)
	}
	return out
}

func assertTreeUnchanged(t *testing.T, dir string, before []string) {
	t.Helper()
	after := tree(t, dir)
	if !slices.Equal(before, after) {
		t.Errorf("%s changed:\nbefore:\n  %s\nafter:\n  %s", dir, strings.Join(before, "\n  "), strings.Join(after, "\n  "))
	}
}

// pollUntil calls cond until it returns true or the deadline passes.
func pollUntil(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
