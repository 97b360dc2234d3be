package sshdtest

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// Client is the operator's side: a fake home directory whose .ssh/ holds an
// ed25519 key pair without passphrase (id_ed25519, id_ed25519.pub), an empty
// known_hosts and an empty config, plus the name of the current user, which
// is the only user a test's sshd can log in as.
type Client struct {
	Home       string
	KeyFile    string
	KnownHosts string
	SSHConfig  string
	User       string
	Signer     ssh.Signer

	mu sync.Mutex // serializes appends to KnownHosts and SSHConfig
}

// NewClient makes a Client in a fresh temporary home.
func NewClient(t testing.TB) *Client {
	t.Helper()
	home := t.TempDir()
	dir := filepath.Join(home, ".ssh")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatalf("sshdtest: %v", err)
	}
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatalf("sshdtest: generate client key: %v", err)
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatalf("sshdtest: client key signer: %v", err)
	}
	sshPub, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatalf("sshdtest: client public key: %v", err)
	}
	c := &Client{
		Home:       home,
		KeyFile:    filepath.Join(dir, "id_ed25519"),
		KnownHosts: filepath.Join(dir, "known_hosts"),
		SSHConfig:  filepath.Join(dir, "config"),
		User:       currentUser(t),
		Signer:     signer,
	}
	writePrivateKey(t, c.KeyFile, priv, "sshdtest-client")
	writeFile(t, c.KeyFile+".pub", string(ssh.MarshalAuthorizedKey(sshPub)), 0o644)
	writeFile(t, c.KnownHosts, "", 0o600)
	writeFile(t, c.SSHConfig, "", 0o600)
	return c
}

// AuthorizedKey returns the client's public key in authorized_keys format,
// with a trailing newline.
func (c *Client) AuthorizedKey() string {
	return string(ssh.MarshalAuthorizedKey(c.Signer.PublicKey()))
}

// Trust appends s.KnownHostsLine() to c.KnownHosts.
func (c *Client) Trust(t testing.TB, s *Server) {
	t.Helper()
	c.appendTo(t, c.KnownHosts, s.KnownHostsLine()+"\n")
}

// TrustHashed appends s's host key to c.KnownHosts as a hashed entry
// (|1|salt|hash), the form ssh writes with HashKnownHosts yes.
func (c *Client) TrustHashed(t testing.TB, s *Server) {
	t.Helper()
	host := knownhosts.HashHostname(knownhosts.Normalize(s.Addr()))
	key := s.hostKey()
	c.appendTo(t, c.KnownHosts, host+" "+strings.TrimSpace(string(ssh.MarshalAuthorizedKey(key)))+"\n")
}

// AddAlias appends a Host block for s to c.SSHConfig:
//
//	Host alias
//	  HostName 127.0.0.1
//	  Port N
//	  User u
//	  IdentityFile <KeyFile>
//
// followed by each of extra (for example "ProxyJump j1"), indented the same.
func (c *Client) AddAlias(t testing.TB, alias string, s *Server, extra ...string) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "Host %s\n", alias)
	fmt.Fprintf(&b, "  HostName %s\n", s.Host)
	fmt.Fprintf(&b, "  Port %d\n", s.Port)
	fmt.Fprintf(&b, "  User %s\n", c.User)
	fmt.Fprintf(&b, "  IdentityFile %s\n", configPath(c.KeyFile, true))
	for _, line := range extra {
		fmt.Fprintf(&b, "  %s\n", line)
	}
	c.appendTo(t, c.SSHConfig, b.String())
}

// ClientConfig returns an ssh.ClientConfig that logs in as c.User with
// c.Signer and checks host keys against c.KnownHosts as it is now (later
// Trust calls need a new config).
func (c *Client) ClientConfig(t testing.TB) *ssh.ClientConfig {
	t.Helper()
	c.mu.Lock()
	cb, err := knownhosts.New(c.KnownHosts)
	c.mu.Unlock()
	if err != nil {
		t.Fatalf("sshdtest: read %s: %v", c.KnownHosts, err)
	}
	return &ssh.ClientConfig{
		User:            c.User,
		Auth:            []ssh.AuthMethod{ssh.PublicKeys(c.Signer)},
		HostKeyCallback: cb,
		Timeout:         10 * time.Second,
	}
}

func (c *Client) appendTo(t testing.TB, path, text string) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatalf("sshdtest: %v", err)
	}
	_, err = f.WriteString(text)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatalf("sshdtest: append to %s: %v", path, err)
	}
}

func currentUser(t testing.TB) string {
	t.Helper()
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	if name := os.Getenv("USER"); name != "" {
		return name
	}
	t.Fatalf("sshdtest: cannot tell the current user name")
	return ""
}

func writePrivateKey(t testing.TB, path string, key ed25519.PrivateKey, comment string) {
	t.Helper()
	block, err := ssh.MarshalPrivateKey(key, comment)
	if err != nil {
		t.Fatalf("sshdtest: marshal %s: %v", path, err)
	}
	writeFile(t, path, string(pem.EncodeToMemory(block)), 0o600)
}

func writeFile(t testing.TB, path, text string, perm os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), perm); err != nil {
		t.Fatalf("sshdtest: %v", err)
	}
	// WriteFile's mode passes through the umask and is not applied to a
	// file that already exists; sshd and ssh insist on private keys being private.
	if err := os.Chmod(path, perm); err != nil {
		t.Fatalf("sshdtest: %v", err)
	}
}

// configPath renders an absolute path for sshd_config or ssh_config: quoted
// when it holds spaces, and with % doubled where the keyword expands %
// tokens (AuthorizedKeysFile, IdentityFile).
func configPath(p string, expandsTokens bool) string {
	if expandsTokens {
		p = strings.ReplaceAll(p, "%", "%%")
	}
	if strings.ContainsAny(p, " \t") {
		return `"` + p + `"`
	}
	return p
}
