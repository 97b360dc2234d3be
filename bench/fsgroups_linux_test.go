package main

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"
)

// TestSpreadDirsSetsTheTAttribute: on a file system that has the
// attribute (ext2/3/4), the bench's root carries it afterwards; one
// without it refuses, and says so.
func TestSpreadDirsSetsTheTAttribute(t *testing.T) {
	dir := t.TempDir()
	err := spreadDirs(dir)
	var st unix.Statfs_t
	if serr := unix.Statfs(dir, &st); serr != nil {
		t.Fatal(serr)
	}
	const ext4Magic = 0xEF53
	if st.Type != ext4Magic {
		if err == nil {
			t.Logf("%s is not ext2/3/4 (magic %#x) and took the attribute", dir, st.Type)
		}
		return
	}
	if err != nil {
		t.Fatalf("spreadDirs on ext4: %v", err)
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	flags, err := unix.IoctlGetUint32(fd, unix.FS_IOC_GETFLAGS)
	if err != nil {
		t.Fatal(err)
	}
	if flags&fsTopdirFL == 0 {
		t.Fatalf("flags %#x: no T attribute", flags)
	}
}

// TestCreateCostMeasures: the probe creates its files and gives a time
// per file.
func TestCreateCostMeasures(t *testing.T) {
	d, err := createCost(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if d <= 0 {
		t.Fatalf("createCost = %v, want > 0", d)
	}
	if _, err := createCost("/nonexistent/dir"); !errors.Is(err, unix.ENOENT) {
		t.Fatalf("createCost of a missing dir: %v, want ENOENT", err)
	}
}
