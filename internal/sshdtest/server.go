package sshdtest

import (
	"bufio"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

const (
	// startTimeout bounds how long sshd may take to answer after starting;
	// generous because many race-instrumented tests may start sshd at once.
	startTimeout = 20 * time.Second
	// stopTimeout bounds how long sshd may take to exit after SIGTERM
	// before it gets SIGKILL.
	stopTimeout = 10 * time.Second
	// portAttempts is how many fresh ports StartServer tries when another
	// process takes the one it picked before sshd binds it.
	portAttempts = 3
	// privsepDir is Debian's sshd privilege-separation directory, which
	// sshd started as root requires and which a container may not have.
	privsepDir = "/run/sshd"
)

// Server is one sshd listening on 127.0.0.1, with its own temporary
// directory Dir holding its config, host key, authorized_keys (authorizing
// the Client that started it) and log. WorkDir is an empty directory under
// Dir for the node's work_dir.
//
// Stop, Restart and RotateHostKey end the connections sshd is serving, as a
// node going down would. RotateHostKey changes HostKey: read HostKey from the
// goroutine that rotates it, or call KnownHostsLine, which is safe anywhere.
type Server struct {
	Name    string
	Host    string // always 127.0.0.1
	Port    int
	HostKey ssh.PublicKey
	WorkDir string
	Dir     string

	Config         string // sshd_config
	HostKeyFile    string // ssh_host_ed25519_key
	AuthorizedKeys string // authorized_keys, holding the client's key
	LogFile        string // sshd's stderr, across restarts
	Home           string // $HOME of every session: an empty directory

	sshd  string
	extra []string

	mu     sync.Mutex
	proc   *process
	paused []int // pids stopped by Pause or PauseAll
}

type process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once the process has exited
	err  error         // Wait's result, set before done is closed
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// StartServer starts an sshd for c on a free port of 127.0.0.1 and waits
// until it answers with an SSH-2.0 banner. t.Cleanup stops it, resuming it
// first if it is paused.
func (c *Client) StartServer(t testing.TB, name string) *Server {
	t.Helper()
	return c.StartServerWith(t, name)
}

// StartServerWith is StartServer with extra sshd_config lines, for example
// "MaxSessions 2". A line replaces the default for its keyword (for
// Subsystem, for its subsystem name); the lines go last, so they may end with
// Match blocks.
func (c *Client) StartServerWith(t testing.TB, name string, extra ...string) *Server {
	t.Helper()
	sshd := Require(t)
	ensurePrivsepDir(t)
	if lockedAccount(c.User) {
		// sshd logs the refusal only at INFO, so the test would see a bare
		// "unable to authenticate".
		t.Fatalf("sshdtest: %s's password in /etc/shadow starts with '!' (locked), and sshd without PAM refuses every login to a locked account, keys included; unlock it without giving it a password: usermod -p '*' %s", c.User, c.User)
	}

	dir := t.TempDir()
	s := &Server{
		Name:           name,
		Host:           "127.0.0.1",
		WorkDir:        filepath.Join(dir, "work"),
		Dir:            dir,
		Config:         filepath.Join(dir, "sshd_config"),
		HostKeyFile:    filepath.Join(dir, "ssh_host_ed25519_key"),
		AuthorizedKeys: filepath.Join(dir, "authorized_keys"),
		LogFile:        filepath.Join(dir, "sshd.log"),
		Home:           filepath.Join(dir, "home"),
		sshd:           sshd,
		extra:          extra,
	}
	for _, d := range []string{s.WorkDir, s.Home} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatalf("sshdtest: %v", err)
		}
	}
	writeFile(t, s.AuthorizedKeys, c.AuthorizedKey(), 0o600)
	s.HostKey = newHostKey(t, s.HostKeyFile, name)

	var err error
	for range portAttempts {
		if s.Port, err = freePort(); err != nil {
			t.Fatalf("sshdtest: find a free port for sshd %s: %v", name, err)
		}
		s.proc, err = s.launch()
		if !errors.Is(err, errPortTaken) {
			break
		}
	}
	if err != nil {
		t.Fatalf("sshdtest: start sshd %s: %v", name, err)
	}
	t.Cleanup(func() {
		s.mu.Lock()
		crashed := s.proc != nil && s.proc.exited()
		var perr error
		if crashed {
			perr = s.proc.err
		}
		s.stopLocked()
		s.mu.Unlock()
		if crashed {
			t.Errorf("sshdtest: sshd %s exited on its own during the test (%v); its log:\n%s", name, perr, s.Log())
		} else if t.Failed() {
			if log := s.Log(); log != "" {
				t.Logf("sshdtest: sshd %s log:\n%s", name, log)
			}
		}
	})
	return s
}

// Addr returns "127.0.0.1:PORT".
func (s *Server) Addr() string {
	return net.JoinHostPort(s.Host, strconv.Itoa(s.Port))
}

// KnownHostsLine returns the known_hosts line for s's current host key,
// "[127.0.0.1]:PORT ssh-ed25519 AAAA..." (knownhosts.Line).
func (s *Server) KnownHostsLine() string {
	return knownhosts.Line([]string{s.Addr()}, s.hostKey())
}

// Log returns what sshd has written to stderr so far, across restarts.
func (s *Server) Log() string {
	b, err := os.ReadFile(s.LogFile)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", s.LogFile, err)
	}
	return string(b)
}

// Stop ends sshd: the connections it is serving are killed, as when a node
// goes down, and the listener gets SIGTERM and is waited for. Stopping a
// stopped server does nothing.
func (s *Server) Stop(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopLocked()
}

// Restart stops sshd if it runs and starts it again on the same port with
// the same host key (a node that went down and came back).
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopLocked()
	s.relaunchLocked(t)
}

// RotateHostKey restarts sshd on the same port with a new host key, so a
// known_hosts entry for the old key no longer matches (a "changed host key"
// node). It updates HostKey.
func (s *Server) RotateHostKey(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopLocked()
	s.HostKey = newHostKey(t, s.HostKeyFile, s.Name)
	s.relaunchLocked(t)
}

// Pause sends SIGSTOP to the sshd listener: new TCP connections still
// succeed (the kernel queues them) but nothing answers, like a hung node.
// Connections sshd already serves go on working; PauseAll stops them too.
func (s *Server) Pause(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	pid := s.runningPID(t, "pause")
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("sshdtest: pause sshd %s: %v", s.Name, err)
	}
	s.paused = append(s.paused, pid)
}

// PauseAll is Pause for the listener and every process under it: the
// connections sshd serves and the commands run through them hang too. It
// needs /proc to find those processes and skips the test without it.
func (s *Server) PauseAll(t testing.TB) {
	t.Helper()
	if !canListDescendants {
		t.Skipf("sshdtest: PauseAll needs /proc, which %s does not have", runtime.GOOS)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	pid := s.runningPID(t, "pause")
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("sshdtest: pause sshd %s: %v", s.Name, err)
	}
	s.paused = append(s.paused, pid)
	s.paused = append(s.paused, freezeDescendants(pid)...)
}

// Resume sends SIGCONT to what Pause or PauseAll stopped. Resuming a server
// that is not paused does nothing.
func (s *Server) Resume(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.resumeLocked()
}

func (s *Server) resumeLocked() {
	for _, pid := range s.paused {
		_ = syscall.Kill(pid, syscall.SIGCONT) // a connection may have ended meanwhile
	}
	s.paused = nil
}

func (s *Server) runningPID(t testing.TB, what string) int {
	t.Helper()
	if s.proc == nil {
		t.Fatalf("sshdtest: %s sshd %s: it is stopped", what, s.Name)
	}
	if s.proc.exited() {
		t.Fatalf("sshdtest: %s sshd %s: it exited (%v); its log:\n%s", what, s.Name, s.proc.err, s.Log())
	}
	return s.proc.cmd.Process.Pid
}

func (s *Server) hostKey() ssh.PublicKey {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.HostKey
}

func (s *Server) stopLocked() {
	p := s.proc
	if p == nil {
		return
	}
	s.proc = nil
	s.paused = nil
	pid := p.cmd.Process.Pid
	// Freeze the listener so it forks no new connection while its
	// children are collected, then kill those children (a node going down
	// takes its connections along) and let SIGCONT deliver the SIGTERM.
	_ = syscall.Kill(pid, syscall.SIGSTOP)
	for _, kid := range freezeDescendants(pid) {
		_ = syscall.Kill(kid, syscall.SIGKILL)
	}
	_ = syscall.Kill(pid, syscall.SIGTERM)
	_ = syscall.Kill(pid, syscall.SIGCONT)
	select {
	case <-p.done:
	case <-time.After(stopTimeout):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// relaunchLocked starts sshd again on s.Port. The old listener is gone and
// sshd binds with SO_REUSEADDR, so the port is normally free at once; the
// retries cover another process having taken it for a moment.
func (s *Server) relaunchLocked(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		p, err := s.launch()
		if err == nil {
			s.proc = p
			return
		}
		if !errors.Is(err, errPortTaken) || time.Now().After(deadline) {
			t.Fatalf("sshdtest: restart sshd %s on port %d: %v", s.Name, s.Port, err)
		}
		time.Sleep(100 * time.Millisecond) // back off while the port's holder lets go
	}
}

var errPortTaken = errors.New("port already in use")

// launch writes the config for s.Port, starts sshd and waits until it
// serves. On failure the error carries what sshd logged.
func (s *Server) launch() (*process, error) {
	if err := s.writeConfig(); err != nil {
		return nil, err
	}
	pidFile := filepath.Join(s.Dir, "sshd.pid")
	if err := os.Remove(pidFile); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	logf, err := os.OpenFile(s.LogFile, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	logStart, err := logf.Seek(0, 2)
	if err != nil {
		return nil, err
	}
	// sshd's output goes to a file, not a pipe: connection processes
	// inherit it and may outlive the listener, and a pipe would make Wait
	// wait for them.
	cmd := exec.Command(s.sshd, "-D", "-e", "-f", s.Config)
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()

	err = waitReady(p, pidFile, s.Addr(), time.Now().Add(startTimeout))
	if err == nil {
		return p, nil
	}
	if !p.exited() {
		_ = cmd.Process.Kill()
		<-p.done
	}
	log := s.logSince(logStart)
	if strings.Contains(log, "Address already in use") || strings.Contains(log, "Cannot bind any address") {
		err = fmt.Errorf("%w: %v", errPortTaken, err)
	}
	return nil, fmt.Errorf("%v\n%s -D -e -f %s logged:\n%s", err, s.sshd, s.Config, log)
}

func (s *Server) logSince(off int64) string {
	b, err := os.ReadFile(s.LogFile)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", s.LogFile, err)
	}
	if off > int64(len(b)) {
		off = 0
	}
	if len(b[off:]) == 0 {
		return "(nothing)"
	}
	return string(b[off:])
}

// waitReady polls until sshd has written its pid file, which it does only
// after binding its port (so a banner on the port is its own and not that
// of another test's sshd that took the port first), and answers with an
// SSH-2.0 banner.
func waitReady(p *process, pidFile, addr string, deadline time.Time) error {
	want := strconv.Itoa(p.cmd.Process.Pid)
	var last error
	for {
		if p.exited() {
			return fmt.Errorf("sshd exited before serving: %v", p.err)
		}
		b, err := os.ReadFile(pidFile)
		switch {
		case err != nil:
			last = fmt.Errorf("no pid file yet: %w", err)
		case strings.TrimSpace(string(b)) != want:
			last = fmt.Errorf("pid file %s holds %q, not %s", pidFile, strings.TrimSpace(string(b)), want)
		default:
			if last = readBanner(addr, time.Until(deadline)); last == nil {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("sshd did not serve on %s within %v: %v", addr, startTimeout, last)
		}
		select {
		case <-p.done:
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func readBanner(addr string, budget time.Duration) error {
	budget = min(max(budget, 100*time.Millisecond), 2*time.Second)
	conn, err := net.DialTimeout("tcp", addr, budget)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(budget)); err != nil {
		return err
	}
	// Saying our own version first lets sshd see an orderly client that
	// hangs up, instead of logging a failed key exchange at ERROR level.
	if _, err := io.WriteString(conn, "SSH-2.0-sshdtest_probe\r\n"); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return fmt.Errorf("read banner: %w", err)
	}
	if !strings.HasPrefix(line, "SSH-2.0-") {
		return fmt.Errorf("banner %q is not SSH-2.0", strings.TrimSpace(line))
	}
	return nil
}

func (s *Server) writeConfig() error {
	lines := []string{
		// Port before ListenAddress: older sshd reads ListenAddress
		// without a port as "every Port given so far".
		fmt.Sprintf("Port %d", s.Port),
		"ListenAddress 127.0.0.1",
		"HostKey " + configPath(s.HostKeyFile, false),
		"PidFile " + configPath(filepath.Join(s.Dir, "sshd.pid"), false),
		"AuthorizedKeysFile " + configPath(s.AuthorizedKeys, true),
		"StrictModes no",
		"UsePAM no",
		"PasswordAuthentication no",
		"KbdInteractiveAuthentication no",
		"PubkeyAuthentication yes",
		"PermitRootLogin prohibit-password",
		"AllowTcpForwarding yes",
		// SFTP starts in the same empty home (see SetEnv below), as it
		// starts in $HOME on a stock server.
		"Subsystem sftp internal-sftp -d " + configPath(s.Home, true),
		"LogLevel ERROR",
		"MaxSessions 64",
		"MaxStartups 100:30:200",
		// Every session gets an empty $HOME, so the shell sshd starts for
		// a command reads no rc file of the machine's user. A test that
		// kills a session mid-start (node reboot, dropped stream) would
		// otherwise be able to leave that rc file's locks behind (root's
		// `pyenv init` rehash lock made every later remote shell of the
		// machine wait 60 s) and the tests would depend on what the
		// machine's rc files put in PATH.
		"SetEnv HOME=" + configPath(s.Home, false),
	}
	if v := sshdVersion(s.sshd); v >= 908 {
		// OpenSSH 9.8 and later refuse a source address for a while after
		// connections that end without logging in or fail to; every test
		// connects from 127.0.0.1 and many do that on purpose.
		lines = append(lines, "PerSourcePenalties no")
	}
	var b strings.Builder
	for _, line := range lines {
		if !overridden(line, s.extra) {
			b.WriteString(line + "\n")
		}
	}
	for _, line := range s.extra {
		b.WriteString(line + "\n")
	}
	return os.WriteFile(s.Config, []byte(b.String()), 0o600)
}

// overridden reports whether one of extra sets what line sets: the same
// keyword, and for Subsystem the same subsystem name. Dropping the default
// beats relying on sshd's first-value-wins rule, which does not hold for
// every keyword (a second "Subsystem sftp" is an error).
func overridden(line string, extra []string) bool {
	key := settingKey(line)
	for _, e := range extra {
		if settingKey(e) == key {
			return true
		}
	}
	return false
}

func settingKey(line string) string {
	f := strings.Fields(strings.ToLower(line))
	switch {
	case len(f) == 0:
		return ""
	case f[0] == "subsystem" && len(f) > 1:
		return f[0] + " " + f[1]
	}
	return f[0]
}

var (
	versionRE = regexp.MustCompile(`OpenSSH_(\d+)\.(\d+)`)
	versions  sync.Map // sshd path -> int, major*100+minor, 0 if unknown
)

// sshdVersion returns sshd's version as major*100+minor, 0 when it cannot
// tell. "sshd -V" prints it; an older sshd without -V prints it in its
// usage message.
func sshdVersion(path string) int {
	if v, ok := versions.Load(path); ok {
		return v.(int)
	}
	out, _ := exec.Command(path, "-V").CombinedOutput()
	v := 0
	if m := versionRE.FindSubmatch(out); m != nil {
		major, _ := strconv.Atoi(string(m[1]))
		minor, _ := strconv.Atoi(string(m[2]))
		v = major*100 + minor
	}
	versions.Store(path, v)
	return v
}

// newHostKey writes a fresh ed25519 host key to path and returns its
// public half.
func newHostKey(t testing.TB, path, name string) ssh.PublicKey {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatalf("sshdtest: generate host key: %v", err)
	}
	writePrivateKey(t, path, priv, "sshdtest-host-"+name)
	key, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatalf("sshdtest: host public key: %v", err)
	}
	return key
}

// ensurePrivsepDir creates Debian's privilege-separation directory, which
// sshd started as root refuses to run without and which a container that
// never booted sshd lacks.
func ensurePrivsepDir(t testing.TB) {
	t.Helper()
	if runtime.GOOS != "linux" || os.Geteuid() != 0 {
		return
	}
	if _, err := os.Stat(privsepDir); err == nil {
		return
	}
	if err := os.MkdirAll(privsepDir, 0o755); err != nil {
		t.Fatalf("sshdtest: create sshd's privilege-separation directory: %v", err)
	}
	// sshd rejects a group- or world-writable one, whatever the umask did.
	if err := os.Chmod(privsepDir, 0o755); err != nil {
		t.Fatalf("sshdtest: %v", err)
	}
}

// lockedAccount reports whether sshd started by root would refuse user as
// locked. sshd run by anyone else cannot read /etc/shadow and never does.
func lockedAccount(user string) bool {
	if runtime.GOOS != "linux" || os.Geteuid() != 0 {
		return false
	}
	b, err := os.ReadFile("/etc/shadow")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		name, rest, ok := strings.Cut(line, ":")
		if ok && name == user {
			return strings.HasPrefix(rest, "!")
		}
	}
	return false
}
