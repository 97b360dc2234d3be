package sshnode

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
)

// defaultIdentities are the keys ssh tries when none is configured.
var defaultIdentities = []string{"id_ed25519", "id_ecdsa", "id_rsa"}

// authMethod collects the keys to offer for ep: the identity files (-i,
// IdentityFile, else the default keys) and the ssh-agent's keys. It never
// prompts: a passphrase-protected key that the agent does not hold is an
// error saying to add it to the agent.
func authMethod(cfg Config, ep *Endpoint) (ssh.AuthMethod, error) {
	var agentSigners []ssh.Signer
	sock := cfg.AgentSocket
	if sock == "" {
		sock = os.Getenv("SSH_AUTH_SOCK")
	}
	if sock != "" {
		if conn, err := net.Dial("unix", sock); err == nil {
			// The connection lives as long as the process: signing happens
			// at every (re)connect.
			if s, err := agent.NewClient(conn).Signers(); err == nil {
				agentSigners = s
			}
		}
	}
	files := ep.IdentityFiles
	explicit := len(files) > 0
	if !explicit {
		for _, name := range defaultIdentities {
			files = append(files, filepath.Join(cfg.Env.Home, ".ssh", name))
		}
	}
	var fileSigners []ssh.Signer
	var filePubs []ssh.PublicKey
	var locked []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			if explicit && errors.Is(err, fs.ErrNotExist) {
				return nil, fmt.Errorf("identity file %s does not exist\n  fix: correct -i / IdentityFile for this node", f)
			}
			continue
		}
		signer, err := ssh.ParsePrivateKey(b)
		var pe *ssh.PassphraseMissingError
		switch {
		case errors.As(err, &pe):
			if pe.PublicKey != nil {
				filePubs = append(filePubs, pe.PublicKey)
			}
			if pe.PublicKey == nil || !hasKey(agentSigners, pe.PublicKey) {
				locked = append(locked, f)
			}
		case err != nil:
			return nil, fmt.Errorf("read identity file %s: %w", f, err)
		default:
			fileSigners = append(fileSigners, signer)
			filePubs = append(filePubs, signer.PublicKey())
		}
	}
	if ep.IdentitiesOnly {
		var only []ssh.Signer
		for _, s := range agentSigners {
			if containsKey(filePubs, s.PublicKey()) {
				only = append(only, s)
			}
		}
		agentSigners = only
	}
	signers := append(fileSigners, agentSigners...)
	if len(signers) == 0 {
		if len(locked) > 0 {
			return nil, fmt.Errorf("key %s is passphrase-protected and no ssh-agent holds it; dispatch never prompts\n  fix: run `ssh-add %s` (with SSH_AUTH_SOCK set for dispatch), or use a key without a passphrase",
				strings.Join(locked, ", "), locked[0])
		}
		return nil, fmt.Errorf("no SSH key to offer: no ssh-agent keys (SSH_AUTH_SOCK) and none of %s exist\n  fix: create a key (ssh-keygen -t ed25519) or set IdentityFile / -i for the node", strings.Join(files, ", "))
	}
	return ssh.PublicKeys(signers...), nil
}

func hasKey(signers []ssh.Signer, k ssh.PublicKey) bool {
	for _, s := range signers {
		if bytes.Equal(s.PublicKey().Marshal(), k.Marshal()) {
			return true
		}
	}
	return false
}

func containsKey(keys []ssh.PublicKey, k ssh.PublicKey) bool {
	for _, x := range keys {
		if bytes.Equal(x.Marshal(), k.Marshal()) {
			return true
		}
	}
	return false
}
