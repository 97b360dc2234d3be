package taskfiles

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// statMtime is the modification time of st in nanoseconds.
func statMtime(st *syscall.Stat_t) int64 { return st.Mtimespec.Nano() }

// fsync flushes fd to the disk, as os.File.Sync does: on Darwin fsync
// leaves the data in the drive's cache, F_FULLFSYNC asks the drive to
// write it. A file system that does not know it (SMB, some FUSE mounts)
// gets fsync.
func fsync(fd int) error {
	return IgnoringEINTR(func() error {
		_, err := unix.FcntlInt(uintptr(fd), unix.F_FULLFSYNC, 0)
		if err == unix.ENOTSUP || err == unix.EINVAL {
			err = syscall.Fsync(fd)
		}
		return err
	})
}
