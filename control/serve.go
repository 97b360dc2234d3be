package control

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/dispatch-tool/dispatch/home"
)

// Call is a Request waiting for the control loop, which answers on Reply.
type Call struct {
	Req   Request
	Reply chan Reply
}

// Serve listens on the control socket of homeDir and hands each request to
// the control loop on calls; ended is closed when that loop has ended, so
// that no handler waits for it. The returned function stops listening, ends
// the connections still open and waits for their handlers, then removes the
// socket.
func Serve(ctx context.Context, homeDir string, log *slog.Logger, calls chan<- Call, ended <-chan struct{}) (func(), error) {
	path := home.SocketPath(homeDir)
	if dir := filepath.Dir(path); dir != filepath.Clean(homeDir) {
		if err := checkSocketDir(dir, true); err != nil {
			return nil, err
		}
	}
	if exists, err := checkSocketFile(path); err != nil {
		return nil, err
	} else if exists {
		_ = os.Remove(path) // left by a killed controller; we hold the lock
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("control socket %s: %w", path, err)
	}
	// Until this chmod the umask decides; serveConn checks every peer anyway.
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, fmt.Errorf("control socket %s: %w", path, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	var handlers sync.WaitGroup
	handlers.Add(1)
	go func() {
		defer handlers.Done()
		var delay time.Duration
		for {
			conn, err := l.Accept()
			if err != nil {
				if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
					return
				}
				// Out of descriptors (EMFILE), for a moment: wait, as
				// net/http does; the socket must not go deaf for good.
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				log.Warn("control socket: accept", "err", err, "retry_in", delay)
				select {
				case <-ctx.Done():
					return
				case <-time.After(delay):
				}
				continue
			}
			delay = 0
			handlers.Add(1)
			go func() {
				defer handlers.Done()
				serveConn(ctx, log, calls, ended, conn)
			}()
		}
	}()
	return func() {
		cancel()
		l.Close()
		handlers.Wait()
		os.Remove(path)
	}, nil
}

// serveConn answers one connection; it ends, closing conn, when ctx does.
func serveConn(ctx context.Context, log *slog.Logger, calls chan<- Call, ended <-chan struct{}, conn net.Conn) {
	defer conn.Close()
	// A peer that sends nothing holds no handler once serving stops.
	answered := make(chan struct{})
	var closer sync.WaitGroup
	closer.Add(1)
	go func() {
		defer closer.Done()
		select {
		case <-ctx.Done():
			conn.Close()
		case <-answered:
		}
	}()
	defer func() { close(answered); closer.Wait() }()
	_ = conn.SetDeadline(time.Now().Add(2 * time.Minute))
	// Only this user (or root) commands this controller.
	if uid, err := peerUID(conn); err != nil || !trustedUID(uid) {
		msg := fmt.Sprintf("refused: this controller takes requests from uid %d only", os.Getuid())
		if err != nil {
			msg = "refused: cannot tell who is asking: " + err.Error()
		}
		log.Warn("control socket: request refused", "peer_uid", uid, "error", err)
		_ = json.NewEncoder(conn).Encode(Reply{Error: msg})
		return
	}
	var req Request
	if err := json.NewDecoder(bufio.NewReader(conn)).Decode(&req); err != nil {
		_ = json.NewEncoder(conn).Encode(Reply{Error: "bad request: " + err.Error(), Usage: true})
		return
	}
	r := Call{Req: req, Reply: make(chan Reply, 1)}
	ending := Reply{Error: "the controller is ending; try again once it has (dispatch start runs one)", Ending: true}
	select {
	case calls <- r:
	case <-ended:
		_ = json.NewEncoder(conn).Encode(ending)
		return
	case <-ctx.Done():
		return
	}
	select {
	case rep := <-r.Reply:
		_ = json.NewEncoder(conn).Encode(rep)
	case <-ended:
		// Run answers before it ends: an answer given is in r.Reply.
		select {
		case rep := <-r.Reply:
			_ = json.NewEncoder(conn).Encode(rep)
		default:
			_ = json.NewEncoder(conn).Encode(ending)
		}
	case <-ctx.Done():
	}
}
