package sshdtest_test

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pkg/sftp"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/dispatch-tool/dispatch/internal/sshdtest"
)

// handshakeTimeout bounds every handshake these tests expect to succeed.
const handshakeTimeout = 10 * time.Second

// dial connects to s and completes the SSH handshake within timeout.
func dial(s *sshdtest.Server, cfg *ssh.ClientConfig, timeout time.Duration) (*ssh.Client, error) {
	conn, err := net.DialTimeout("tcp", s.Addr(), timeout)
	if err != nil {
		return nil, err
	}
	return handshake(conn, s.Addr(), cfg, timeout)
}

// handshake runs the SSH handshake on conn within timeout, when conn
// supports deadlines (a channel forwarded through another sshd does not).
func handshake(conn net.Conn, addr string, cfg *ssh.ClientConfig, timeout time.Duration) (*ssh.Client, error) {
	deadlines := conn.SetDeadline(time.Now().Add(timeout)) == nil
	c, chans, reqs, err := ssh.NewClientConn(conn, addr, cfg)
	if err != nil {
		conn.Close()
		return nil, err
	}
	if deadlines {
		if err := conn.SetDeadline(time.Time{}); err != nil {
			conn.Close()
			return nil, err
		}
	}
	return ssh.NewClient(c, chans, reqs), nil
}

func mustDial(t *testing.T, s *sshdtest.Server, cfg *ssh.ClientConfig) *ssh.Client {
	t.Helper()
	c, err := dial(s, cfg, handshakeTimeout)
	if err != nil {
		t.Fatalf("connect to %s (%s): %v\nsshd log:\n%s", s.Name, s.Addr(), err, s.Log())
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func echoHi(t *testing.T, c *ssh.Client) {
	t.Helper()
	if err := runEcho(c); err != nil {
		t.Fatal(err)
	}
}

func runEcho(c *ssh.Client) error {
	sess, err := c.NewSession()
	if err != nil {
		return fmt.Errorf("new session: %w", err)
	}
	defer sess.Close()
	out, err := sess.CombinedOutput("echo hi")
	if err != nil {
		return fmt.Errorf("echo hi: %w (output %q)", err, out)
	}
	if string(out) != "hi\n" {
		return fmt.Errorf("echo hi printed %q", out)
	}
	return nil
}

// wantKeyError checks that err is a known_hosts rejection listing want keys
// (none: the host is unknown; some: its key changed).
func wantKeyError(t *testing.T, err error, want ...ssh.PublicKey) {
	t.Helper()
	var keyErr *knownhosts.KeyError
	if !errors.As(err, &keyErr) {
		t.Fatalf("got error %v, want a *knownhosts.KeyError", err)
	}
	if len(keyErr.Want) != len(want) {
		t.Fatalf("KeyError lists %d known keys, want %d: %v", len(keyErr.Want), len(want), err)
	}
	for i, k := range want {
		if !bytes.Equal(keyErr.Want[i].Key.Marshal(), k.Marshal()) {
			t.Errorf("KeyError known key %d is %s, want %s", i, ssh.FingerprintSHA256(keyErr.Want[i].Key), ssh.FingerprintSHA256(k))
		}
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

func TestNewClient(t *testing.T) {
	t.Parallel()
	c := sshdtest.NewClient(t)
	if c.User == "" {
		t.Error("User is empty")
	}
	for _, f := range []struct {
		path string
		mode os.FileMode
	}{
		{filepath.Join(c.Home, ".ssh"), os.ModeDir | 0o700},
		{c.KeyFile, 0o600},
		{c.KnownHosts, 0o600},
		{c.SSHConfig, 0o600},
	} {
		fi, err := os.Stat(f.path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != f.mode {
			t.Errorf("%s has mode %v, want %v", f.path, fi.Mode(), f.mode)
		}
	}
	if got := readFile(t, c.KnownHosts) + readFile(t, c.SSHConfig); got != "" {
		t.Errorf("known_hosts and config are not empty: %q", got)
	}
	key, err := ssh.ParsePrivateKey([]byte(readFile(t, c.KeyFile)))
	if err != nil {
		t.Fatalf("parse %s: %v", c.KeyFile, err)
	}
	if !bytes.Equal(key.PublicKey().Marshal(), c.Signer.PublicKey().Marshal()) {
		t.Error("KeyFile does not hold Signer's key")
	}
	if key.PublicKey().Type() != ssh.KeyAlgoED25519 {
		t.Errorf("key type %s, want ed25519", key.PublicKey().Type())
	}
	pub, _, _, _, err := ssh.ParseAuthorizedKey([]byte(readFile(t, c.KeyFile+".pub")))
	if err != nil || !bytes.Equal(pub.Marshal(), c.Signer.PublicKey().Marshal()) {
		t.Errorf("%s.pub does not hold Signer's public key (%v)", c.KeyFile, err)
	}
}

func TestTwoServers(t *testing.T) {
	t.Parallel()
	c := sshdtest.NewClient(t)
	a := c.StartServer(t, "a")
	b := c.StartServer(t, "b")
	if a.Port == b.Port || bytes.Equal(a.HostKey.Marshal(), b.HostKey.Marshal()) {
		t.Fatalf("servers share a port (%d, %d) or a host key", a.Port, b.Port)
	}
	for _, s := range []*sshdtest.Server{a, b} {
		if !filepath.IsAbs(s.WorkDir) || !strings.HasPrefix(s.WorkDir, s.Dir+string(filepath.Separator)) {
			t.Errorf("%s: WorkDir %q is not an absolute path under Dir %q", s.Name, s.WorkDir, s.Dir)
		}
		if entries, err := os.ReadDir(s.WorkDir); err != nil || len(entries) != 0 {
			t.Errorf("%s: WorkDir is not an empty directory: %v %v", s.Name, entries, err)
		}
		if want := fmt.Sprintf("[127.0.0.1]:%d ssh-ed25519 AAAA", s.Port); !strings.HasPrefix(s.KnownHostsLine(), want) {
			t.Errorf("%s: KnownHostsLine %q does not start with %q", s.Name, s.KnownHostsLine(), want)
		}
	}

	c.Trust(t, a)
	cfg := c.ClientConfig(t)
	echoHi(t, mustDial(t, a, cfg))
	_, err := dial(b, cfg, handshakeTimeout)
	wantKeyError(t, err) // b is not in known_hosts yet

	c.Trust(t, b)
	if got, want := readFile(t, c.KnownHosts), a.KnownHostsLine()+"\n"+b.KnownHostsLine()+"\n"; got != want {
		t.Errorf("known_hosts is\n%s\nwant\n%s", got, want)
	}
	echoHi(t, mustDial(t, b, c.ClientConfig(t)))
}

func TestTrustHashed(t *testing.T) {
	t.Parallel()
	c := sshdtest.NewClient(t)
	s := c.StartServer(t, "hashed")
	c.TrustHashed(t, s)
	line := readFile(t, c.KnownHosts)
	if !strings.HasPrefix(line, "|1|") || strings.Contains(line, "127.0.0.1") || strings.Count(line, "\n") != 1 {
		t.Errorf("known_hosts %q is not one hashed entry", line)
	}
	echoHi(t, mustDial(t, s, c.ClientConfig(t)))
}

func TestUnauthorizedClientKey(t *testing.T) {
	t.Parallel()
	c := sshdtest.NewClient(t)
	s := c.StartServer(t, "locked")
	c.Trust(t, s)
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	stranger, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	cfg := c.ClientConfig(t)
	cfg.Auth = []ssh.AuthMethod{ssh.PublicKeys(stranger)}
	_, err = dial(s, cfg, handshakeTimeout)
	if err == nil || !strings.Contains(err.Error(), "unable to authenticate") {
		t.Fatalf("login with a key not in authorized_keys: got %v, want an authentication failure", err)
	}
	// The server is fine: the right key still gets in.
	echoHi(t, mustDial(t, s, c.ClientConfig(t)))
}

func TestPauseResume(t *testing.T) {
	t.Parallel()
	c := sshdtest.NewClient(t)
	s := c.StartServer(t, "hung")
	c.Trust(t, s)
	cfg := c.ClientConfig(t)

	s.Pause(t)
	conn, err := net.DialTimeout("tcp", s.Addr(), handshakeTimeout)
	if err != nil {
		t.Fatalf("TCP connect to a paused sshd: %v, want it to succeed", err)
	}
	start := time.Now()
	_, err = handshake(conn, s.Addr(), cfg, time.Second)
	var netErr net.Error
	if !errors.As(err, &netErr) || !netErr.Timeout() {
		t.Fatalf("handshake with a paused sshd: got %v, want a timeout", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("handshake took %v to time out after a 1s deadline", d)
	}

	s.Resume(t)
	echoHi(t, mustDial(t, s, cfg))
}

func TestPauseAll(t *testing.T) {
	t.Parallel()
	c := sshdtest.NewClient(t)
	s := c.StartServer(t, "frozen")
	c.Trust(t, s)
	client := mustDial(t, s, c.ClientConfig(t))
	echoHi(t, client)

	s.PauseAll(t)
	done := make(chan error, 1)
	go func() { done <- runEcho(client) }()
	select {
	case err := <-done:
		t.Fatalf("echo hi over an open connection finished while sshd was paused: %v", err)
	case <-time.After(time.Second):
	}
	s.Resume(t)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("echo hi after Resume: %v", err)
		}
	case <-time.After(handshakeTimeout):
		t.Fatal("echo hi still hangs after Resume")
	}
}

func TestRotateHostKey(t *testing.T) {
	t.Parallel()
	c := sshdtest.NewClient(t)
	s := c.StartServer(t, "rotated")
	c.Trust(t, s)
	oldCfg := c.ClientConfig(t)
	echoHi(t, mustDial(t, s, oldCfg))
	oldKey, port := s.HostKey, s.Port

	s.RotateHostKey(t)
	if s.Port != port {
		t.Fatalf("port changed from %d to %d", port, s.Port)
	}
	if bytes.Equal(s.HostKey.Marshal(), oldKey.Marshal()) {
		t.Fatal("host key did not change")
	}
	_, err := dial(s, oldCfg, handshakeTimeout)
	wantKeyError(t, err, oldKey)

	c.Trust(t, s)
	echoHi(t, mustDial(t, s, c.ClientConfig(t)))
}

func TestStopRestart(t *testing.T) {
	t.Parallel()
	c := sshdtest.NewClient(t)
	s := c.StartServer(t, "down")
	c.Trust(t, s)
	cfg := c.ClientConfig(t)
	client := mustDial(t, s, cfg)
	echoHi(t, client)

	// A paused sshd does not act on SIGTERM until it is resumed; Stop must
	// see to that rather than wait out its timeout.
	s.Pause(t)
	start := time.Now()
	s.Stop(t)
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Stop of a paused sshd took %v", d)
	}
	ended := make(chan error, 1)
	go func() { ended <- client.Wait() }()
	select {
	case <-ended:
	case <-time.After(handshakeTimeout):
		t.Fatal("an open connection survived Stop")
	}
	if _, err := dial(s, cfg, handshakeTimeout); err == nil {
		t.Fatal("connected to a stopped sshd")
	}
	s.Stop(t) // stopping twice is harmless

	s.Restart(t)
	echoHi(t, mustDial(t, s, cfg)) // same port, same host key
}

func TestSFTP(t *testing.T) {
	t.Parallel()
	c := sshdtest.NewClient(t)
	s := c.StartServer(t, "files")
	c.Trust(t, s)
	sc, err := sftp.NewClient(mustDial(t, s, c.ClientConfig(t)))
	if err != nil {
		t.Fatalf("start sftp: %v\nsshd log:\n%s", err, s.Log())
	}
	defer sc.Close()

	path := s.WorkDir + "/hello.txt"
	want := "hello over sftp\n"
	f, err := sc.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte(want)); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	f, err = sc.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Errorf("read back %q over sftp, want %q", got, want)
	}
	if got := readFile(t, filepath.Join(s.WorkDir, "hello.txt")); got != want {
		t.Errorf("file on disk holds %q, want %q", got, want)
	}
}

// TestForwarding goes through one sshd to reach another, which is what
// ProxyJump does.
func TestForwarding(t *testing.T) {
	t.Parallel()
	c := sshdtest.NewClient(t)
	jump := c.StartServer(t, "jump")
	target := c.StartServer(t, "target")
	c.Trust(t, jump)
	c.Trust(t, target)
	cfg := c.ClientConfig(t)

	conn, err := mustDial(t, jump, cfg).Dial("tcp", target.Addr())
	if err != nil {
		t.Fatalf("forward through %s to %s: %v\nsshd log:\n%s", jump.Name, target.Addr(), err, jump.Log())
	}
	client, err := handshake(conn, target.Addr(), cfg, handshakeTimeout)
	if err != nil {
		t.Fatalf("handshake with %s through %s: %v", target.Name, jump.Name, err)
	}
	defer client.Close()
	echoHi(t, client)
}

func TestAddAlias(t *testing.T) {
	t.Parallel()
	c := sshdtest.NewClient(t)
	j1 := c.StartServer(t, "j1")
	n1 := c.StartServer(t, "n1")
	c.AddAlias(t, "j1", j1)
	c.AddAlias(t, "n1", n1, "ProxyJump j1")
	want := fmt.Sprintf("Host j1\n  HostName 127.0.0.1\n  Port %d\n  User %s\n  IdentityFile %s\n"+
		"Host n1\n  HostName 127.0.0.1\n  Port %d\n  User %s\n  IdentityFile %s\n  ProxyJump j1\n",
		j1.Port, c.User, c.KeyFile, n1.Port, c.User, c.KeyFile)
	if got := readFile(t, c.SSHConfig); got != want {
		t.Errorf("config is\n%s\nwant\n%s", got, want)
	}
}

func TestStartServerWith(t *testing.T) {
	t.Parallel()
	c := sshdtest.NewClient(t)
	s := c.StartServerWith(t, "nosftp", "Subsystem sftp /nonexistent/sftp-server")
	c.Trust(t, s)
	// The extra line wins over the default internal-sftp.
	if _, err := sftp.NewClient(mustDial(t, s, c.ClientConfig(t))); err == nil {
		t.Fatal("sftp worked with the subsystem pointed at a missing binary")
	}
}

func TestFreePort(t *testing.T) {
	t.Parallel()
	p := sshdtest.FreePort(t)
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
	if err != nil {
		t.Fatalf("listen on the free port %d: %v", p, err)
	}
	l.Close()
}

// TestSessionsHaveAnEmptyHome: the shell of a session reads no rc file of
// the machine's user, whose side effects (locks, PATH) would leak between
// tests.
func TestSessionsHaveAnEmptyHome(t *testing.T) {
	t.Parallel()
	c := sshdtest.NewClient(t)
	s := c.StartServer(t, "home")
	c.Trust(t, s)
	conn := mustDial(t, s, c.ClientConfig(t))
	sess, err := conn.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	out, err := sess.CombinedOutput(`echo "$HOME"; ls -A "$HOME"`)
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if got, want := string(out), s.Home+"\n"; got != want {
		t.Errorf("a session's $HOME and its entries: %q, want %q (empty)", got, want)
	}
	sc, err := sftp.NewClient(conn)
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	if wd, err := sc.Getwd(); err != nil || wd != s.Home {
		t.Errorf("SFTP starts in %q (%v), want the same home %q", wd, err, s.Home)
	}
}
