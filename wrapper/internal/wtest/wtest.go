// Package wtest holds what the tests of wrapper and of its packages share:
// waiting for a condition, servers to reach through the sandbox.
package wtest

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// Poll calls cond until it holds, failing the test after timeout.
func Poll(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// EchoServer is an HTTP server on the host's loopback answering each
// request with its path.
func EchoServer(t *testing.T) (*httptest.Server, int) {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "path="+r.URL.Path)
	}))
	t.Cleanup(s.Close)
	return s, s.Listener.Addr().(*net.TCPAddr).Port
}
