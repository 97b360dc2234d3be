package nodestatus

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/dispatch-tool/dispatch/wrapper/taskfiles"
)

// ReadGap is the shortest time between two reads of the events: under
// the watch's own coalescing of looks (coalesce, MinChangeGap).
const ReadGap = 2 * time.Millisecond

// inotifyMask is what makes a directory worth a look: a file renamed into
// it (status.json is replaced that way), created or written, or a
// directory made in it.
const inotifyMask = syscall.IN_MOVED_TO | syscall.IN_CREATE | syscall.IN_CLOSE_WRITE | syscall.IN_DELETE | syscall.IN_ONLYDIR

// newNotifier returns a channel that receives a value whenever something
// changed in root's project, tasks/ and task directories (watches are added
// for new ones after every event), and a function that stops it. A nil
// channel means inotify is not available: the caller polls. The channel is
// closed when inotify fails later (out of watches).
func newNotifier(root string) (<-chan struct{}, func() dirChange, func()) {
	fd, err := syscall.InotifyInit1(syscall.IN_CLOEXEC | syscall.IN_NONBLOCK)
	if err != nil {
		return nil, nil, func() {}
	}
	f := os.NewFile(uintptr(fd), "inotify")
	n := &inotify{fd: fd, root: root, added: map[string]bool{}, byWD: map[int32]string{}}
	if !n.addWatches() {
		f.Close()
		return nil, nil, func() {}
	}
	var mu sync.Mutex
	pending := newDirChange()
	take := func() dirChange {
		mu.Lock()
		defer mu.Unlock()
		c := pending
		pending = newDirChange()
		return c
	}
	events := make(chan struct{}, 1)
	var once sync.Once
	stop := func() { once.Do(func() { f.Close() }) }
	go func() {
		defer close(events)
		buf := make([]byte, 64<<10)
		for read := 0; ; read++ {
			if read > 0 {
				// Events come in bursts (an atomic write is three, an
				// attempt's start a dozen, most of them said nothing):
				// read again once a burst had a moment to queue, not
				// at each of its events, each a wake-up of this reader.
				// The first event after a quiet moment is read at once.
				time.Sleep(ReadGap)
			}
			k, err := f.Read(buf)
			if err != nil || k < syscall.SizeofInotifyEvent {
				return
			}
			c := n.parse(buf[:k])
			if !c.all && len(c.keys) == 0 && len(c.projects) == 0 {
				continue
			}
			if !n.follow(c) {
				return
			}
			mu.Lock()
			pending.all = pending.all || c.all
			for k := range c.keys {
				pending.keys[k] = true
			}
			for p := range c.projects {
				pending.projects[p] = true
			}
			mu.Unlock()
			select {
			case events <- struct{}{}:
			default:
			}
		}
	}()
	return events, take, stop
}

// parse reads the inotify events in buf into what they changed: the
// tasks they name, new projects, or all.
func (n *inotify) parse(buf []byte) dirChange {
	c := newDirChange()
	for off := 0; off+syscall.SizeofInotifyEvent <= len(buf); {
		ev := (*syscall.InotifyEvent)(unsafe.Pointer(&buf[off]))
		name := eventName(buf[off+syscall.SizeofInotifyEvent : off+syscall.SizeofInotifyEvent+int(ev.Len)])
		dir := n.byWD[ev.Wd]
		if ev.Mask&syscall.IN_IGNORED != 0 {
			// The directory is gone; one made again at its path
			// needs a new watch.
			delete(n.added, dir)
			delete(n.byWD, ev.Wd)
		}
		// Heartbeats, logs and temporary files change all the
		// time and say nothing: only a status file, a lock file
		// made or closed by its supervisor, or a directory
		// coming or going is worth a look, and only at the task
		// it names. Directories count where tasks and
		// projects live, not inside a task directory, where the
		// task itself can make any number of them.
		depth := n.depth(dir)
		switch {
		case ev.Mask&(syscall.IN_IGNORED|syscall.IN_Q_OVERFLOW) != 0:
			c.all = true
		case depth == 3 && (name == taskfiles.FileStatus || name == taskfiles.FileLock):
			c.keys[n.key(dir)] = true
		case depth == 2 && ev.Mask&syscall.IN_ISDIR != 0:
			// A task directory made or removed in tasks/.
			c.keys[n.key(filepath.Join(dir, name))] = true
			c.newDirs = append(c.newDirs, filepath.Join(dir, name))
		case ev.Mask&syscall.IN_ISDIR == 0:
		case depth == 0 && ev.Mask&syscall.IN_DELETE == 0 && !strings.HasPrefix(name, "."):
			// A new project: it alone is watched and looked at,
			// not every project the node ever ran.
			c.projects[name] = true
		case depth == 1 && ev.Mask&syscall.IN_DELETE == 0 && name == "tasks":
			c.projects[filepath.Base(dir)] = true
		case depth < 2:
			c.all = true // a project, or its tasks/, went
		}
		off += syscall.SizeofInotifyEvent + int(ev.Len)
	}
	return c
}

// follow adds the watches that c's new directories need; false when one
// cannot be added.
func (n *inotify) follow(c dirChange) bool {
	// New directories need their own watches, or what happens
	// in them is missed: a new task directory its own, anything
	// higher a walk.
	ok := true
	if c.all {
		ok = n.addWatches()
	} else {
		for _, d := range c.newDirs {
			ok = ok && n.addWatch(d)
		}
		for p := range c.projects {
			ok = ok && n.addProject(filepath.Join(n.root, p))
		}
	}
	return ok
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

// TestHookWatched, when set, runs between the watch on dir (the work
// directory, or a project's tasks/) and its listing.
var TestHookWatched func(dir string)

type inotify struct {
	fd    int
	root  string
	added map[string]bool
	byWD  map[int32]string
}

// depth is 0 for root, 1 for a project, 2 for its tasks/ and 3 for a
// task directory (-1 for anything else).
func (n *inotify) depth(dir string) int {
	rel, err := filepath.Rel(n.root, dir)
	if err != nil || strings.HasPrefix(rel, "..") {
		return -1
	}
	if rel == "." {
		return 0
	}
	return strings.Count(rel, "/") + 1
}

// key is a task directory's "project/ID".
func (n *inotify) key(dir string) string {
	rel, _ := filepath.Rel(n.root, dir)
	parts := strings.Split(rel, "/")
	if len(parts) != 3 {
		return rel
	}
	return parts[0] + "/" + parts[2]
}

// addWatch watches one more directory; false as for addWatches.
func (n *inotify) addWatch(d string) bool {
	if n.added[d] {
		return true
	}
	wd, err := syscall.InotifyAddWatch(n.fd, d, inotifyMask)
	if err != nil {
		return err == syscall.ENOENT || err == syscall.ENOTDIR
	}
	n.added[d] = true
	n.byWD[int32(wd)] = d
	return true
}

// addWatches watches every directory that matters now; false when the
// kernel refuses one for another reason than its being gone (out of
// watches). Each directory is watched before it is listed: what is made
// in it after the watch is told by an event, what was made before is in
// the listing. Listed first and watched after, a directory made between
// the two (a project's tasks/ made as the project's own event is handled)
// was seen by neither, and nothing in it was told again.
func (n *inotify) addWatches() bool {
	projects, ok := n.watchAndList(n.root)
	if !ok {
		return false
	}
	for _, p := range projects {
		if !p.IsDir() || strings.HasPrefix(p.Name(), ".") {
			continue
		}
		if !n.addProject(filepath.Join(n.root, p.Name())) {
			return false
		}
	}
	return true
}

// addProject watches a project's directory, its tasks/ and every task
// directory in it, each watched before it is listed (see addWatches);
// false as for addWatches.
func (n *inotify) addProject(projectDir string) bool {
	if !n.addWatch(projectDir) {
		return false
	}
	tasksDir := filepath.Join(projectDir, "tasks")
	tasks, ok := n.watchAndList(tasksDir)
	if !ok {
		return false
	}
	for _, t := range tasks {
		if t.IsDir() && !strings.HasPrefix(t.Name(), ".") && !n.addWatch(filepath.Join(tasksDir, t.Name())) {
			return false
		}
	}
	return true
}

// watchAndList watches dir and then lists it, in this order (see
// addWatches); false as for addWatches.
func (n *inotify) watchAndList(dir string) ([]os.DirEntry, bool) {
	if !n.addWatch(dir) {
		return nil, false
	}
	if TestHookWatched != nil {
		TestHookWatched(dir)
	}
	entries, _ := os.ReadDir(dir)
	return entries, true
}
