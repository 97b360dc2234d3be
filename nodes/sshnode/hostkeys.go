package sshnode

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"github.com/skeema/knownhosts"
	"golang.org/x/crypto/ssh"
	xknownhosts "golang.org/x/crypto/ssh/knownhosts"
)

// HostKeyUnknownError means a host's key is in no known_hosts file: dispatch
// refuses to connect until the operator has checked and recorded it.
type HostKeyUnknownError struct {
	Node string
	Addr string // host:port as looked up in known_hosts
	Key  ssh.PublicKey
}

func (e *HostKeyUnknownError) Error() string {
	return fmt.Sprintf("host key of node %s (%s) is unknown: it presents %s %s, which no known_hosts file lists\n  fix: check the fingerprint, then run `dispatch nodes trust %s` (or set strict_host_key_checking: accept-new on the node)",
		e.Node, e.Addr, e.Key.Type(), ssh.FingerprintSHA256(e.Key), e.Node)
}

// HostKeyChangedError means a host presents a key other than the one
// recorded for it: a reinstalled machine, or someone in the middle.
type HostKeyChangedError struct {
	Node  string
	Addr  string
	Key   ssh.PublicKey
	Known []string // "file:line" of the recorded keys
}

func (e *HostKeyChangedError) Error() string {
	return fmt.Sprintf("HOST KEY CHANGED for node %s (%s): it now presents %s %s, not the key recorded at %v. Someone may be intercepting the connection, or the host was reinstalled; dispatch will not connect.\n  fix: if you know why the key changed, remove the old entry with `ssh-keygen -R %s` and run `dispatch nodes trust %s`",
		e.Node, e.Addr, e.Key.Type(), ssh.FingerprintSHA256(e.Key), e.Known, shellQuote(knownhosts.Normalize(e.Addr)), e.Node)
}

// hostKeys checks host keys against the operator's known_hosts files.
type hostKeys struct {
	node      string
	files     []string // read, in order
	write     string   // where accept-new and trust record keys
	acceptNew bool

	mu sync.Mutex // serialises accept-new writes
}

func newHostKeys(node string, env Env, ep *Endpoint, strict string) *hostKeys {
	files := ep.KnownHostsFiles
	if len(files) == 0 {
		files = []string{filepath.Join(env.Home, ".ssh", "known_hosts"), "/etc/ssh/ssh_known_hosts"}
	}
	acceptNew := strict == "accept-new" || (strict == "" && ep.StrictHostKeyChecking == "accept-new")
	return &hostKeys{node: node, files: files, write: files[0], acceptNew: acceptNew}
}

func (h *hostKeys) db() (*knownhosts.HostKeyDB, error) {
	var existing []string
	for _, f := range h.files {
		if _, err := os.Stat(f); err == nil {
			existing = append(existing, f)
		}
	}
	if len(existing) == 0 {
		return nil, nil
	}
	db, err := knownhosts.NewDB(existing...)
	if err != nil {
		return nil, fmt.Errorf("read known_hosts: %w", err)
	}
	return db, nil
}

// lookupAddr is the name a host is recorded under: its HostKeyAlias, else
// host:port ("[host]:port" in the file when the port is not 22).
func lookupAddr(ep *Endpoint) string {
	if ep.HostKeyAlias != "" {
		return net.JoinHostPort(ep.HostKeyAlias, "22")
	}
	return net.JoinHostPort(ep.Host, strconv.Itoa(ep.Port))
}

// config returns the host key callback and the key algorithms to ask for, so
// a host with several keys presents one that is recorded.
func (h *hostKeys) config(ep *Endpoint) (ssh.HostKeyCallback, []string, error) {
	db, err := h.db()
	if err != nil {
		return nil, nil, err
	}
	addr := lookupAddr(ep)
	var algos []string
	if db != nil {
		algos = db.HostKeyAlgorithms(addr)
	}
	cb := func(_ string, _ net.Addr, key ssh.PublicKey) error {
		var err error
		if db == nil {
			err = &xknownhosts.KeyError{}
		} else {
			err = db.HostKeyCallback()(addr, dummyAddr{}, key)
		}
		if err == nil {
			return nil
		}
		var ke *xknownhosts.KeyError
		switch {
		case errors.As(err, &ke) && len(ke.Want) > 0:
			var known []string
			for _, w := range ke.Want {
				known = append(known, fmt.Sprintf("%s:%d", w.Filename, w.Line))
			}
			return &HostKeyChangedError{Node: h.node, Addr: addr, Key: key, Known: known}
		case errors.As(err, &ke):
			if h.acceptNew {
				return h.record(addr, key)
			}
			return &HostKeyUnknownError{Node: h.node, Addr: addr, Key: key}
		}
		return err
	}
	return cb, algos, nil
}

// record appends a host key to the operator's known_hosts file.
func (h *hostKeys) record(addr string, key ssh.PublicKey) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return AddKnownHost(h.write, addr, key)
}

// AddKnownHost appends addr's key to a known_hosts file, creating it (and
// ~/.ssh) with private permissions.
func AddKnownHost(file, addr string, key ssh.PublicKey) error {
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("record host key: %w", err)
	}
	if _, err := fmt.Fprintln(f, knownhosts.Line([]string{knownhosts.Normalize(addr)}, key)); err != nil {
		f.Close()
		return fmt.Errorf("record host key in %s: %w", file, err)
	}
	return f.Close()
}

// KnownState says how a presented key compares with known_hosts.
type KnownState int

// Known states of a host key.
const (
	KeyUnknown KnownState = iota
	KeyKnown
	KeyChanged
)

// checkKnown compares key with the recorded keys of addr.
func (h *hostKeys) checkKnown(addr string, key ssh.PublicKey) (KnownState, []string, error) {
	db, err := h.db()
	if err != nil || db == nil {
		return KeyUnknown, nil, err
	}
	err = db.HostKeyCallback()(addr, dummyAddr{}, key)
	var ke *xknownhosts.KeyError
	switch {
	case err == nil:
		return KeyKnown, nil, nil
	case errors.As(err, &ke) && len(ke.Want) > 0:
		var known []string
		for _, w := range ke.Want {
			known = append(known, fmt.Sprintf("%s:%d", w.Filename, w.Line))
		}
		return KeyChanged, known, nil
	case errors.As(err, &ke):
		return KeyUnknown, nil, nil
	}
	return KeyUnknown, nil, err
}

// dummyAddr stands in for the remote address: known_hosts lookups are by
// name, and dispatch does not check keys by IP (CheckHostIP no).
type dummyAddr struct{}

func (dummyAddr) Network() string { return "tcp" }
func (dummyAddr) String() string  { return "0.0.0.0:0" }
