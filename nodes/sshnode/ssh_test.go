//go:build unix

package sshnode_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/internal/sshdtest"
	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/nodes/sshnode"
	"github.com/dispatch-tool/dispatch/nodes/transporttest"
)

// sshEnv is the operator's side of client c: its fake home and config.
func sshEnv(c *sshdtest.Client) sshnode.Env {
	return sshnode.Env{Home: c.Home, ConfigFile: c.SSHConfig, User: c.User}
}

func newSSH(t *testing.T, c *sshdtest.Client, target string, mod ...func(*sshnode.Config)) *sshnode.SSH {
	t.Helper()
	cfg := sshnode.Config{Node: "n1", Target: target, Env: sshEnv(c), ConnectTimeout: 3 * time.Second, AgentSocket: "/nonexistent"}
	for _, m := range mod {
		m(&cfg)
	}
	tr, err := sshnode.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

func target(c *sshdtest.Client, s *sshdtest.Server) string {
	return fmt.Sprintf("%s@127.0.0.1:%d", c.User, s.Port)
}

func TestSSH(t *testing.T) {
	sshdtest.Require(t)
	c := sshdtest.NewClient(t)
	s := c.StartServer(t, "suite")
	c.Trust(t, s)
	transporttest.Run(t, func(t *testing.T) (nodes.Transport, string) {
		dir := filepath.Join(s.WorkDir, strings.ReplaceAll(t.Name(), "/", "_"))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		return newSSH(t, c, target(c, s)), dir
	})
}

func TestSSHAddressing(t *testing.T) {
	sshdtest.Require(t)
	c := sshdtest.NewClient(t)
	s := c.StartServer(t, "addr")
	c.TrustHashed(t, s) // hashed known_hosts entries work too
	c.AddAlias(t, "box", s)
	for _, tc := range []struct{ name, target string }{
		{"alias", "box"},
		{"user@host:port", target(c, s)},
		{"command line", fmt.Sprintf("ssh -i %s -p %d -l %s 127.0.0.1", c.KeyFile, s.Port, c.User)},
		{"command line -o", fmt.Sprintf("ssh -o Port=%d -o IdentityFile=%s %s@127.0.0.1", s.Port, c.KeyFile, c.User)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := newSSH(t, c, tc.target)
			res, err := tr.Exec(t.Context(), []string{"echo", "hello"}, nil)
			if err != nil || strings.TrimSpace(string(res.Stdout)) != "hello" {
				t.Fatalf("Exec = %q, %v", res.Stdout, err)
			}
		})
	}
}

func TestSSHUnknownHostRefused(t *testing.T) {
	sshdtest.Require(t)
	c := sshdtest.NewClient(t)
	s := c.StartServer(t, "unknown")
	tr := newSSH(t, c, target(c, s))
	_, err := tr.Exec(t.Context(), []string{"true"}, nil)
	var uk *sshnode.HostKeyUnknownError
	if !errors.As(err, &uk) || !errors.Is(err, nodes.ErrUnreachable) {
		t.Fatalf("err = %v, want HostKeyUnknownError", err)
	}
	if !strings.Contains(err.Error(), "dispatch nodes trust n1") || !strings.Contains(err.Error(), "SHA256:") {
		t.Errorf("message does not name the fix and the fingerprint: %v", err)
	}
	if b, _ := os.ReadFile(c.KnownHosts); len(b) != 0 {
		t.Errorf("known_hosts written without consent: %q", b)
	}
}

func TestSSHAcceptNew(t *testing.T) {
	sshdtest.Require(t)
	c := sshdtest.NewClient(t)
	s := c.StartServer(t, "acceptnew")
	tr := newSSH(t, c, target(c, s), func(cfg *sshnode.Config) { cfg.StrictHostKeyChecking = "accept-new" })
	if _, err := tr.Exec(t.Context(), []string{"true"}, nil); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(c.KnownHosts)
	if !strings.Contains(string(b), fmt.Sprintf("[127.0.0.1]:%d ssh-ed25519", s.Port)) {
		t.Fatalf("accept-new did not record the key: %q", b)
	}
	// accept-new never accepts a changed key.
	tr.Close()
	s.RotateHostKey(t)
	tr2 := newSSH(t, c, target(c, s), func(cfg *sshnode.Config) { cfg.StrictHostKeyChecking = "accept-new" })
	_, err := tr2.Exec(t.Context(), []string{"true"}, nil)
	var ch *sshnode.HostKeyChangedError
	if !errors.As(err, &ch) {
		t.Fatalf("err = %v, want HostKeyChangedError", err)
	}
}

func TestSSHChangedHostKeyRefused(t *testing.T) {
	sshdtest.Require(t)
	c := sshdtest.NewClient(t)
	s := c.StartServer(t, "changed")
	c.Trust(t, s)
	s.RotateHostKey(t)
	tr := newSSH(t, c, target(c, s))
	_, err := tr.Exec(t.Context(), []string{"true"}, nil)
	var ch *sshnode.HostKeyChangedError
	if !errors.As(err, &ch) {
		t.Fatalf("err = %v, want HostKeyChangedError", err)
	}
	if !strings.Contains(err.Error(), "HOST KEY CHANGED") || !strings.Contains(err.Error(), "ssh-keygen -R") {
		t.Errorf("message is not loud or lacks the fix: %v", err)
	}
}

func TestSSHHostKeyForTrust(t *testing.T) {
	sshdtest.Require(t)
	c := sshdtest.NewClient(t)
	s := c.StartServer(t, "trust")
	tr := newSSH(t, c, target(c, s))
	info, err := tr.HostKey(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if info.State != sshnode.KeyUnknown || string(info.Key.Marshal()) != string(s.HostKey.Marshal()) {
		t.Fatalf("HostKey = %+v", info)
	}
	if err := sshnode.AddKnownHost(info.File, info.Addr, info.Key); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Exec(t.Context(), []string{"true"}, nil); err != nil {
		t.Fatalf("after recording the key: %v", err)
	}
	if info, err = tr.HostKey(t.Context()); err != nil || info.State != sshnode.KeyKnown {
		t.Fatalf("HostKey after trust = %+v, %v", info, err)
	}
}

func TestSSHProxyJump(t *testing.T) {
	sshdtest.Require(t)
	c := sshdtest.NewClient(t)
	jump := c.StartServer(t, "jump")
	inner := c.StartServer(t, "inner")
	c.Trust(t, jump)
	c.Trust(t, inner)
	c.AddAlias(t, "jumphost", jump)
	c.AddAlias(t, "behind", inner, "ProxyJump jumphost")
	for _, tgt := range []string{"behind", fmt.Sprintf("ssh -J jumphost -p %d %s@127.0.0.1", inner.Port, c.User)} {
		tr := newSSH(t, c, tgt)
		res, err := tr.Exec(t.Context(), []string{"echo", "via jump"}, nil)
		if err != nil || strings.TrimSpace(string(res.Stdout)) != "via jump" {
			t.Fatalf("%s: Exec = %q, %v", tgt, res.Stdout, err)
		}
	}
	// With the jump host down, the target is unreachable, not hung.
	jump.Stop(t)
	tr := newSSH(t, c, "behind")
	if _, err := tr.Exec(t.Context(), []string{"true"}, nil); !errors.Is(err, nodes.ErrUnreachable) {
		t.Fatalf("with the jump host down: %v, want ErrUnreachable", err)
	}
}

func TestSSHProxyCommand(t *testing.T) {
	sshdtest.Require(t)
	if _, err := os.Stat("/usr/bin/nc"); err != nil {
		ncat := "/bin/nc"
		if _, err := os.Stat(ncat); err != nil {
			t.Skip("no nc for a ProxyCommand")
		}
	}
	c := sshdtest.NewClient(t)
	s := c.StartServer(t, "proxycmd")
	c.Trust(t, s)
	c.AddAlias(t, "viaproxy", s, "ProxyCommand nc %h %p")
	tr := newSSH(t, c, "viaproxy")
	res, err := tr.Exec(t.Context(), []string{"echo", "proxied"}, nil)
	if err != nil || strings.TrimSpace(string(res.Stdout)) != "proxied" {
		t.Fatalf("Exec = %q, %v", res.Stdout, err)
	}
}

func TestSSHHungAndClosedNodes(t *testing.T) {
	sshdtest.Require(t)
	c := sshdtest.NewClient(t)
	s := c.StartServer(t, "hang")
	c.Trust(t, s)
	tr := newSSH(t, c, target(c, s), func(cfg *sshnode.Config) { cfg.ConnectTimeout = time.Second })
	if _, err := tr.Exec(t.Context(), []string{"true"}, nil); err != nil {
		t.Fatal(err)
	}
	// A hung node (sshd and its connections stopped): the connection exists,
	// nothing answers. The call ends at its deadline, and reconnecting fails
	// within the connect timeout.
	s.PauseAll(t)
	for i := 0; i < 2; i++ {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		start := time.Now()
		_, err := tr.Exec(ctx, []string{"true"}, nil)
		cancel()
		if !errors.Is(err, nodes.ErrUnreachable) {
			t.Fatalf("call %d to a hung node: %v, want ErrUnreachable", i, err)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Fatalf("call %d to a hung node took %s", i, d)
		}
	}
	// It comes back: the transport reconnects by itself.
	s.Resume(t)
	deadline := time.Now().Add(15 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		_, err := tr.Exec(ctx, []string{"true"}, nil)
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no reconnect after resume: %v", err)
		}
	}
	// A closed port fails fast.
	closed := newSSH(t, c, fmt.Sprintf("%s@127.0.0.1:%d", c.User, sshdtest.FreePort(t)))
	if _, err := closed.Exec(t.Context(), []string{"true"}, nil); !errors.Is(err, nodes.ErrUnreachable) || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("closed port: %v", err)
	}
}

func TestSSHPassphraseKeyWithoutAgent(t *testing.T) {
	sshdtest.Require(t)
	c := sshdtest.NewClient(t)
	s := c.StartServer(t, "pass")
	c.Trust(t, s)
	locked := filepath.Join(c.Home, ".ssh", "locked")
	writeLockedKey(t, locked)
	tr := newSSH(t, c, fmt.Sprintf("ssh -i %s -p %d %s@127.0.0.1", locked, s.Port, c.User))
	start := time.Now()
	_, err := tr.Exec(t.Context(), []string{"true"}, nil)
	if err == nil || !strings.Contains(err.Error(), "passphrase") || !strings.Contains(err.Error(), "ssh-add") {
		t.Fatalf("err = %v, want a passphrase error naming ssh-add", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Fatal("a passphrase-protected key must fail at once, not wait for a prompt")
	}
}

func TestSSHAgent(t *testing.T) {
	sshdtest.Require(t)
	c := sshdtest.NewClient(t)
	s := c.StartServer(t, "agent")
	c.Trust(t, s)
	// The client's key is only in the agent: its file is removed.
	sock := serveAgent(t, c)
	if err := os.Remove(c.KeyFile); err != nil {
		t.Fatal(err)
	}
	tr := newSSH(t, c, target(c, s), func(cfg *sshnode.Config) { cfg.AgentSocket = sock })
	res, err := tr.Exec(t.Context(), []string{"echo", "agent"}, nil)
	if err != nil || strings.TrimSpace(string(res.Stdout)) != "agent" {
		t.Fatalf("Exec with the agent's key = %q, %v", res.Stdout, err)
	}
	// Without the agent the same node cannot be reached, and the error
	// says why.
	tr2 := newSSH(t, c, target(c, s))
	if _, err := tr2.Exec(t.Context(), []string{"true"}, nil); err == nil || !strings.Contains(err.Error(), "no SSH key") {
		t.Fatalf("without agent and key: %v", err)
	}
}

// TestSSHManyCommandsAtOnce: more commands at once than OpenSSH's default
// MaxSessions (10) all run; none is refused.
func TestSSHManyCommandsAtOnce(t *testing.T) {
	sshdtest.Require(t)
	c := sshdtest.NewClient(t)
	s := c.StartServerWith(t, "burst", "MaxSessions 10") // OpenSSH's default
	c.Trust(t, s)
	tr := newSSH(t, c, target(c, s))
	if _, err := tr.Home(t.Context()); err != nil { // the SFTP session takes one too
		t.Fatal(err)
	}
	errs := make(chan error, 24)
	for i := 0; i < 24; i++ {
		go func() {
			res, err := tr.Exec(t.Context(), []string{"sleep", "0.3"}, nil)
			if err == nil && res.ExitCode != 0 {
				err = fmt.Errorf("exit %d: %s", res.ExitCode, res.Stderr)
			}
			errs <- err
		}()
	}
	for i := 0; i < 24; i++ {
		if err := <-errs; err != nil {
			t.Errorf("command %d: %v", i, err)
		}
	}
}
