package httpapi

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"
)

// DefaultAddr is where serve --http listens without an address.
const DefaultAddr = "127.0.0.1:7878"

// Listen is how the server listens.
type Listen struct {
	Addr string
	// CertFile and KeyFile make it speak TLS.
	CertFile, KeyFile string
	// Insecure lets a non-loopback address listen without TLS.
	Insecure bool
	// ReadOnly makes the server refuse every action (serve --read-only).
	ReadOnly bool
}

// ErrExposed is returned for a non-loopback address without TLS.
var ErrExposed = errors.New("refusing to serve the API in clear text beyond this machine")

// Check says what is wrong with l before anything listens.
func (l Listen) Check() error {
	host, _, err := net.SplitHostPort(l.Addr)
	if err != nil {
		return fmt.Errorf("--http %q is not host:port (e.g. %s): %w", l.Addr, DefaultAddr, err)
	}
	if (l.CertFile == "") != (l.KeyFile == "") {
		return errors.New("--tls-cert and --tls-key go together: give both, or neither")
	}
	if l.CertFile != "" || l.Insecure || Loopback(host) {
		return nil
	}
	return fmt.Errorf("%w: %s is reachable from other machines, and the token and every task's log would cross the network readable; "+
		"give --tls-cert and --tls-key, listen on 127.0.0.1 and reach it through ssh -L, or, on a network you trust, --insecure-listen", ErrExposed, l.Addr)
}

// Loopback reports whether host names this machine only.
func Loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// TLS reports whether l speaks TLS.
func (l Listen) TLS() bool { return l.CertFile != "" }

// Open checks l and listens, holding at most MaxConns connections at once.
func (l Listen) Open() (net.Listener, error) {
	if err := l.Check(); err != nil {
		return nil, err
	}
	var cfg *tls.Config
	if l.TLS() {
		cert, err := tls.LoadX509KeyPair(l.CertFile, l.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("--tls-cert %s --tls-key %s: %w", l.CertFile, l.KeyFile, err)
		}
		cfg = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	ln, err := net.Listen("tcp", l.Addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w (another program uses it? give another address: --http 127.0.0.1:7879)", l.Addr, err)
	}
	// Under TLS, so that the server still sees a *tls.Conn.
	ln = &limitListener{Listener: ln, sem: make(chan struct{}, MaxConns), done: make(chan struct{})}
	if cfg != nil {
		ln = tls.NewListener(ln, cfg)
	}
	return ln, nil
}

// URL is where the dashboard is, with the token when tok is given. bound
// is the address the listener got ("" before it listens): it names the
// port when Addr asked for any (port 0).
func (l Listen) URL(bound, tok string) string {
	scheme := "http"
	if l.TLS() {
		scheme = "https"
	}
	addr := l.Addr
	if _, port, err := net.SplitHostPort(l.Addr); bound != "" && (err != nil || port == "0") {
		addr = bound
	}
	u := scheme + "://" + addr + "/"
	if tok != "" {
		u += "?token=" + tok
	}
	return u
}

// MaxConns bounds the connections the server holds at once. Whoever can
// connect (another user of the machine) needs no token to open one: the
// daemon's controller, in the same process, keeps its file descriptors.
// A browser holds a few (six at most per host, one per stream).
const MaxConns = 256

// limitListener accepts a connection only while fewer than cap(sem) are
// open; the next waits in the kernel's queue until one closes.
type limitListener struct {
	net.Listener
	sem   chan struct{}
	done  chan struct{}
	close sync.Once
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.sem <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	return &limitConn{Conn: c, release: func() { <-l.sem }}, nil
}

func (l *limitListener) Close() error {
	l.close.Do(func() { close(l.done) })
	return l.Listener.Close()
}

type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// Serve serves s on ln until Stop: a Running server's owner calls Stop,
// which ends every stream and waits for the server's goroutines.
func (s *Server) Serve(ln net.Listener) *Running {
	ctx, cancel := context.WithCancel(context.Background())
	h := s.Handler()
	r := &Running{cancel: cancel}
	counted := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		if r.stopping {
			r.mu.Unlock()
			http.Error(w, "dispatch serve is stopping", http.StatusServiceUnavailable)
			return
		}
		r.handlers.Add(1)
		r.mu.Unlock()
		defer r.handlers.Done()
		h.ServeHTTP(w, req)
	})
	srv := &http.Server{Handler: counted, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
		BaseContext: func(net.Listener) context.Context { return ctx }}
	if s.Log != nil {
		srv.ErrorLog = slog.NewLogLogger(s.Log.Handler(), slog.LevelDebug)
	}
	r.srv = srv
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) && s.Log != nil {
			s.Log.Error("the HTTP API stopped", "err", err)
		}
	}()
	return r
}

// Running is a server that serves.
type Running struct {
	srv    *http.Server
	cancel context.CancelFunc
	wg     sync.WaitGroup // Serve
	// handlers counts the requests being answered: Stop waits for them
	// too, before what they read is closed.
	handlers sync.WaitGroup
	mu       sync.Mutex
	stopping bool
}

// Stop ends the streams, lets the other requests finish (a few seconds at
// most) and returns once the server has.
func (r *Running) Stop() {
	r.cancel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if r.srv.Shutdown(ctx) != nil {
		r.srv.Close()
	}
	r.wg.Wait()
	r.mu.Lock()
	r.stopping = true
	r.mu.Unlock()
	r.handlers.Wait()
}
