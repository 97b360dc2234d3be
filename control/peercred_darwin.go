package control

import "golang.org/x/sys/unix"

// peerCredOption names the socket option peerUID reads.
const peerCredOption = "LOCAL_PEERCRED"

// sockPeerUID reads the peer's user id of the unix socket fd.
func sockPeerUID(fd uintptr) (int, error) {
	cred, err := unix.GetsockoptXucred(int(fd), unix.SOL_LOCAL, unix.LOCAL_PEERCRED)
	if err != nil {
		return -1, err
	}
	return int(cred.Uid), nil
}
