//go:build unix

package sshnode_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"

	"github.com/dispatch-tool/dispatch/internal/sshdtest"
)

// writeLockedKey writes a passphrase-protected ed25519 private key.
func writeLockedKey(t *testing.T, path string) {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKeyWithPassphrase(priv, "test", []byte("secret passphrase"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
}

// serveAgent runs an ssh-agent (the x/crypto implementation of the agent
// protocol) on a unix socket holding the client's key, and returns the socket.
func serveAgent(t *testing.T, c *sshdtest.Client) string {
	t.Helper()
	b, err := os.ReadFile(c.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := ssh.ParseRawPrivateKey(b)
	if err != nil {
		t.Fatal(err)
	}
	keyring := agent.NewKeyring()
	if err := keyring.Add(agent.AddedKey{PrivateKey: raw}); err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "agent")
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "agent.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close(); os.RemoveAll(dir) })
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				_ = agent.ServeAgent(keyring, conn)
			}()
		}
	}()
	return sock
}

// TestSSHRefusedKeySaysWhere: a key the node (or its jump host) does not
// accept gets a fix naming the user, the host and the node, never
// "your's key".
func TestSSHRefusedKeySaysWhere(t *testing.T) {
	sshdtest.Require(t)
	c := sshdtest.NewClient(t)
	s := c.StartServer(t, "refuse")
	jump := c.StartServer(t, "refusejump")
	c.Trust(t, s)
	c.Trust(t, jump)
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "stranger")
	if err != nil {
		t.Fatal(err)
	}
	stranger := filepath.Join(c.Home, ".ssh", "stranger")
	if err := os.WriteFile(stranger, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
	alias := fmt.Sprintf("Host strangejump\n  HostName 127.0.0.1\n  Port %d\n  User %s\n  IdentityFile %s\n", jump.Port, c.User, stranger)
	f, err := os.OpenFile(c.SSHConfig, os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(alias); err != nil {
		t.Fatal(err)
	}
	f.Close()
	for _, tc := range []struct{ name, target, want string }{
		{"the node", fmt.Sprintf("ssh -i %s -p %d %s@127.0.0.1", stranger, s.Port, c.User),
			fmt.Sprintf("check that your public key is in ~%s/.ssh/authorized_keys on 127.0.0.1 (node n1): ssh-copy-id %s@127.0.0.1", c.User, c.User)},
		{"its jump host", fmt.Sprintf("ssh -J strangejump -p %d %s@127.0.0.1", s.Port, c.User),
			fmt.Sprintf("check that your public key is in ~%s/.ssh/authorized_keys on 127.0.0.1 (a ProxyJump host of node n1)", c.User)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := newSSH(t, c, tc.target).Exec(t.Context(), []string{"true"}, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "'s key") {
				t.Fatalf("err = %v\nwant it to say %q", err, tc.want)
			}
		})
	}
}
