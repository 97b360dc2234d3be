package sshnode

import (
	"net"
	"sync/atomic"
	"time"

	"golang.org/x/crypto/ssh"
)

// An open connection to a node is watched the way OpenSSH's
// ServerAliveInterval and ServerAliveCountMax watch one: every interval
// without a byte from the node, a keepalive@openssh.com request goes out,
// and after keepaliveMissed intervals without one the connection is
// dropped. Dropping it ends every call, stream and conversation on it at
// once, so that a frozen node (a stopped VM, a partition: the TCP
// connection stays open and says nothing) is found within
// node_offline_timeout instead of when each call's own deadline runs out.
// Any byte counts as an answer, so that a long transfer keeps its
// connection alive while its bytes move, however long it takes.

const (
	// keepaliveMissed is how many intervals of silence drop a connection
	// (OpenSSH's ServerAliveCountMax default).
	keepaliveMissed = 3
	// DefaultKeepalive is the interval when Config.Keepalive is zero.
	DefaultKeepalive = 15 * time.Second
	// minKeepalive is the shortest interval KeepaliveFor gives.
	minKeepalive = 100 * time.Millisecond
	// keepaliveChecks is how many times per interval silence is looked at:
	// a connection is dropped at most a quarter interval late.
	keepaliveChecks = 4
)

// KeepaliveFor is the keepalive interval for a node_offline_timeout: a
// third of it, so that a node silent for the whole timeout has missed
// keepaliveMissed keepalives and is dropped, at most DefaultKeepalive
// (a long timeout still finds a dead connection within a minute) and at
// least minKeepalive.
func KeepaliveFor(offline time.Duration) time.Duration {
	return min(max(offline/keepaliveMissed, minKeepalive), DefaultKeepalive)
}

// heardConn records when its peer last sent a byte.
type heardConn struct {
	net.Conn
	heard *atomic.Int64 // unix nanoseconds
}

func (c *heardConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.heard.Store(time.Now().UnixNano())
	}
	return n, err
}

// Silence reports how long the node has said nothing, and whether its
// connection was dropped for it (see nodes.Hearer). Without keepalives a
// quiet connection says nothing of its node: zero.
func (s *SSH) Silence() (time.Duration, bool) {
	at := s.heard.Load()
	if at == 0 || s.cfg.Keepalive <= 0 {
		return 0, false
	}
	s.mu.Lock()
	gaveUp := s.gaveUp
	s.mu.Unlock()
	return time.Since(time.Unix(0, at)), gaveUp
}

// keepalive watches c until it closes, dropping it after keepaliveMissed
// intervals without a byte from the node; on a quiet connection it asks
// for one every interval.
func (s *SSH) keepalive(c *ssh.Client, every time.Duration) {
	closed := make(chan struct{})
	go func() {
		_ = c.Wait()
		close(closed)
	}()
	check := every / keepaliveChecks
	t := time.NewTicker(check)
	defer t.Stop()
	// Asked a check early, so that on a quiet connection the requests
	// are never more than an interval apart.
	due := every - check
	var asking atomic.Bool
	var asked time.Time
	last := time.Now()
	for {
		select {
		case <-closed:
			return
		case now := <-t.C:
			if now.Sub(last) > every {
				// This process did not run for a while (a laptop asleep, a
				// starved machine): what the node sent meanwhile is still
				// unread, and its silence counts from now.
				s.heard.Store(now.UnixNano())
			}
			last = now
			silent := now.Sub(time.Unix(0, s.heard.Load()))
			if silent >= keepaliveMissed*every {
				s.giveUp(c)
				return
			}
			if silent < due || now.Sub(asked) < due || !asking.CompareAndSwap(false, true) {
				continue
			}
			asked = now
			go func() {
				defer asking.Store(false)
				// The answer is a byte like any other (heardConn); the
				// request's own result says nothing more.
				_, _, _ = c.SendRequest("keepalive@openssh.com", true, nil)
			}()
		}
	}
}

// giveUp drops c for its silence: every call on it fails at once, and
// Silence says the node was given up until a new connection is made.
func (s *SSH) giveUp(c *ssh.Client) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.client != c {
		return
	}
	s.gaveUp = true
	s.closeLocked()
}
