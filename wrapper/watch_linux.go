package wrapper

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"unsafe"
)

// inotifyMask is what makes a directory worth a look: a file renamed into
// it (status.json is replaced that way), created or written, or a
// directory made in it.
const inotifyMask = syscall.IN_MOVED_TO | syscall.IN_CREATE | syscall.IN_CLOSE_WRITE | syscall.IN_DELETE | syscall.IN_ONLYDIR

// newNotifier returns a channel that receives a value whenever something
// changed in root's project, tasks/ and task directories (watches are added
// for new ones after every event), and a function that stops it. A nil
// channel means inotify is not available: the caller polls. The channel is
// closed when inotify fails later (out of watches).
func newNotifier(root string) (<-chan struct{}, func()) {
	fd, err := syscall.InotifyInit1(syscall.IN_CLOEXEC | syscall.IN_NONBLOCK)
	if err != nil {
		return nil, func() {}
	}
	f := os.NewFile(uintptr(fd), "inotify")
	n := &inotify{fd: fd, root: root, added: map[string]bool{}, byWD: map[int32]string{}}
	if !n.addWatches() {
		f.Close()
		return nil, func() {}
	}
	events := make(chan struct{}, 1)
	var once sync.Once
	stop := func() { once.Do(func() { f.Close() }) }
	go func() {
		defer close(events)
		buf := make([]byte, 64<<10)
		for {
			k, err := f.Read(buf)
			if err != nil || k < syscall.SizeofInotifyEvent {
				return
			}
			relevant := false
			for off := 0; off+syscall.SizeofInotifyEvent <= k; {
				ev := (*syscall.InotifyEvent)(unsafe.Pointer(&buf[off]))
				name := eventName(buf[off+syscall.SizeofInotifyEvent : off+syscall.SizeofInotifyEvent+int(ev.Len)])
				if ev.Mask&syscall.IN_IGNORED != 0 {
					// The directory is gone; one made again at its path
					// needs a new watch.
					delete(n.added, n.byWD[ev.Wd])
					delete(n.byWD, ev.Wd)
				}
				// Heartbeats, logs and temporary files change all the
				// time and say nothing: only a status file or a
				// directory coming or going is worth a look.
				// Directories count where tasks and projects live, not inside
				// a task directory, where the task itself can make any
				// number of them.
				dirEvent := ev.Mask&syscall.IN_ISDIR != 0 && !n.isTaskDir(n.byWD[ev.Wd])
				relevant = relevant || name == fileStatus || dirEvent || ev.Mask&(syscall.IN_IGNORED|syscall.IN_Q_OVERFLOW) != 0
				off += syscall.SizeofInotifyEvent + int(ev.Len)
			}
			if !relevant {
				continue
			}
			// New directories need their own watches, or what happens
			// in them is missed.
			if !n.addWatches() {
				return
			}
			select {
			case events <- struct{}{}:
			default:
			}
		}
	}()
	return events, stop
}

// eventName is the NUL-padded name of an inotify event.
func eventName(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

type inotify struct {
	fd    int
	root  string
	added map[string]bool
	byWD  map[int32]string
}

// isTaskDir reports whether dir is a <project>/tasks/<ID> directory of root.
func (n *inotify) isTaskDir(dir string) bool {
	rel, err := filepath.Rel(n.root, dir)
	return err == nil && strings.Count(rel, "/") == 2
}

// addWatches watches every directory that matters now; false when the
// kernel refuses one for another reason than its being gone (out of
// watches).
func (n *inotify) addWatches() bool {
	for _, d := range watchedDirs(n.root) {
		if n.added[d] {
			continue
		}
		wd, err := syscall.InotifyAddWatch(n.fd, d, inotifyMask)
		if err != nil {
			if err == syscall.ENOENT || err == syscall.ENOTDIR {
				continue
			}
			return false
		}
		n.added[d] = true
		n.byWD[int32(wd)] = d
	}
	return true
}
