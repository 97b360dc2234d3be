package taskfiles

import "syscall"

// statMtime is the modification time of st in nanoseconds.
func statMtime(st *syscall.Stat_t) int64 { return st.Mtim.Nano() }

// fsync flushes fd to the disk, as os.File.Sync does.
func fsync(fd int) error {
	return IgnoringEINTR(func() error { return syscall.Fsync(fd) })
}
