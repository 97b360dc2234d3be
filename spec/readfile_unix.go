//go:build unix

package spec

import (
	"os"
	"syscall"
)

// openReadFlags open without waiting for a FIFO's writer.
const openReadFlags = os.O_RDONLY | syscall.O_NONBLOCK
