package sshdtest

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

// fallbackSSHD is where Debian puts sshd; /usr/sbin is often not on a
// non-root user's PATH.
const fallbackSSHD = "/usr/sbin/sshd"

// EnvSSHD names the environment variable that, when set, is the sshd to use
// instead of searching PATH and /usr/sbin. Pointing it at a missing file
// shows what the tests do on a machine without sshd.
const EnvSSHD = "DISPATCH_TEST_SSHD"

// Package is the Debian package that provides sshd, named in skip and
// failure messages.
const Package = "openssh-server"

// Require returns the absolute path of sshd. When sshd is missing it skips
// the test, unless CI=true, where it fails: a test that needs sshd must not
// silently skip in CI.
func Require(t testing.TB) string {
	t.Helper()
	return require(t, exec.LookPath, os.Getenv, fallbackSSHD)
}

func require(t testing.TB, lookPath func(string) (string, error), getenv func(string) string, fallback string) string {
	t.Helper()
	path, err := findSSHD(getenv(EnvSSHD), lookPath, fallback)
	switch decide(err, getenv("CI")) {
	case run:
		return path
	case fail:
		t.Fatalf("sshdtest: %v; CI=true, so this fails instead of skipping: install Debian's %s (.ci/test-deps does it as root)", err, Package)
	default:
		t.Skipf("sshdtest: %v; skipping: install Debian's %s to run this test", err, Package)
	}
	return ""
}

type verdict int

const (
	run verdict = iota
	skip
	fail
)

func (v verdict) String() string {
	return [...]string{"run", "skip", "fail"}[v]
}

// decide says what a test that needs sshd does, given the error from
// looking for it and the value of $CI.
func decide(findErr error, ci string) verdict {
	if findErr == nil {
		return run
	}
	if isCI(ci) {
		return fail
	}
	return skip
}

// isCI follows CI services, which set CI=true; "1" and the other
// strconv.ParseBool truths count too.
func isCI(v string) bool {
	b, err := strconv.ParseBool(v)
	return err == nil && b
}

// findSSHD returns override when set, else sshd from PATH, else fallback.
// sshd refuses to re-exec itself unless started by an absolute path, so the
// result is one.
func findSSHD(override string, lookPath func(string) (string, error), fallback string) (string, error) {
	if override != "" {
		if !isExecutable(override) {
			return "", fmt.Errorf("%s=%s is not an executable file", EnvSSHD, override)
		}
		return filepath.Abs(override)
	}
	if p, err := lookPath("sshd"); err == nil {
		if abs, err := filepath.Abs(p); err == nil {
			return abs, nil
		}
	}
	if isExecutable(fallback) {
		return fallback, nil
	}
	return "", errors.New("sshd not found on PATH or at " + fallback)
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
// Another process can take it before the caller binds it; StartServer
// retries with a new port when that happens.
func FreePort(t testing.TB) int {
	t.Helper()
	p, err := freePort()
	if err != nil {
		t.Fatalf("sshdtest: find a free port: %v", err)
	}
	return p
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	addr, ok := l.Addr().(*net.TCPAddr)
	if !ok {
		return 0, fmt.Errorf("unexpected listener address %v", l.Addr())
	}
	return addr.Port, nil
}
