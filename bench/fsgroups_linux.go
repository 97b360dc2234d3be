package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// fsTopdirFL is the inode flag FS_TOPDIR_FL (chattr +T): the directory
// is the top of a hierarchy for ext4's Orlov allocator, which then places
// each directory made in it in a block group of its own rather than in
// the group of its parent.
const fsTopdirFL = 0x00020000

// spreadDirs gives dir the T attribute (see fsTopdirFL). The bench's
// homes and work_dirs are each made directly in its root, so each starts
// in a block group of its own. Why this matters here: this machine's root
// is ext4 without a journal, where a new inode skips every inode of its
// group freed in the last one to six minutes (fs/ext4/ialloc.c,
// recently_deleted) and pays a read of each: after a scenario's cleanup
// (tens of thousands of files) the next scenario's file creations in the
// same groups cost half a millisecond each instead of twenty
// microseconds, and its figures measured what ran before it. A file
// system without the attribute (tmpfs, xfs, APFS) refuses it, which is
// reported and harmless.
func spreadDirs(dir string) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	flags, err := unix.IoctlGetUint32(fd, unix.FS_IOC_GETFLAGS)
	if err != nil {
		return fmt.Errorf("read the attributes of %s: %w", dir, err)
	}
	if err := unix.IoctlSetPointerInt(fd, unix.FS_IOC_SETFLAGS, int(flags|fsTopdirFL)); err != nil {
		return fmt.Errorf("set the T attribute of %s: %w", dir, err)
	}
	return nil
}

// createCost is the CPU time the kernel takes to create an empty file in
// a new directory made in dir: 400 files, made and removed by one thread.
func createCost(dir string) (time.Duration, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	sub, err := os.MkdirTemp(dir, "create-cost-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(sub)
	const files = 400
	var before, after unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_THREAD, &before); err != nil {
		return 0, err
	}
	for i := range files {
		fd, err := unix.Open(filepath.Join(sub, strconv.Itoa(i)), unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return 0, err
		}
		unix.Close(fd)
	}
	if err := unix.Getrusage(unix.RUSAGE_THREAD, &after); err != nil {
		return 0, err
	}
	spent := time.Duration(after.Utime.Nano()+after.Stime.Nano()-before.Utime.Nano()-before.Stime.Nano()) * time.Nanosecond
	return spent / files, nil
}
