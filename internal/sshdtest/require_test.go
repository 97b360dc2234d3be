package sshdtest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func TestDecide(t *testing.T) {
	missing := errors.New("sshd not found")
	tests := []struct {
		name string
		err  error
		ci   string
		want verdict
	}{
		{"found", nil, "", run},
		{"found in CI", nil, "true", run},
		{"missing", missing, "", skip},
		{"missing, CI=false", missing, "false", skip},
		{"missing, CI=garbage", missing, "yes please", skip},
		{"missing in CI", missing, "true", fail},
		{"missing, CI=1", missing, "1", fail},
		{"missing, CI=TRUE", missing, "TRUE", fail},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := decide(tc.err, tc.ci); got != tc.want {
				t.Errorf("decide(%v, %q) = %v, want %v", tc.err, tc.ci, got, tc.want)
			}
		})
	}
}

// recorder is a testing.TB that records Skip and Fatal instead of acting on
// the real test; both end the calling goroutine, as the real ones do.
type recorder struct {
	testing.TB
	skipped, failed bool
	msg             string
}

func (r *recorder) Helper() {}

func (r *recorder) Skipf(format string, args ...any) {
	r.skipped, r.msg = true, fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func (r *recorder) Fatalf(format string, args ...any) {
	r.failed, r.msg = true, fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func TestRequire(t *testing.T) {
	dir := t.TempDir()
	fake := filepath.Join(dir, "sshd")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	notExec := filepath.Join(dir, "sshd.txt")
	if err := os.WriteFile(notExec, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	absent := filepath.Join(dir, "absent")
	onPath := func(string) (string, error) { return fake, nil }
	notOnPath := func(string) (string, error) { return "", errors.New("not found") }

	tests := []struct {
		name     string
		lookPath func(string) (string, error)
		fallback string
		env      map[string]string
		want     string // path returned, or "skip" or "fail"
	}{
		{"on PATH", onPath, absent, nil, fake},
		{"at the fallback", notOnPath, fake, nil, fake},
		{"missing", notOnPath, absent, nil, "skip"},
		{"missing in CI", notOnPath, absent, map[string]string{"CI": "true"}, "fail"},
		{"fallback not executable in CI", notOnPath, notExec, map[string]string{"CI": "true"}, "fail"},
		{"override wins", notOnPath, absent, map[string]string{EnvSSHD: fake}, fake},
		{"override missing", onPath, fake, map[string]string{EnvSSHD: absent}, "skip"},
		{"override missing in CI", onPath, fake, map[string]string{EnvSSHD: absent, "CI": "true"}, "fail"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := &recorder{}
			var got string
			done := make(chan struct{})
			go func() {
				defer close(done)
				got = require(r, tc.lookPath, func(k string) string { return tc.env[k] }, tc.fallback)
			}()
			<-done
			switch {
			case r.skipped:
				got = "skip"
			case r.failed:
				got = "fail"
			}
			if got != tc.want {
				t.Errorf("require = %q (message %q), want %q", got, r.msg, tc.want)
			}
			if r.msg != "" && !strings.Contains(r.msg, Package) {
				t.Errorf("message %q does not name the package %s", r.msg, Package)
			}
		})
	}
}
