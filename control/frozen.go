package control

import (
	"bytes"
	"context"
	"time"
)

// Found is what Find found of a home's controller.
type Found struct {
	// Running: a controller of this user answers on the home's socket
	// (its listening socket accepts, even when its process is frozen).
	Running bool
	// PID is the process at the other end of the socket, 0 when the
	// system does not say (only Linux's peer credentials carry it).
	PID int
	// Frozen: that process is stopped (SIGSTOP, Ctrl-Z's SIGTSTP, a
	// debugger): it holds the home and its socket and does nothing.
	Frozen bool
}

// Find looks for the controller of home: whether one answers on its
// socket, its pid, and whether its process is frozen.
func Find(home string) Found {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	conn, err := dial(ctx, home)
	if err != nil {
		return Found{}
	}
	defer conn.Close()
	f := Found{Running: true, PID: peerPID(conn)}
	f.Frozen = f.PID > 1 && processFrozen(f.PID)
	return f
}

// statStopped reports whether a /proc/<pid>/stat line says its process
// is stopped: the state after the command's closing parenthesis (the
// command may hold spaces and parentheses itself) is T (stopped by a
// signal) or t (stopped by a tracer).
func statStopped(stat []byte) bool {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return false
	}
	rest := bytes.TrimLeft(stat[i+1:], " ")
	return len(rest) > 0 && (rest[0] == 'T' || rest[0] == 't')
}
