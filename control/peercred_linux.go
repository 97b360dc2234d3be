package control

import "syscall"

// peerCredOption names the socket option peerUID reads.
const peerCredOption = "SO_PEERCRED"

// sockPeerUID reads the peer's user id of the unix socket fd.
func sockPeerUID(fd uintptr) (int, error) {
	cred, err := syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	if err != nil {
		return -1, err
	}
	return int(cred.Uid), nil
}
