//go:build unix

package spec

import (
	"errors"
	"os"
	"syscall"
)

// openReadFlags open without waiting for a FIFO's writer.
const openReadFlags = os.O_RDONLY | syscall.O_NONBLOCK

// openNoFollowFlags also refuse a symbolic link as the last component.
const openNoFollowFlags = openReadFlags | syscall.O_NOFOLLOW

// isLinkErr reports whether err is an O_NOFOLLOW open's refusal of a
// symbolic link: ELOOP, or EMLINK on FreeBSD and NetBSD.
func isLinkErr(err error) bool {
	return errors.Is(err, syscall.ELOOP) || errors.Is(err, syscall.EMLINK)
}
