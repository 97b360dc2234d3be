package taskfiles

import "syscall"

// statMtime is the modification time of st in nanoseconds.
func statMtime(st *syscall.Stat_t) int64 { return st.Mtim.Nano() }
