package sshnode

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/pkg/sftp"
	"golang.org/x/crypto/ssh"
)

// Config says how to reach one node over SSH.
type Config struct {
	Node   string // node name, for messages
	Target string // the node's ssh: value
	Env    Env
	// ConnectTimeout bounds the TCP connect and the SSH handshake of each hop.
	ConnectTimeout time.Duration
	// StrictHostKeyChecking is the node's setting: "" or "yes" refuse unknown
	// keys, "accept-new" records them. A changed key is always refused.
	StrictHostKeyChecking string
	// AgentSocket is the ssh-agent socket; "" means $SSH_AUTH_SOCK.
	AgentSocket string
	// Keepalive is how often a quiet connection asks the node for a sign
	// of life; after three intervals without one it is dropped (see
	// keepalive.go). 0 means DefaultKeepalive; negative, no keepalives.
	Keepalive time.Duration
}

// SSH is the transport to a node over one multiplexed SSH connection
// (sessions for commands, SFTP for files), opened on first use and reopened
// after a failure.
type SSH struct {
	cfg Config
	ep  *Endpoint

	// mu guards the fields below it.
	mu     sync.Mutex
	client *ssh.Client
	hops   []*ssh.Client
	sftp   *sftp.Client
	home   string
	uid    int // the node user's uid once known, else -1 (see UID)
	closed bool
	// dialing is the connection being made, which every call waiting for
	// one shares (nil: none); each waits for it only as long as its ctx.
	dialing *dialing
	// gaveUp is set when the connection was dropped for the node's
	// silence, until a new one is made (see Silence).
	gaveUp bool

	// heard is when the node last sent a byte (unix nanoseconds; 0 never).
	heard atomic.Int64

	// sessions bounds the command sessions open at once on the connection:
	// OpenSSH allows MaxSessions (10 by default) per connection, SFTP
	// takes one, and a burst of launches must wait rather than be refused.
	sessions chan struct{}
}

// maxSessions is how many commands run at once on one node's connection.
const maxSessions = 8

// sessionsHeld is how many sessions dispatch may hold at once on a node's
// connection: maxSessions (commands, and the status, run, collect and watch
// conversations) and SFTP's. A node's sshd must allow as many
// (MaxSessions).
const sessionsHeld = maxSessions + 1

// sessionRefused is err, when it is sshd's refusal of one more session on
// the connection (OpenSSH past MaxSessions: "open failed", as
// "administratively prohibited" or, 9.2's, "connect failed"), as an error
// that says so and how to fix it; else err.
func (s *SSH) sessionRefused(err error) error {
	var oe *ssh.OpenChannelError
	if !errors.As(err, &oe) {
		return err
	}
	return fmt.Errorf("node %s's sshd refused one more SSH session on the connection (%w): its MaxSessions "+
		"is lower than the %d sessions dispatch may hold on a node (SFTP, the status, run, collect and watch conversations, "+
		"commands); set MaxSessions %d or more (OpenSSH's default is 10) in the node's sshd_config, or in a "+
		"Match block for its user, and reload sshd", s.cfg.Node, err, sessionsHeld, sessionsHeld)
}

var (
	_ nodes.Transport = (*SSH)(nil)
	_ nodes.Converser = (*SSH)(nil)
	_ nodes.ExecToer  = (*SSH)(nil)
)

// New resolves the node's ssh: value (command line, user@host[:port] or a
// ~/.ssh/config alias); it connects nothing yet.
func New(cfg Config) (*SSH, error) {
	ep, err := cfg.Env.ParseSSHTarget(cfg.Target)
	if err != nil {
		return nil, err
	}
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = 10 * time.Second
		if ep.ConnectTimeout > 0 {
			cfg.ConnectTimeout = ep.ConnectTimeout
		}
	}
	if cfg.Keepalive == 0 {
		cfg.Keepalive = DefaultKeepalive
	}
	return &SSH{cfg: cfg, ep: ep, uid: -1, sessions: make(chan struct{}, maxSessions)}, nil
}

// Endpoint returns where the transport connects.
func (s *SSH) Endpoint() *Endpoint { return s.ep }

// unreachable wraps err as a failure to reach the node.
func (s *SSH) unreachable(err error) error {
	var uk *HostKeyUnknownError
	var ch *HostKeyChangedError
	if errors.As(err, &uk) || errors.As(err, &ch) {
		return &nodes.UnreachableError{Node: s.cfg.Node, Err: err}
	}
	return &nodes.UnreachableError{Node: s.cfg.Node, Addr: fmt.Sprintf("%s@%s:%d", s.ep.User, s.ep.Host, s.ep.Port), Err: err}
}

// dialing is one connection being made; done is closed once client or
// err is set.
type dialing struct {
	done   chan struct{}
	client *ssh.Client
	err    error
}

// connect returns the live client, dialling it (through its jump hosts or
// proxy command) when there is none. The dial is shared by every call that
// needs the connection meanwhile and bounded by ConnectTimeout; each call
// waits for it no longer than its own ctx.
func (s *SSH) connect(ctx context.Context) (*ssh.Client, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, errors.New("ssh transport closed")
	}
	if c := s.client; c != nil {
		s.mu.Unlock()
		return c, nil
	}
	d := s.dialing
	if d == nil {
		d = &dialing{done: make(chan struct{})}
		s.dialing = d
		go s.runDial(context.WithoutCancel(ctx), d)
	}
	s.mu.Unlock()
	select {
	case <-d.done:
		return d.client, d.err
	case <-ctx.Done():
		return nil, s.unreachable(fmt.Errorf("no SSH connection yet: %w", context.Cause(ctx)))
	}
}

// runDial makes the connection d stands for and installs it.
func (s *SSH) runDial(ctx context.Context, d *dialing) {
	defer close(d.done)
	auth, err := authMethod(s.cfg, s.ep)
	var client *ssh.Client
	var hops []*ssh.Client
	if err == nil {
		client, hops, err = s.dial(ctx, s.ep, auth, 0)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dialing = nil
	switch {
	case err != nil:
		d.err = s.unreachable(err)
	case s.closed:
		client.Close()
		closeAll(hops)
		d.err = errors.New("ssh transport closed")
	default:
		s.client, s.hops, s.gaveUp = client, hops, false
		d.client = client
		if s.cfg.Keepalive > 0 {
			go s.keepalive(client, s.cfg.Keepalive)
		}
	}
}

// dial connects to ep and completes the SSH handshake.
func (s *SSH) dial(ctx context.Context, ep *Endpoint, auth ssh.AuthMethod, depth int) (*ssh.Client, []*ssh.Client, error) {
	conn, hops, err := s.dialConn(ctx, ep, depth)
	if err != nil {
		return nil, nil, err
	}
	if depth == 0 {
		// The node's own connection, not a jump host's: its bytes are
		// what keepalives watch.
		conn = &heardConn{Conn: conn, heard: &s.heard}
	}
	hk := newHostKeys(s.cfg.Node, s.cfg.Env, ep, s.cfg.StrictHostKeyChecking)
	cb, algos, err := hk.config(ep)
	if err != nil {
		conn.Close()
		closeAll(hops)
		return nil, nil, err
	}
	client, err := s.handshake(ctx, conn, ep, auth, cb, algos)
	if err != nil {
		closeAll(hops)
		return nil, nil, err
	}
	return client, hops, nil
}

// dialConn opens the byte stream to ep: over TCP, through its proxy
// command, or through its jump hosts (each checked against known_hosts like
// the target). The hops returned must be closed after the connection.
func (s *SSH) dialConn(ctx context.Context, ep *Endpoint, depth int) (net.Conn, []*ssh.Client, error) {
	if depth > 8 {
		return nil, nil, errors.New("ProxyJump chain longer than 8 hops (a loop in ~/.ssh/config?)")
	}
	addr := net.JoinHostPort(ep.Host, strconv.Itoa(ep.Port))
	switch {
	case len(ep.ProxyJump) > 0:
		var hops []*ssh.Client
		var prev *ssh.Client
		for i, hop := range ep.ProxyJump {
			// Hops are resolved with the config the target used (ssh -F).
			henv := s.cfg.Env
			if ep.ConfigFile != "" {
				henv.ConfigFile = ep.ConfigFile
			}
			hep, err := henv.Resolve(hop)
			if err != nil {
				closeAll(hops)
				return nil, nil, fmt.Errorf("ProxyJump %s: %w", hop, err)
			}
			hauth, err := authMethod(s.cfg, hep)
			if err != nil {
				closeAll(hops)
				return nil, nil, fmt.Errorf("ProxyJump %s: %w", hop, err)
			}
			var hc *ssh.Client
			if i == 0 {
				var inner []*ssh.Client
				hc, inner, err = s.dial(ctx, hep, hauth, depth+1)
				hops = append(hops, inner...)
			} else {
				var c net.Conn
				c, err = dialVia(ctx, prev, net.JoinHostPort(hep.Host, strconv.Itoa(hep.Port)), s.cfg.ConnectTimeout)
				if err == nil {
					hk := newHostKeys(s.cfg.Node, s.cfg.Env, hep, s.cfg.StrictHostKeyChecking)
					cb, algos, herr := hk.config(hep)
					if herr != nil {
						c.Close()
						err = herr
					} else {
						hc, err = s.handshake(ctx, c, hep, hauth, cb, algos)
					}
				}
			}
			if err != nil {
				closeAll(hops)
				return nil, nil, fmt.Errorf("ProxyJump %s: %w", hop, err)
			}
			hops = append(hops, hc)
			prev = hc
		}
		c, err := dialVia(ctx, prev, addr, s.cfg.ConnectTimeout)
		if err != nil {
			closeAll(hops)
			return nil, nil, fmt.Errorf("through %s: %w", ep.ProxyJump[len(ep.ProxyJump)-1], err)
		}
		return c, hops, nil
	case ep.ProxyCommand != "":
		c, err := proxyCommandConn(ep.ProxyCommand)
		return c, nil, err
	}
	d := net.Dialer{Timeout: s.cfg.ConnectTimeout}
	c, err := d.DialContext(ctx, "tcp", addr)
	return c, nil, err
}

// handshake runs the SSH handshake on conn within the connect timeout: a
// node that accepts TCP but never answers (a stopped sshd) fails here
// instead of hanging.
func (s *SSH) handshake(ctx context.Context, conn net.Conn, ep *Endpoint, auth ssh.AuthMethod, cb ssh.HostKeyCallback, algos []string) (*ssh.Client, error) {
	cc := &ssh.ClientConfig{
		User:              ep.User,
		Auth:              []ssh.AuthMethod{auth},
		HostKeyCallback:   cb,
		HostKeyAlgorithms: algos,
		Timeout:           s.cfg.ConnectTimeout,
	}
	addr := net.JoinHostPort(ep.Host, strconv.Itoa(ep.Port))
	type result struct {
		c     ssh.Conn
		chans <-chan ssh.NewChannel
		reqs  <-chan *ssh.Request
		err   error
	}
	ch := make(chan result, 1)
	_ = conn.SetDeadline(time.Now().Add(s.cfg.ConnectTimeout))
	go func() {
		c, chans, reqs, err := ssh.NewClientConn(conn, addr, cc)
		ch <- result{c, chans, reqs, err}
	}()
	timer := time.NewTimer(s.cfg.ConnectTimeout)
	defer timer.Stop()
	select {
	case r := <-ch:
		if r.err != nil {
			conn.Close()
			if isTimeout(r.err) {
				return nil, fmt.Errorf("no SSH handshake from %s within %s (is the host hung?)", addr, s.cfg.ConnectTimeout)
			}
			return nil, authHint(r.err, ep, s.whose(ep))
		}
		_ = conn.SetDeadline(time.Time{})
		return ssh.NewClient(r.c, r.chans, r.reqs), nil
	case <-timer.C:
		conn.Close()
		return nil, fmt.Errorf("no SSH handshake from %s within %s (is the host hung?)", addr, s.cfg.ConnectTimeout)
	case <-ctx.Done():
		conn.Close()
		return nil, ctx.Err()
	}
}

// whose names the host ep is in messages: the node, or a jump host on
// the way to it.
func (s *SSH) whose(ep *Endpoint) string {
	if ep == s.ep {
		return "node " + s.cfg.Node
	}
	return "a ProxyJump host of node " + s.cfg.Node
}

// authHint adds the fix to a refused login to ep, the host of what.
func authHint(err error, ep *Endpoint, what string) error {
	if strings.Contains(err.Error(), "unable to authenticate") {
		return fmt.Errorf("%w\n  fix: check that your public key is in ~%s/.ssh/authorized_keys on %s (%s): ssh-copy-id %s@%s, or set IdentityFile / -i",
			err, ep.User, ep.Host, what, ep.User, ep.Host)
	}
	return err
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// dialVia opens a TCP connection to addr through an SSH client (a jump
// host), bounded by timeout.
func dialVia(ctx context.Context, via *ssh.Client, addr string, timeout time.Duration) (net.Conn, error) {
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		c, err := via.Dial("tcp", addr)
		ch <- result{c, err}
	}()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	// A dial given up on still ends (the caller closes via on error); a
	// connection it opens then is closed, not left to the jump host.
	abandon := func() {
		go func() {
			if r := <-ch; r.c != nil {
				r.c.Close()
			}
		}()
	}
	select {
	case r := <-ch:
		return r.c, r.err
	case <-timer.C:
		abandon()
		return nil, fmt.Errorf("dial %s through jump host: timed out after %s", addr, timeout)
	case <-ctx.Done():
		abandon()
		return nil, ctx.Err()
	}
}

func closeAll(cs []*ssh.Client) {
	for i := len(cs) - 1; i >= 0; i-- {
		cs[i].Close()
	}
}

// reset drops the connection c after a failure so the next call reconnects;
// closing it also unblocks every call still waiting on it.
func (s *SSH) reset(c *ssh.Client) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.client != c || c == nil {
		return
	}
	s.closeLocked()
}

func (s *SSH) closeLocked() {
	// The connection goes first: closing the SFTP client waits for its
	// reader, which only ends once the connection under it is gone (on a
	// hung node it would wait forever, holding s.mu).
	if s.client != nil {
		s.client.Close()
		s.client = nil
	}
	closeAll(s.hops)
	s.hops = nil
	if s.sftp != nil {
		s.sftp.Close()
		s.sftp = nil
	}
}

// call runs fn on the live connection and gives up when ctx ends: the
// connection is then dropped (a node that does not answer in time is treated
// as hung), which unblocks fn. fn's result travels back over a channel, so a
// call given up on never writes into its caller's variables.
func call[T any](ctx context.Context, s *SSH, fn func(*ssh.Client) (T, error)) (T, error) {
	var zero T
	c, err := s.connect(ctx)
	if err != nil {
		return zero, err
	}
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := fn(c)
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		if isConnError(r.err) {
			s.reset(c)
			return r.v, s.unreachable(r.err)
		}
		return r.v, r.err
	case <-ctx.Done():
		s.reset(c)
		return zero, &nodes.UnreachableError{Node: s.cfg.Node, Err: fmt.Errorf("no answer: %w", context.Cause(ctx))}
	}
}

// isConnError reports errors that mean the connection is gone, as opposed to
// an error of the operation (a missing file, a failed command).
func isConnError(err error) bool {
	if err == nil {
		return false
	}
	var ne net.Error
	var em *ssh.ExitMissingError
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.As(err, &ne) || errors.As(err, &em) || errors.Is(err, sftp.ErrSSHFxConnectionLost) {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "connection lost") || strings.Contains(msg, "broken pipe") ||
		strings.Contains(msg, "connection reset") || strings.Contains(msg, "use of closed network connection")
}

// sftpClient returns the SFTP client multiplexed on c. It is started
// without holding s.mu: on a hung node the start blocks until the call's
// deadline resets the connection, and nothing else may wait for it.
func (s *SSH) sftpClient(c *ssh.Client) (*sftp.Client, error) {
	s.mu.Lock()
	if s.client != c {
		s.mu.Unlock()
		return nil, io.EOF // c was reset meanwhile
	}
	if f := s.sftp; f != nil {
		s.mu.Unlock()
		return f, nil
	}
	s.mu.Unlock()
	f, err := sftp.NewClient(c)
	if err != nil {
		return nil, fmt.Errorf("start sftp: %w", s.sessionRefused(err))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.client != c:
		f.Close()
		return nil, io.EOF
	case s.sftp != nil:
		f.Close() // another call started one first
		return s.sftp, nil
	}
	s.sftp = f
	return f, nil
}

func callSFTP[T any](ctx context.Context, s *SSH, fn func(*sftp.Client) (T, error)) (T, error) {
	return call(ctx, s, func(c *ssh.Client) (T, error) {
		f, err := s.sftpClient(c)
		if err != nil {
			var zero T
			return zero, err
		}
		return fn(f)
	})
}

// Home returns the SSH user's home directory: SFTP's starting directory.
func (s *SSH) Home(ctx context.Context) (string, error) {
	s.mu.Lock()
	home := s.home
	s.mu.Unlock()
	if home != "" {
		return home, nil
	}
	home, err := callSFTP(ctx, s, func(f *sftp.Client) (string, error) {
		wd, err := f.Getwd()
		if err != nil {
			return "", fmt.Errorf("home directory: %w", err)
		}
		if !path.IsAbs(wd) {
			return "", fmt.Errorf("home directory %q is not absolute", wd)
		}
		return path.Clean(wd), nil
	})
	if err != nil {
		return "", err
	}
	s.mu.Lock()
	s.home = home
	s.mu.Unlock()
	return home, nil
}

// Exec runs argv through the remote user's shell with every argument quoted.
func (s *SSH) Exec(ctx context.Context, argv []string, stdin []byte) (nodes.Result, error) {
	var in io.Reader
	if len(stdin) > 0 {
		in = bytes.NewReader(stdin)
	}
	return s.ExecFrom(ctx, argv, in)
}

// ExecFrom is Exec with the command's stdin copied from r as it runs (nil
// for none): a tree streamed into `wrapper untar` is never whole in memory.
func (s *SSH) ExecFrom(ctx context.Context, argv []string, stdin io.Reader) (nodes.Result, error) {
	return s.exec(ctx, argv, stdin, nil)
}

// ExecTo is Exec with the command's stdout copied to stdout as it runs,
// uncapped (Result.Stdout stays empty): a node's files come back in one
// stream, never whole in memory. A write to stdout that fails ends the
// command.
func (s *SSH) ExecTo(ctx context.Context, argv []string, stdin []byte, stdout io.Writer) (nodes.Result, error) {
	var in io.Reader
	if len(stdin) > 0 {
		in = bytes.NewReader(stdin)
	}
	return s.exec(ctx, argv, in, stdout)
}

// exec runs argv with stdin from in (nil: none) and its stdout captured
// up to MaxExecOutput, or, when out is set, copied to out.
func (s *SSH) exec(ctx context.Context, argv []string, stdin io.Reader, out io.Writer) (nodes.Result, error) {
	if len(argv) == 0 || argv[0] == "" {
		return nodes.Result{}, errors.New("exec: empty command")
	}
	select {
	case s.sessions <- struct{}{}:
		defer func() { <-s.sessions }()
	case <-ctx.Done():
		return nodes.Result{}, fmt.Errorf("exec %s on %s: waiting for a free session: %w", argv[0], s.cfg.Node, ctx.Err())
	}
	res, err := call(ctx, s, func(c *ssh.Client) (nodes.Result, error) {
		sess, err := c.NewSession()
		// sshd frees a closed session's slot a moment after the client sees
		// it close: a refusal right after one is worth a few quick retries.
		for try := 1; err != nil && try <= 5; try++ {
			var oe *ssh.OpenChannelError
			if !errors.As(err, &oe) {
				break
			}
			time.Sleep(time.Duration(try) * 20 * time.Millisecond)
			sess, err = c.NewSession()
		}
		if err != nil {
			var oe *ssh.OpenChannelError
			if errors.As(err, &oe) {
				// The server refused another session (MaxSessions): the
				// command surely did not run; say so plainly.
				return nodes.Result{}, &nodes.UnreachableError{Node: s.cfg.Node, Err: s.sessionRefused(err)}
			}
			return nodes.Result{}, err
		}
		defer sess.Close()
		// Output past MaxExecOutput ends the session: sshd closes the
		// command's pipes and the command dies of SIGPIPE.
		over := func() {
			go func() {
				_ = sess.Signal(ssh.SIGKILL)
				_ = sess.Close()
			}()
		}
		stdout, stderr := nodes.NewCappedBuffer(nodes.MaxExecOutput, over), nodes.NewCappedBuffer(nodes.MaxExecOutput, over)
		sess.Stdout, sess.Stderr = stdout, stderr
		var failed *failingWriter
		if out != nil {
			failed = &failingWriter{w: out, fail: over}
			sess.Stdout = failed
		}
		err = runSession(sess, ShellQuote(argv), stdin)
		if failed != nil && failed.err != nil {
			return nodes.Result{}, fmt.Errorf("stdout: %w", failed.err)
		}
		if stdout.Overflowed() || stderr.Overflowed() {
			return nodes.Result{}, fmt.Errorf("%w: it printed more than %d MiB and was killed", nodes.ErrOutputTooLarge, nodes.MaxExecOutput>>20)
		}
		res := nodes.Result{Stdout: stdout.Bytes(), Stderr: stderr.Bytes()}
		var ee *ssh.ExitError
		if errors.As(err, &ee) {
			res.ExitCode = ee.ExitStatus()
			if sig := ee.Signal(); sig != "" {
				res.ExitCode = 128 + signalNumber(sig)
			}
			return res, nil
		}
		return res, err
	})
	if err != nil {
		return res, fmt.Errorf("exec %s on %s: %w", argv[0], s.cfg.Node, err)
	}
	return res, nil
}

// failingWriter passes writes to w; the first that fails calls fail (which
// ends the session: nothing reads the channel any more) and is kept.
type failingWriter struct {
	w    io.Writer
	fail func()
	err  error
}

func (f *failingWriter) Write(p []byte) (int, error) {
	n, err := f.w.Write(p)
	if err != nil && f.err == nil {
		f.err = err
		f.fail()
	}
	return n, err
}

// signalNumber maps an SSH signal name (RFC 4254 §6.10: the POSIX name
// without "SIG", e.g. "KILL", "USR1") to its number on the controller's
// platform, for the 128+N exit code a shell would report (the local
// transport reports the same). An unknown name gives 0 (exit code 128).
func signalNumber(name string) int {
	return int(posixSignals[strings.TrimPrefix(strings.ToUpper(name), "SIG")])
}

// posixSignals numbers the signal names a node may report. Go's
// syscall.Signal(n).String() gives descriptions ("killed", "user defined
// signal 1"), not names, so the table is spelled out.
var posixSignals = map[string]syscall.Signal{
	"HUP": syscall.SIGHUP, "INT": syscall.SIGINT, "QUIT": syscall.SIGQUIT, "ILL": syscall.SIGILL,
	"TRAP": syscall.SIGTRAP, "ABRT": syscall.SIGABRT, "IOT": syscall.SIGABRT, "BUS": syscall.SIGBUS,
	"FPE": syscall.SIGFPE, "KILL": syscall.SIGKILL, "USR1": syscall.SIGUSR1, "SEGV": syscall.SIGSEGV,
	"USR2": syscall.SIGUSR2, "PIPE": syscall.SIGPIPE, "ALRM": syscall.SIGALRM, "TERM": syscall.SIGTERM,
	"CHLD": syscall.SIGCHLD, "CONT": syscall.SIGCONT, "STOP": syscall.SIGSTOP, "TSTP": syscall.SIGTSTP,
	"TTIN": syscall.SIGTTIN, "TTOU": syscall.SIGTTOU, "URG": syscall.SIGURG, "XCPU": syscall.SIGXCPU,
	"XFSZ": syscall.SIGXFSZ, "VTALRM": syscall.SIGVTALRM, "PROF": syscall.SIGPROF, "WINCH": syscall.SIGWINCH,
	"IO": syscall.SIGIO, "SYS": syscall.SIGSYS,
}

// runSession runs cmd in sess with stdin written to its input, which is
// then closed. The input goes straight to the channel: a Session.Stdin
// would be copied through a pipe with a 32 KiB buffer per call. The
// writer ends with the session at the latest and is waited for.
func runSession(sess *ssh.Session, cmd string, stdin io.Reader) error {
	if stdin == nil {
		return sess.Run(cmd)
	}
	w, err := sess.StdinPipe()
	if err != nil {
		return err
	}
	if err := sess.Start(cmd); err != nil {
		return err
	}
	wrote := make(chan struct{})
	go func() {
		defer close(wrote)
		_, _ = io.Copy(w, stdin)
		_ = w.Close()
	}()
	err = sess.Wait()
	// A command that exits without reading all of its input leaves the
	// write blocked until the channel closes.
	_ = sess.Close()
	<-wrote
	return err
}

// ShellQuote renders argv as one POSIX shell command line, every argument in
// single quotes, so that nothing in it is interpreted by the remote shell.
func ShellQuote(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = shellQuote(a)
	}
	return strings.Join(q, " ")
}

func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// Put writes r to a hidden temporary file next to path and renames it into
// place (posix-rename), so no reader ever sees a partial file.
func (s *SSH) Put(ctx context.Context, p string, r io.Reader, mode fs.FileMode) error {
	if err := nodes.CheckPath(p); err != nil {
		return err
	}
	_, err := callSFTP(ctx, s, func(f *sftp.Client) (struct{}, error) {
		return struct{}{}, putFile(f, p, r, mode)
	})
	if err != nil {
		return fmt.Errorf("put %s on %s: %w", p, s.cfg.Node, err)
	}
	return nil
}

func putFile(f *sftp.Client, p string, r io.Reader, mode fs.FileMode) (err error) {
	dir := path.Dir(p)
	if err := mkdirPrivateSFTP(f, dir); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	tmp := path.Join(dir, "."+path.Base(p)+".tmp-"+randomSuffix())
	w, err := f.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL)
	if err != nil {
		return fmt.Errorf("create %s: %w", tmp, err)
	}
	defer func() {
		if err != nil {
			w.Close()
			_ = f.Remove(tmp)
		}
	}()
	if _, err := io.Copy(w, r); err != nil {
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := w.Chmod(mode.Perm()); err != nil {
		return fmt.Errorf("chmod %s: %w", tmp, err)
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := f.PosixRename(tmp, p); err != nil {
		return fmt.Errorf("rename %s to %s: %w", tmp, p, err)
	}
	return nil
}

func randomSuffix() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Get copies the file at path to w. w is written only while the call is
// live: a call given up on stops writing when its connection is closed.
func (s *SSH) Get(ctx context.Context, p string, w io.Writer) error {
	if err := nodes.CheckPath(p); err != nil {
		return err
	}
	gw := &guardWriter{w: w}
	defer gw.stop()
	_, err := callSFTP(ctx, s, func(f *sftp.Client) (struct{}, error) {
		// Only a regular file, never through a symbolic link: a task may
		// have left one pointing anywhere, and opening a FIFO would block
		// the node's SFTP server.
		fi, err := f.Lstat(p)
		if err != nil {
			return struct{}{}, notExist(err)
		}
		if err := nodes.RegularFile(fi); err != nil {
			return struct{}{}, err
		}
		r, err := f.Open(p)
		if err != nil {
			return struct{}{}, notExist(err)
		}
		defer r.Close()
		_, err = r.WriteTo(gw)
		return struct{}{}, err
	})
	if err != nil {
		return fmt.Errorf("get %s from %s: %w", p, s.cfg.Node, err)
	}
	return nil
}

// guardWriter lets a Get that was given up on stop writing into its
// caller's writer once Get has returned.
type guardWriter struct {
	mu      sync.Mutex
	w       io.Writer
	stopped bool
}

func (g *guardWriter) Write(p []byte) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stopped {
		return 0, io.ErrClosedPipe
	}
	return g.w.Write(p)
}

func (g *guardWriter) stop() {
	g.mu.Lock()
	g.stopped = true
	g.mu.Unlock()
}

// notExist makes SFTP's "no such file" match fs.ErrNotExist.
func notExist(err error) error {
	var se *sftp.StatusError
	if errors.As(err, &se) && se.FxCode() == sftp.ErrSSHFxNoSuchFile {
		return fmt.Errorf("%w: %w", fs.ErrNotExist, err)
	}
	return err
}

// Walk lists the regular files and symlinks under dir.
func (s *SSH) Walk(ctx context.Context, dir string) ([]nodes.FileInfo, error) {
	if err := nodes.CheckPath(dir); err != nil {
		return nil, err
	}
	out, err := callSFTP(ctx, s, func(f *sftp.Client) ([]nodes.FileInfo, error) {
		var out []nodes.FileInfo
		fi, err := f.Lstat(dir)
		if err != nil {
			return nil, notExist(err)
		}
		if err := nodes.WalkRoot(fi); err != nil {
			return nil, err
		}
		w := f.Walk(dir)
		for w.Step() {
			if err := w.Err(); err != nil {
				return nil, notExist(err)
			}
			fi := w.Stat()
			if !fi.Mode().IsRegular() && fi.Mode()&fs.ModeSymlink == 0 {
				continue
			}
			rel := strings.TrimPrefix(strings.TrimPrefix(w.Path(), dir), "/")
			out = append(out, nodes.FileInfo{Path: rel, Size: fi.Size(), Mode: fi.Mode()})
		}
		sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
		return out, nil
	})
	if err != nil {
		return nil, fmt.Errorf("walk %s on %s: %w", dir, s.cfg.Node, err)
	}
	return out, nil
}

// Remove removes the file or tree at path.
func (s *SSH) Remove(ctx context.Context, p string) error {
	if err := nodes.CheckPath(p); err != nil {
		return err
	}
	if path.Clean(p) == "/" {
		return errors.New("refusing to remove /")
	}
	_, err := callSFTP(ctx, s, func(f *sftp.Client) (struct{}, error) {
		if _, err := f.Lstat(p); err != nil {
			if errors.Is(notExist(err), fs.ErrNotExist) {
				return struct{}{}, nil
			}
			return struct{}{}, err
		}
		if err := f.RemoveAll(p); err == nil {
			return struct{}{}, nil
		}
		// Read-only directories inside: make them writable and try again.
		w := f.Walk(p)
		for w.Step() {
			if w.Err() == nil && w.Stat().IsDir() {
				_ = f.Chmod(w.Path(), 0o700)
			}
		}
		return struct{}{}, f.RemoveAll(p)
	})
	if err != nil {
		return fmt.Errorf("remove %s on %s: %w", p, s.cfg.Node, err)
	}
	return nil
}

// Close closes the connection.
func (s *SSH) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	s.closeLocked()
	return nil
}

// proxyCommandConn runs a ProxyCommand and talks SSH over its stdin and
// stdout.
func proxyCommandConn(command string) (net.Conn, error) {
	cmd := exec.Command("/bin/sh", "-c", command)
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = io.Discard
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("ProxyCommand %q: %w", command, err)
	}
	return &pipeConn{cmd: cmd, in: in, out: out}, nil
}

// pipeConn is a net.Conn over a proxy command's stdio. Deadlines are
// enforced by closing it (the handshake's timer does that).
type pipeConn struct {
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  io.ReadCloser
	once sync.Once
}

func (p *pipeConn) Read(b []byte) (int, error)  { return p.out.Read(b) }
func (p *pipeConn) Write(b []byte) (int, error) { return p.in.Write(b) }
func (p *pipeConn) Close() error {
	p.once.Do(func() {
		p.in.Close()
		p.out.Close()
		if p.cmd.Process != nil {
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
		}
		go p.cmd.Wait()
	})
	return nil
}
func (p *pipeConn) LocalAddr() net.Addr                { return dummyAddr{} }
func (p *pipeConn) RemoteAddr() net.Addr               { return dummyAddr{} }
func (p *pipeConn) SetDeadline(t time.Time) error      { return nil }
func (p *pipeConn) SetReadDeadline(t time.Time) error  { return nil }
func (p *pipeConn) SetWriteDeadline(t time.Time) error { return nil }

// HostKeyInfo is what a node presents and how it compares with known_hosts.
type HostKeyInfo struct {
	Addr  string // the name it is recorded under
	Key   ssh.PublicKey
	State KnownState
	Known []string // "file:line" of recorded keys when State is KeyChanged
	File  string   // where `nodes trust` records it
}

var errKeyCaptured = errors.New("host key captured")

// HostKey connects far enough to see the node's host key (jump hosts must
// already be trusted) and compares it with known_hosts; it records nothing.
func (s *SSH) HostKey(ctx context.Context) (*HostKeyInfo, error) {
	conn, hops, err := s.dialConn(ctx, s.ep, 0)
	if err != nil {
		return nil, s.unreachable(err)
	}
	defer closeAll(hops)
	hk := newHostKeys(s.cfg.Node, s.cfg.Env, s.ep, "yes")
	info := &HostKeyInfo{Addr: lookupAddr(s.ep), File: hk.write}
	// Ask for a recorded key type first, so a host with several keys is not
	// mistaken for a changed one.
	_, algos, err := hk.config(s.ep)
	if err != nil {
		conn.Close()
		return nil, err
	}
	cb := func(_ string, _ net.Addr, key ssh.PublicKey) error {
		info.Key = key
		return errKeyCaptured
	}
	_, err = s.handshake(ctx, conn, s.ep, ssh.PublicKeys(), cb, algos)
	if info.Key == nil {
		if err == nil {
			err = errors.New("no host key presented")
		}
		return nil, s.unreachable(err)
	}
	info.State, info.Known, err = hk.checkKnown(info.Addr, info.Key)
	return info, err
}

// mkdirPrivateSFTP creates dir and its missing parents 0700 (chmod after
// mkdir: the server's umask does not decide); existing directories are
// left as they are.
func mkdirPrivateSFTP(f *sftp.Client, dir string) error {
	if fi, err := f.Stat(dir); err == nil {
		if !fi.IsDir() {
			return fmt.Errorf("%s is not a directory", dir)
		}
		return nil
	}
	if parent := path.Dir(dir); parent != dir {
		if err := mkdirPrivateSFTP(f, parent); err != nil {
			return err
		}
	}
	if err := f.Mkdir(dir); err != nil {
		if fi, serr := f.Stat(dir); serr == nil && fi.IsDir() {
			return nil // made meanwhile by another call
		}
		return err
	}
	return f.Chmod(dir, 0o700)
}

// Lstat describes p over SFTP, without following a final symbolic link.
func (s *SSH) Lstat(ctx context.Context, p string) (nodes.Stat, error) {
	if err := nodes.CheckPath(p); err != nil {
		return nodes.Stat{}, err
	}
	st, err := callSFTP(ctx, s, func(f *sftp.Client) (nodes.Stat, error) {
		fi, err := f.Lstat(p)
		if err != nil {
			return nodes.Stat{}, err
		}
		fs, ok := fi.Sys().(*sftp.FileStat)
		if !ok {
			return nodes.Stat{}, fmt.Errorf("no owner in %T", fi.Sys())
		}
		return nodes.Stat{UID: int(fs.UID), Mode: fi.Mode(), Size: fi.Size()}, nil
	})
	if err != nil {
		return nodes.Stat{}, fmt.Errorf("lstat %s on %s: %w", p, s.cfg.Node, err)
	}
	return st, nil
}

// UID returns the SSH user's uid on the node (`id -u`, asked once).
func (s *SSH) UID(ctx context.Context) (int, error) {
	s.mu.Lock()
	uid := s.uid
	s.mu.Unlock()
	if uid >= 0 {
		return uid, nil
	}
	res, err := s.Exec(ctx, []string{"id", "-u"}, nil)
	if err != nil {
		return -1, fmt.Errorf("uid on %s: %w", s.cfg.Node, err)
	}
	uid, err = strconv.Atoi(strings.TrimSpace(string(res.Stdout)))
	if res.ExitCode != 0 || err != nil || uid < 0 {
		return -1, fmt.Errorf("uid on %s: `id -u` answered %q (exit %d)", s.cfg.Node, res.Stdout, res.ExitCode)
	}
	s.mu.Lock()
	s.uid = uid
	s.mu.Unlock()
	return uid, nil
}

// Converse starts argv on the node in a session of its own; see
// nodes.Converser. The session holds one of the node's session slots until
// the conversation is closed, which closes the session (in a goroutine of
// its own: on a hung connection closing may wait, and the caller must not).
func (s *SSH) Converse(ctx context.Context, argv []string) (conv nodes.Conversation, err error) {
	if len(argv) == 0 || argv[0] == "" {
		return nil, errors.New("converse: empty command")
	}
	select {
	case s.sessions <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("converse %s on %s: waiting for a free session: %w", argv[0], s.cfg.Node, ctx.Err())
	}
	var sess *ssh.Session
	defer func() {
		if err != nil {
			if sess != nil {
				go sess.Close()
			}
			<-s.sessions
		}
	}()
	c, err := s.connect(ctx)
	if err != nil {
		return nil, fmt.Errorf("converse %s on %s: %w", argv[0], s.cfg.Node, err)
	}
	if sess, err = c.NewSession(); err != nil {
		if isConnError(err) {
			s.reset(c)
			err = s.unreachable(err)
		}
		return nil, fmt.Errorf("converse %s on %s: %w", argv[0], s.cfg.Node, s.sessionRefused(err))
	}
	stdin, err := sess.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("converse %s on %s: %w", argv[0], s.cfg.Node, err)
	}
	stdout, err := sess.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("converse %s on %s: %w", argv[0], s.cfg.Node, err)
	}
	if err := sess.Start(ShellQuote(argv)); err != nil {
		return nil, fmt.Errorf("converse %s on %s: %w", argv[0], s.cfg.Node, err)
	}
	// Closing the session (not its stdin, which a call may be writing to)
	// ends the command's input, and so the wrapper.
	conv = nodes.NewLineConversation(stdin, stdout, func() error {
		go sess.Close()
		<-s.sessions
		return nil
	})
	return &sshConversation{Conversation: conv, s: s, c: c}, nil
}

// sshConversation is a conversation on one connection: a call given up on
// (ctx ended first) drops the connection, as any call's does (see call),
// since the node is taken for hung.
type sshConversation struct {
	nodes.Conversation
	s *SSH
	c *ssh.Client
}

func (sc *sshConversation) Call(ctx context.Context, req []byte, limit int) ([]byte, error) {
	line, err := sc.Conversation.Call(ctx, req, limit)
	if err != nil && ctx.Err() != nil {
		return nil, sc.hung(ctx)
	}
	return line, err
}

func (sc *sshConversation) Exchange(ctx context.Context, req []byte, read func(io.Reader) error) error {
	err := sc.Conversation.Exchange(ctx, req, read)
	if err != nil && ctx.Err() != nil {
		return sc.hung(ctx)
	}
	return err
}

// hung drops the connection of a call given up on.
func (sc *sshConversation) hung(ctx context.Context) error {
	sc.s.reset(sc.c)
	return &nodes.UnreachableError{Node: sc.s.cfg.Node, Err: fmt.Errorf("no answer: %w", context.Cause(ctx))}
}

// Stream runs argv on the node in a session of its own; see Transport. The
// session holds one of the node's session slots while it lasts. A stream
// ended by ctx closes its session only: whether the node is hung is for the
// calls with deadlines to find out.
func (s *SSH) Stream(ctx context.Context, argv []string, onLine func([]byte) bool) error {
	if len(argv) == 0 || argv[0] == "" {
		return errors.New("stream: empty command")
	}
	select {
	case s.sessions <- struct{}{}:
		defer func() { <-s.sessions }()
	case <-ctx.Done():
		return fmt.Errorf("stream %s on %s: waiting for a free session: %w", argv[0], s.cfg.Node, ctx.Err())
	}
	c, err := s.connect(ctx)
	if err != nil {
		return fmt.Errorf("stream %s on %s: %w", argv[0], s.cfg.Node, err)
	}
	sess, err := c.NewSession()
	if err != nil {
		if isConnError(err) {
			s.reset(c)
			err = s.unreachable(err)
		}
		return fmt.Errorf("stream %s on %s: %w", argv[0], s.cfg.Node, s.sessionRefused(err))
	}
	// The session is closed in a goroutine of its own: on a hung
	// connection closing may wait, and the caller must not.
	closeSession := sync.OnceFunc(func() { go sess.Close() })
	defer closeSession()
	stdin, err := sess.StdinPipe()
	if err != nil {
		return fmt.Errorf("stream %s on %s: %w", argv[0], s.cfg.Node, err)
	}
	stdout, err := sess.StdoutPipe()
	if err != nil {
		return fmt.Errorf("stream %s on %s: %w", argv[0], s.cfg.Node, err)
	}
	if err := sess.Start(ShellQuote(argv)); err != nil {
		return fmt.Errorf("stream %s on %s: %w", argv[0], s.cfg.Node, err)
	}
	stop := context.AfterFunc(ctx, closeSession)
	err = nodes.ReadLines(stdout, onLine)
	stop()
	go stdin.Close()
	if ctx.Err() != nil {
		return fmt.Errorf("stream %s on %s: %w", argv[0], s.cfg.Node, ctx.Err())
	}
	if err != nil {
		// A stream whose connection was dropped under it (keepalives
		// unanswered) may see only its end.
		if isConnError(err) || s.dropped(c) {
			s.reset(c)
			err = s.unreachable(err)
		}
		return fmt.Errorf("stream %s on %s: %w", argv[0], s.cfg.Node, err)
	}
	return nil
}

// dropped reports whether c is no longer the transport's connection.
func (s *SSH) dropped(c *ssh.Client) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.client != c
}
