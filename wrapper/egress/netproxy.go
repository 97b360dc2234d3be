package egress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dispatch-tool/dispatch/internal/netallow"
)

// A network allow list (launch.json's network "allow", issue 20): the
// attempt runs in a network namespace of its own, like network "none",
// and reaches the allowed destinations only through the supervisor. Two
// parts:
//
//   - outside the sandbox, the supervisor serves an HTTP proxy (CONNECT,
//     and absolute http:// URLs) on a unix socket in <task>/net. It
//     checks every destination against the allow list, dials the allowed
//     ones itself and logs each refused destination once in task.log.
//   - inside it, net-init (this binary, bound read-only at
//     <task>/net/init) runs first: it listens on 127.0.0.1:<proxy port>,
//     where HTTPS_PROXY and HTTP_PROXY point, and passes every connection
//     on to the socket as it is; for each allowed loopback destination
//     (127.0.0.1:8080) it listens on that address too and asks the proxy
//     for a CONNECT to it, so that a client that does not use a proxy for
//     loopback reaches it all the same. Then it runs the command and ends
//     as it ends.
//
// Everything inside the sandbox is the task's: it may kill net-init (and
// lose its network) or speak to the socket itself; the checks are all
// outside. A destination other than a loopback one is reached only by a
// client that uses the proxy (curl, git over https, pip, npm, go, the
// agent CLIs do); a name is resolved by the proxy, on the node.

// Names in <task>/net.
const (
	DirNet       = "net"
	FileNetSock  = "proxy.sock"
	FileNetInit  = "init"
	NetInitCmd   = "net-init"
	netProxyPort = 3128 // the first port net-init tries for the proxy
)

// maxRefusalsLogged bounds the refused destinations task.log names (each
// once): a task cannot fill its log through the proxy.
const maxRefusalsLogged = 50

// MaxRefusalsNamed bounds the refused destinations a failed attempt's
// error quotes in the line to add (sandbox.RefusedNote); task.log has the rest.
const MaxRefusalsNamed = 10

// RefusedMalformed is what the proxy records for a destination it cannot
// read: refused, never a line to add.
const RefusedMalformed = "a malformed destination"

// maxProxyRequests bounds the requests and tunnels the proxy serves at
// once: a task cannot make its supervisor hold a connection (two file
// descriptors) for every one it opens. Over it, 503.
const maxProxyRequests = 256

// NetProxy is the supervisor's side: the allow list's HTTP proxy.
type NetProxy struct {
	allow netallow.List
	logf  func(format string, args ...any)
	ln    net.Listener
	srv   *http.Server
	rp    *httputil.ReverseProxy
	dial  net.Dialer

	mu      sync.Mutex // guards refused, order, conns, closed
	refused map[string]bool
	order   []string // refused destinations, first first
	// slots holds a token per request or tunnel being served.
	slots  chan struct{}
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup // tunnels
}

// StartNetProxy serves the proxy of allow on the unix socket sock
// (created afresh, mode 0600). logf writes a line to task.log.
func StartNetProxy(sock string, allow netallow.List, logf func(string, ...any)) (*NetProxy, error) {
	ln, err := listenUnix(sock)
	if err != nil {
		return nil, err
	}
	p := &NetProxy{allow: allow, logf: logf, ln: ln, refused: map[string]bool{}, conns: map[net.Conn]struct{}{},
		slots: make(chan struct{}, maxProxyRequests),
		dial:  net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}}
	tr := &http.Transport{Proxy: nil, DialContext: p.dialAllowed, MaxIdleConns: 16, IdleConnTimeout: 30 * time.Second,
		TLSHandshakeTimeout: 30 * time.Second}
	p.rp = &httputil.ReverseProxy{Transport: tr, Rewrite: func(pr *httputil.ProxyRequest) {
		pr.Out.URL = pr.In.URL
		pr.Out.Host = pr.In.Host
	}, ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
		http.Error(w, "dispatch proxy: "+err.Error(), http.StatusBadGateway)
	}}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: time.Minute, ErrorLog: nil}
	go p.srv.Serve(ln)
	return p, nil
}

// listenUnix listens on a unix socket at path, through /proc/self/fd when
// the path is longer than a socket address holds.
func listenUnix(path string) (net.Listener, error) {
	addr, done, err := shortSocketPath(path)
	if err != nil {
		return nil, err
	}
	defer done()
	os.Remove(path)
	ln, err := net.Listen("unix", addr)
	if err != nil {
		return nil, fmt.Errorf("network proxy: listen on %s: %w", path, err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("network proxy: %w", err)
	}
	return ln, nil
}

// dialUnix connects to the unix socket at path (see listenUnix).
func dialUnix(path string) (net.Conn, error) {
	addr, done, err := shortSocketPath(path)
	if err != nil {
		return nil, err
	}
	defer done()
	return net.Dial("unix", addr)
}

// maxSocketPath is what a unix socket address holds (sun_path, 108 bytes
// on Linux, less its NUL), with room to spare.
const maxSocketPath = 100

// shortSocketPath is an address for the socket at path that fits a
// socket address: the path itself, or /proc/self/fd/<fd of its
// directory>/<name> while done has not been called.
func shortSocketPath(path string) (addr string, done func(), err error) {
	if len(path) <= maxSocketPath {
		return path, func() {}, nil
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return "", nil, err
	}
	addr = fmt.Sprintf("/proc/self/fd/%d/%s", d.Fd(), filepath.Base(path))
	if len(addr) > maxSocketPath {
		d.Close()
		return "", nil, fmt.Errorf("socket name %q is too long", filepath.Base(path))
	}
	return addr, func() { d.Close() }, nil
}

// Close stops the proxy and ends its tunnels.
func (p *NetProxy) Close() {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.srv.Close()
	p.wg.Wait()
}

func (p *NetProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	select {
	case p.slots <- struct{}{}:
	default:
		http.Error(w, fmt.Sprintf("dispatch proxy: %d connections at once already", maxProxyRequests), http.StatusServiceUnavailable)
		return
	}
	if r.Method == http.MethodConnect {
		p.connect(w, r) // the tunnel gives the slot back when it ends
		return
	}
	defer func() { <-p.slots }()
	if !r.URL.IsAbs() || (r.URL.Scheme != "http" && r.URL.Scheme != "https") {
		http.Error(w, "dispatch proxy: want CONNECT host:port or an absolute http:// URL", http.StatusBadRequest)
		return
	}
	defaultPort := "80"
	if r.URL.Scheme == "https" {
		defaultPort = "443"
	}
	if _, ok := p.check(r.URL.Host, defaultPort); !ok {
		http.Error(w, "dispatch proxy: "+r.URL.Host+" is not in the task's network allow list", http.StatusForbidden)
		return
	}
	p.rp.ServeHTTP(w, r)
}

// check reports whether target (host:port, or host with defaultPort) is
// allowed, and logs a refused one. addr is host:port to dial.
func (p *NetProxy) check(target, defaultPort string) (addr string, ok bool) {
	host, port, err := net.SplitHostPort(target)
	if err != nil && defaultPort != "" {
		host, port, err = target, defaultPort, nil
	}
	n, perr := strconv.Atoi(port)
	if err != nil || perr != nil || host == "" {
		p.refuse(RefusedMalformed)
		return "", false
	}
	if !p.allow.Allows(host, n) {
		e, err := netallow.Parse(net.JoinHostPort(strings.Trim(host, "[]"), port))
		if err != nil {
			p.refuse(RefusedMalformed)
		} else {
			p.refuse(e.String())
		}
		return "", false
	}
	return net.JoinHostPort(strings.Trim(host, "[]"), port), true
}

// refuse logs a refused destination in task.log, once each.
func (p *NetProxy) refuse(what string) {
	p.mu.Lock()
	seen, n := p.refused[what], len(p.refused)
	if !seen && n <= maxRefusalsLogged {
		p.refused[what] = true
		p.order = append(p.order, what)
	}
	p.mu.Unlock()
	switch {
	case seen || n > maxRefusalsLogged:
	case n == maxRefusalsLogged:
		p.logf("network: %d destinations refused; no more are logged", n)
	default:
		p.logf("network: refused a connection to %s: not in the task's allow list (network: {allow: [...]})", what)
	}
}

// Refused are the destinations the proxy refused, in the order it first
// did (at most maxRefusalsLogged+1).
func (p *NetProxy) Refused() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.order...)
}

// dialAllowed dials for the reverse proxy, checking the destination once
// more.
func (p *NetProxy) dialAllowed(ctx context.Context, network, addr string) (net.Conn, error) {
	if _, ok := p.check(addr, ""); !ok {
		return nil, errors.New(addr + " is not in the task's network allow list")
	}
	return p.dial.DialContext(ctx, network, addr)
}

// connect serves CONNECT host:port: a tunnel to an allowed destination.
func (p *NetProxy) connect(w http.ResponseWriter, r *http.Request) {
	tunnel := false
	defer func() {
		if !tunnel {
			<-p.slots
		}
	}()
	addr, ok := p.check(r.Host, "")
	if !ok {
		http.Error(w, "dispatch proxy: "+r.Host+" is not in the task's network allow list", http.StatusForbidden)
		return
	}
	up, err := p.dial.DialContext(r.Context(), "tcp", addr)
	if err != nil {
		http.Error(w, "dispatch proxy: "+err.Error(), http.StatusBadGateway)
		return
	}
	c, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		up.Close()
		return
	}
	if !p.track(c, up) {
		return
	}
	tunnel = true
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer func() { <-p.slots }()
		defer p.untrack(c, up)
		if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
			return
		}
		splice(c, brw.Reader, up)
	}()
}

func (p *NetProxy) track(conns ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		for _, c := range conns {
			c.Close()
		}
		return false
	}
	for _, c := range conns {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *NetProxy) untrack(conns ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range conns {
		c.Close()
		delete(p.conns, c)
	}
}

// splice copies a's bytes (read through ar, which may hold some already)
// to b and b's to a until both directions end; a direction that ends
// closes the other side's writing half.
func splice(a net.Conn, ar io.Reader, b net.Conn) {
	done := make(chan struct{})
	go func() {
		io.Copy(b, ar)
		closeWrite(b)
		close(done)
	}()
	io.Copy(a, b)
	closeWrite(a)
	<-done
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
		return
	}
	c.Close()
}
