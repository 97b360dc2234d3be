package egress

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/internal/netallow"
	"github.com/dispatch-tool/dispatch/wrapper/internal/wtest"
)

// proxyLog collects the lines the proxy writes to task.log.
type proxyLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *proxyLog) logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}

func (l *proxyLog) text() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// The proxy lets through a CONNECT and an absolute http:// URL to an
// allowed destination, refuses others with 403 and names each refused
// destination once in task.log, and answers anything else with 400. Its
// socket is private, and a path longer than a socket address takes works.
func TestNetProxy(t *testing.T) {
	_, allowed := wtest.EchoServer(t)
	_, other := wtest.EchoServer(t)
	dir := filepath.Join(t.TempDir(), strings.Repeat("d", 120))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, FileNetSock)
	var log proxyLog
	p, err := StartNetProxy(sock, netallow.List{{Host: "127.0.0.1", Port: allowed}}, log.logf)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if fi, err := os.Stat(sock); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket: %v, %v; want mode 600", fi, err)
	}
	request := func(raw string) string {
		t.Helper()
		c, err := dialUnix(sock)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		io.WriteString(c, raw)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("%q: %v", raw, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return strconv.Itoa(resp.StatusCode) + " " + strings.TrimSpace(string(body))
	}
	a, o := "127.0.0.1:"+strconv.Itoa(allowed), "127.0.0.1:"+strconv.Itoa(other)
	for _, tc := range []struct{ raw, want string }{
		{"GET http://" + a + "/x HTTP/1.1\r\nHost: " + a + "\r\nConnection: close\r\n\r\n", "200 path=/x"},
		{"GET http://" + o + "/x HTTP/1.1\r\nHost: " + o + "\r\nConnection: close\r\n\r\n", "403 dispatch proxy: " + o + " is not in the task's network allow list"},
		{"CONNECT " + o + " HTTP/1.1\r\nHost: " + o + "\r\n\r\n", "403 dispatch proxy: " + o + " is not in the task's network allow list"},
		{"CONNECT evil.example:443 HTTP/1.1\r\nHost: evil.example:443\r\n\r\n", "403 dispatch proxy: evil.example:443 is not in the task's network allow list"},
		{"GET /x HTTP/1.1\r\nHost: " + a + "\r\nConnection: close\r\n\r\n", "400 dispatch proxy: want CONNECT host:port or an absolute http:// URL"},
	} {
		if got := request(tc.raw); got != tc.want {
			t.Errorf("%q: got %q, want %q", tc.raw, got, tc.want)
		}
	}
	// A tunnel through CONNECT carries a request to the allowed server.
	up, br, err := tunnel(sock, a)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(up, "GET /tunnel HTTP/1.1\r\nHost: "+a+"\r\nConnection: close\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	up.Close()
	if string(body) != "path=/tunnel" {
		t.Errorf("through the tunnel: %q", body)
	}
	request("CONNECT " + o + " HTTP/1.1\r\nHost: " + o + "\r\n\r\n")
	want := []string{
		"network: refused a connection to " + o + ": not in the task's allow list (network: {allow: [...]})",
		"network: refused a connection to evil.example:443: not in the task's allow list (network: {allow: [...]})",
	}
	if got := log.text(); got != strings.Join(want, "\n") {
		t.Errorf("task.log lines:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
	}
}

// sink is a TCP listener on the host's loopback whose connections read
// until the other side closes (hold, when set, keeps them open until the
// test ends instead).
func sink(t *testing.T, hold bool) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var held []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if hold {
				mu.Lock()
				held = append(held, c)
				mu.Unlock()
				continue
			}
			go func() { io.Copy(io.Discard, c); c.Close() }()
		}
	}()
	return ln
}

// A tunnel still open when the attempt ends is closed by Close.
func TestNetProxyCloseEndsTunnels(t *testing.T) {
	ln := sink(t, true)
	port := ln.Addr().(*net.TCPAddr).Port
	sock := filepath.Join(t.TempDir(), FileNetSock)
	p, err := StartNetProxy(sock, netallow.List{{Host: "127.0.0.1", Port: port}}, func(string, ...any) {})
	if err != nil {
		t.Fatal(err)
	}
	up, _, err := tunnel(sock, ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	p.Close()
	if _, err := up.Read(make([]byte, 1)); err == nil {
		t.Error("the tunnel is still open after Close")
	}
}

// The proxy's port avoids the allowed loopback ports; net-init serves
// every loopback destination, localhost on both addresses.
func TestNetInitPlan(t *testing.T) {
	allow := netallow.List{{Host: "127.0.0.1", Port: 3128}, {Host: "localhost", Port: 3129}, {Host: "api.example.com", Port: 3130}, {Host: "::1", Port: 8080}}
	if got := ProxyPort(allow); got != 3130 {
		t.Errorf("proxyPort = %d, want 3130", got)
	}
	got := strings.Join(LoopbackForwards(allow), " ")
	if want := "127.0.0.1:3128 127.0.0.1:3129 [::1]:3129 [::1]:8080"; got != want {
		t.Errorf("loopbackForwards = %s, want %s", got, want)
	}
	env := strings.Join(ProxyEnv([]string{"PATH=/bin", "https_proxy=http://corp:1", "NO_PROXY=x"}, 3130), " ")
	want := "PATH=/bin HTTPS_PROXY=http://127.0.0.1:3130 HTTP_PROXY=http://127.0.0.1:3130 https_proxy=http://127.0.0.1:3130 http_proxy=http://127.0.0.1:3130 ALL_PROXY=http://127.0.0.1:3130 all_proxy=http://127.0.0.1:3130 NODE_USE_ENV_PROXY=1"
	if env != want {
		t.Errorf("proxyEnv = %s\nwant %s", env, want)
	}
}

// The proxy serves at most maxProxyRequests requests and tunnels at once:
// past that it answers 503, and a tunnel that ends gives its place back.
func TestNetProxyBoundsConnections(t *testing.T) {
	ln := sink(t, false)
	port := ln.Addr().(*net.TCPAddr).Port
	sock := filepath.Join(t.TempDir(), FileNetSock)
	p, err := StartNetProxy(sock, netallow.List{{Host: "127.0.0.1", Port: port}}, func(string, ...any) {})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var tunnels []net.Conn
	for range maxProxyRequests {
		up, _, err := tunnel(sock, ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		tunnels = append(tunnels, up)
	}
	if _, _, err := tunnel(sock, ln.Addr().String()); err == nil || !strings.Contains(err.Error(), "503") {
		t.Errorf("tunnel %d: %v, want 503", maxProxyRequests+1, err)
	}
	tunnels[0].Close()
	wtest.Poll(t, 10*time.Second, "a place to come back", func() bool {
		up, _, err := tunnel(sock, ln.Addr().String())
		if err == nil {
			tunnels = append(tunnels, up)
		}
		return err == nil
	})
	for _, c := range tunnels {
		c.Close()
	}
}
