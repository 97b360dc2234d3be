//go:build linux || darwin

package control

import (
	"fmt"
	"net"
)

// peerUID is the user id of the process at the other end of a unix socket
// connection (the system's peer credentials: sockPeerUID).
func peerUID(conn net.Conn) (int, error) {
	uc, ok := conn.(*net.UnixConn)
	if !ok {
		return -1, fmt.Errorf("not a unix socket connection (%T)", conn)
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return -1, err
	}
	uid, credErr := -1, error(nil)
	if err := raw.Control(func(fd uintptr) { uid, credErr = sockPeerUID(fd) }); err != nil {
		return -1, err
	}
	if credErr != nil {
		return -1, fmt.Errorf("%s: %w", peerCredOption, credErr)
	}
	return uid, nil
}
