package gitresult

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Checkouts bounds how many workspaces a node checks out at once. A
// checkout writes every file of the tree and keeps about one core busy:
// a node's first launch of a project on a large repository checks out one
// tree per slot, and with more checkouts than cores each ends when all do
// (4 of Go's source tree at once on 2 cores: all 4 tools start after
// 1.35 s; 2 at a time: the first 2 after 0.68 s, the others when they
// would have). Places are lock files in Dir, held with flock for the
// checkout: the kernel lets go of a supervisor's place when it dies.
type Checkouts struct {
	Dir    string      // where the places' lock files are (the wrapper's private .ctl)
	N      int         // places, at least 1: the node's cores
	Stop   func() bool // true ends the wait (the attempt is being stopped)
	OnWait func()      // called once when no place was free at once
}

// checkoutPoll is how often a waiting checkout tries the places again.
const checkoutPoll = 20 * time.Millisecond

// ErrStopped is returned when Stop ended the wait for a checkout place.
var ErrStopped = errors.New("stopped while waiting for a checkout place")

// checkoutLockName names place i's lock file on host: the wrapper's .ctl
// may be shared by several machines (a Slurm cluster's work_dir, a home
// on NFS, whose server enforces flock for every client), and each bounds
// its own checkouts.
func checkoutLockName(host string, i int) string {
	return "checkout-" + host + "-" + strconv.Itoa(i) + ".lock"
}

// hostName is this machine's name as a file name part (fileName).
func hostName() string {
	h, _ := os.Hostname()
	return fileName(h)
}

// fileName is host as a file name part: itself when it is letters,
// digits, dots and dashes (64 at most, not only dots), else its digest.
func fileName(host string) string {
	ok := host != "" && len(host) <= 64 && strings.Trim(host, ".") != ""
	for _, r := range host {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-') {
			ok = false
		}
	}
	if ok {
		return host
	}
	sum := sha256.Sum256([]byte(host))
	return hex.EncodeToString(sum[:8])
}

// flock is syscall.Flock; tests give a file system without it.
var flock = syscall.Flock

// hold takes a free place, waiting for one, and returns its release. A
// nil c, or places that cannot be opened or locked (a file system without
// flock: ENOLCK), hold nothing: a checkout is never refused for want of a
// lock, only kept from crowding.
func (c *Checkouts) hold() (release func(), err error) {
	nothing := func() {}
	if c == nil || c.N < 1 {
		return nothing, nil
	}
	files := make([]*os.File, 0, c.N)
	closeAll := func() {
		for _, f := range files {
			f.Close()
		}
	}
	host := hostName()
	for i := 0; i < c.N; i++ {
		f, err := os.OpenFile(filepath.Join(c.Dir, checkoutLockName(host, i)), os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
		if err != nil {
			closeAll()
			return nothing, nil
		}
		files = append(files, f)
	}
	waited := false
	for {
		for i, f := range files {
			err := flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
			if err == nil {
				files = append(files[:i], files[i+1:]...)
				closeAll()
				return func() { f.Close() }, nil // closing the file lets go of its lock
			}
			if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
				closeAll()
				return nothing, nil
			}
		}
		if c.Stop != nil && c.Stop() {
			closeAll()
			return nil, ErrStopped
		}
		if !waited && c.OnWait != nil {
			c.OnWait()
		}
		waited = true
		time.Sleep(checkoutPoll)
	}
}
