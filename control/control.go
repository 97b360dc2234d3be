package control

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/dispatch-tool/dispatch/home"
)

// Request is an operator command for the controller of a home: the running
// one receives it over the control socket; when none runs, the command
// takes the lock and runs it in-process.
type Request struct {
	Op      string   `json:"op"` // start, retry, cancel, stop, enable, disable (a schedule), shutdown (dispatch serve), ping
	Project string   `json:"project"`
	Tasks   []string `json:"tasks,omitempty"`
	Kill    bool     `json:"kill,omitempty"`
	// Downstream (retry) reruns every task after the named ones too.
	Downstream bool         `json:"downstream,omitempty"`
	Start      StartOptions `json:"start,omitempty"`
	// Via says where a request came from when not from the CLI ("the
	// dashboard, token http.token"): the controller records it in an event.
	Via string `json:"via,omitempty"`
}

// ActionEvent is the kind of the event that records a request with a Via:
// what it did and where it came from.
const ActionEvent = "action"

// ActionMessage is the message of a request's ActionEvent, given the
// reply's message.
func ActionMessage(req Request, msg string) string {
	what := req.Op
	if req.Kill {
		what += " --kill"
	}
	if req.Downstream {
		what += " --downstream"
	}
	if len(req.Tasks) > 0 {
		what += " " + strings.Join(req.Tasks, " ")
	}
	return fmt.Sprintf("%s by the operator from %s: %s", what, req.Via, msg)
}

// StartOptions are the switches of `dispatch start` that shape a project.
type StartOptions struct {
	IntegratePartial bool `json:"integrate_partial,omitempty"` // run the integration phase even if some author task failed
	NoIntegrate      bool `json:"no_integrate,omitempty"`      // skip the integration phase
	// BudgetUSD, when positive, replaces project.yaml's budget.usd.
	BudgetUSD float64 `json:"budget_usd,omitempty"`
	// Fresh runs every task of a new run again, reusing no result.
	Fresh bool `json:"fresh,omitempty"`
	// Trigger is what begins the run: "" or "start" by hand, "schedule",
	// "catch-up" (domain.ProjectOptions.Trigger).
	Trigger string `json:"trigger,omitempty"`
}

// What begins a run (domain.ProjectOptions.Trigger).
const (
	TriggerStart    = "start"
	TriggerSchedule = "schedule"
	TriggerCatchUp  = "catch-up"
)

// Reply is the controller's answer to a Request.
type Reply struct {
	Message string `json:"message,omitempty"`
	Error   string `json:"error,omitempty"`
	// Usage is set when the request itself was wrong (an unknown task): the
	// command exits 2.
	Usage bool `json:"usage,omitempty"`
	// Ending is set when the controller's loop ended before it took the
	// request: nothing was done, and the next controller (or the command
	// itself, under the lock) should do it.
	Ending bool `json:"ending,omitempty"`
	// NotFound is set with Usage when what the request names (a project,
	// a task) does not exist: the HTTP API answers 404.
	NotFound bool `json:"not_found,omitempty"`
}

// OpError is a request that cannot be carried out as asked; NotFound when
// what it names does not exist.
type OpError struct {
	Msg      string
	NotFound bool
}

func (e *OpError) Error() string { return e.Msg }

// ErrNoController means no controller answers on the home's socket.
var ErrNoController = errors.New("no controller is running on this home")

// SocketError is a control socket, or its directory, that belongs to
// another user or is open to them: dispatch neither listens nor talks there.
type SocketError struct {
	Path string
	Msg  string
	Fix  string
}

// BadInput marks an unsafe control socket as the operator's to fix (exit 2).
func (e *SocketError) BadInput() bool { return true }

func (e *SocketError) Error() string {
	return fmt.Sprintf("control socket %s: %s\n  fix: %s", e.Path, e.Msg, e.Fix)
}

// trustedUID reports whether a process or file of uid may command, or
// answer for, the controllers of this user: the user itself or root.
func trustedUID(uid int) bool { return uid == os.Getuid() || uid == 0 }

// checkSocketDir checks the private directory of fallback sockets, creating
// it (0700) when create is set; it must be a directory of this user that no
// one else can write or list.
func checkSocketDir(dir string, create bool) error {
	fi, err := os.Lstat(dir)
	if errors.Is(err, fs.ErrNotExist) && create {
		if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("create the control socket directory: %w", err)
		}
		fi, err = os.Lstat(dir)
	}
	if err != nil {
		return err
	}
	fix := fmt.Sprintf("remove %s (or set TMPDIR to a directory of your own) and start again", dir)
	switch uid, ok := fileOwner(fi); {
	case !fi.IsDir():
		return &SocketError{Path: dir, Msg: "its directory is not a directory (a symbolic link?)", Fix: fix}
	case ok && uid != os.Getuid():
		return &SocketError{Path: dir, Msg: fmt.Sprintf("its directory belongs to uid %d, not to you (uid %d)", uid, os.Getuid()), Fix: fix}
	case fi.Mode().Perm()&0o077 != 0:
		return &SocketError{Path: dir, Msg: fmt.Sprintf("its directory is open to other users (mode %04o)", fi.Mode().Perm()), Fix: fix}
	}
	return nil
}

// checkSocketFile checks an existing socket file: it must be this user's
// (or root's). ok is false when there is none.
func checkSocketFile(path string) (ok bool, err error) {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if uid, known := fileOwner(fi); known && !trustedUID(uid) {
		return false, &SocketError{Path: path, Msg: fmt.Sprintf("it belongs to uid %d, not to you (uid %d): another user may be listening there", uid, os.Getuid()),
			Fix: "remove it if it is not your controller's, then start again"}
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return false, &SocketError{Path: path, Msg: "it is not a socket", Fix: "remove it, then start again"}
	}
	return true, nil
}

func fileOwner(fi fs.FileInfo) (int, bool) {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int(st.Uid), true
	}
	return 0, false
}

// dial connects to the controller of homeDir after checking that the socket
// and its directory are this user's, and that the process answering is.
func dial(ctx context.Context, homeDir string) (net.Conn, error) {
	path := home.SocketPath(homeDir)
	if dir := filepath.Dir(path); dir != filepath.Clean(homeDir) {
		if err := checkSocketDir(dir, false); errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%w (%v)", ErrNoController, err)
		} else if err != nil {
			return nil, err
		}
	}
	exists, err := checkSocketFile(path)
	if err != nil {
		return nil, err
	}
	if !exists {
		return nil, fmt.Errorf("%w (no socket %s)", ErrNoController, path)
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("%w (%v)", ErrNoController, err)
	}
	uid, err := peerUID(conn)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("control socket %s: check who answers: %w", path, err)
	}
	if !trustedUID(uid) {
		conn.Close()
		return nil, &SocketError{Path: path, Msg: fmt.Sprintf("the process answering is uid %d, not you (uid %d)", uid, os.Getuid()),
			Fix: "stop that process, remove the socket, then start again"}
	}
	return conn, nil
}

// Running reports whether a controller of this user answers on the home's
// socket (a frozen one does too: Find tells it apart).
func Running(home string) bool { return Find(home).Running }

// endingWait bounds how long Send waits for an ending controller to close
// its socket.
const endingWait = 30 * time.Second

// Send delivers a request to the running controller of home. A controller
// that is ending takes no request: Send then waits until its socket is
// gone and returns ErrNoController, so that the caller carries the request
// out as when none runs, instead of failing it.
func Send(ctx context.Context, home string, req Request) (Reply, error) {
	rep, err := send(ctx, home, req)
	if err != nil || !rep.Ending {
		return rep, err
	}
	ctx, cancel := context.WithTimeout(ctx, endingWait)
	defer cancel()
	for {
		select {
		case <-ctx.Done():
			return rep, nil // still ending: its answer says so
		case <-time.After(50 * time.Millisecond):
		}
		conn, err := dial(ctx, home)
		if errors.Is(err, ErrNoController) {
			return Reply{}, err
		}
		if err == nil {
			conn.Close()
		}
	}
}

func send(ctx context.Context, home string, req Request) (Reply, error) {
	conn, err := dial(ctx, home)
	if err != nil {
		return Reply{}, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(2 * time.Minute))
	if err := json.NewEncoder(conn).Encode(req); err != nil {
		return Reply{}, fmt.Errorf("send to the controller: %w", err)
	}
	var rep Reply
	if err := json.NewDecoder(bufio.NewReader(conn)).Decode(&rep); err != nil {
		return Reply{}, fmt.Errorf("read the controller's answer: %w", err)
	}
	return rep, nil
}
