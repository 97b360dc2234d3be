package nodestatus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/proc"
	"github.com/dispatch-tool/dispatch/wrapper/taskfiles"
)

// `watch --root W [--beat D]` is the controller's status stream: it runs as
// long as its stdin stays open (the SSH session that started it) and prints
// one JSON frame a line:
//
//	{"type":"hello","version":"…"}                  once, first, when it
//	                                                 watches
//	{"type":"change","tasks":["demo/S01", …]}        as soon as a task's
//	                                                 status.json is replaced,
//	                                                 or its supervisor dies
//	{"type":"beat"}                                  every --beat (5s)
//
// A change frame only says where to look: the controller pulls `status` to
// learn what changed. On Linux inotify tells of new status files at once;
// elsewhere, or when inotify is out of watches, every 100 ms a project whose
// live index changed is looked at whole and the others where the index says
// (see scanner.ScanLive); a new project is watched and looked at alone.
// Whether each live supervisor still holds its lock is looked at every
// second (the kernel tells nobody when a lock is released; every 100 ms
// without inotify), every lock every 30 seconds (see fullLiveEvery), at the
// start the locks of the live index's tasks (see Prime).

// FrameTasks caps the tasks of one change frame: a status.json is read up
// to 64 KiB, and a frame must stay well under the controller's line limit
// (1 MiB). More changes make more frames.
const FrameTasks = 8

const (
	// DefaultBeat is how often `watch` says it is alive.
	DefaultBeat = 5 * time.Second
	// pollScan is how often the live task directories are looked at
	// without inotify.
	pollScan = 100 * time.Millisecond
	// liveScan is how often every task directory is looked at and every
	// supervisor's lock probed; between those looks, a file event makes a
	// look at the task directories it names only.
	liveScan = time.Second
	// coalesce gathers a burst of file events into one look.
	coalesce = 5 * time.Millisecond
	// MinChangeGap is the shortest time between two looks that file
	// events cause.
	MinChangeGap = 50 * time.Millisecond
	// fullLiveEvery is how many of the once-a-second looks pass between
	// two that look at every task directory and probe every lock. The
	// others probe the locks of the supervisors the last look found alive,
	// the only ones that can die unannounced: a supervisor that starts
	// writes its status.json, or makes its lock file, and the event names
	// its task (without file events, the poll looks at what the live index
	// names, where its launch marked it). A node keeps every task directory
	// its projects ran, and probing them all each second made the work of a
	// batch grow with the square of its tasks.
	fullLiveEvery = 30
)

// Watch prints frames to out until ctx ends or a write fails. notify uses
// the platform's file notifications where there are some; without, it
// polls. A change of another node's attempt than node's is not told (see
// owner.go).
func Watch(ctx context.Context, version, root, node string, beat time.Duration, out io.Writer, notify bool) error {
	var mu sync.Mutex
	enc := json.NewEncoder(out)
	send := func(f wire.Frame) error {
		mu.Lock()
		defer mu.Unlock()
		return enc.Encode(f)
	}
	sc := NewScanner(root)
	var events <-chan struct{}
	var take func() dirChange
	if notify {
		var closeNotifier func()
		events, take, closeNotifier = newNotifier(root)
		defer closeNotifier()
	}
	sc.Prime() // the starting point: no frame for what already is
	// hello says that every change from now on will be told.
	if err := send(wire.Frame{Type: wire.FrameHello, Version: version}); err != nil {
		return err
	}

	beats := time.NewTicker(beat)
	defer beats.Stop()
	live := time.NewTicker(liveScan)
	defer live.Stop()
	var poll <-chan time.Time
	if events == nil {
		t := time.NewTicker(pollScan)
		defer t.Stop()
		poll = t.C
	}
	var lastLook time.Time
	liveLooks := 0
	report := func(changed []string) error {
		changed = slices.DeleteFunc(changed, func(key string) bool {
			project, task, _ := strings.Cut(key, "/")
			return sc.othersTask(node, key, filepath.Join(root, project, "tasks", task))
		})
		for len(changed) > 0 {
			n := min(len(changed), FrameTasks)
			f := wire.Frame{Type: wire.FrameChange, Tasks: changed[:n]}
			for _, key := range f.Tasks {
				f.Statuses = append(f.Statuses, sc.status(key))
			}
			if err := send(f); err != nil {
				return err
			}
			changed = changed[n:]
		}
		return nil
	}
	for {
		var err error
		select {
		case <-ctx.Done():
			return nil
		case <-beats.C:
			err = send(wire.Frame{Type: wire.FrameBeat})
		case <-live.C:
			// What the events (or the polls) did not say (a lock
			// released, taken) is found here, once a second: at the live
			// supervisors, and every fullLiveEvery-th time at every
			// directory and lock.
			liveLooks++
			if liveLooks%fullLiveEvery != 0 {
				err = report(sc.scanAlive())
			} else {
				err = report(sc.Scan(true))
			}
		case <-poll:
			err = report(sc.ScanLive())
		case _, ok := <-events:
			if !ok {
				// inotify failed: look every 100 ms from now on.
				events = nil
				t := time.NewTicker(pollScan)
				defer t.Stop()
				poll = t.C
				continue
			}
			// A burst of events (a rename is several) makes one look,
			// and looks come at most every MinChangeGap: a task that
			// rewrites its status.json in a loop gets no more.
			time.Sleep(max(coalesce, MinChangeGap-time.Since(lastLook)))
			drain(events)
			lastLook = time.Now()
			if c := take(); c.all {
				err = report(sc.Scan(false))
			} else {
				err = report(sc.ScanKeys(c.keys, c.projects))
			}
		}
		if err != nil {
			return fmt.Errorf("watch: write a frame: %w", err)
		}
	}
}

func drain(c <-chan struct{}) {
	for {
		select {
		case <-c:
		default:
			return
		}
	}
}

// scanner remembers, per task directory, what its status.json was and
// whether its supervisor lived, and says which changed.
type scanner struct {
	root  string
	mu    sync.Mutex
	Known map[string]taskSeen // by "project/task"
	// primed is set after the first scan, the starting point: from then
	// on a task directory seen for the first time with a status or a live
	// supervisor is a change too.
	primed bool
	// nodes is the node each task's launch.json names, by "project/task",
	// read again only when launch.json is another file (othersTask).
	nodes map[string]launchSeen
	// projects are the project directories the last walk or poll saw; a
	// poll walks a new one whole (ScanLive). index is what each project's
	// live index directory was at the last poll, named the tasks it named.
	projects map[string]bool
	index    map[string]indexStamp
	named    map[string]bool
	// clock is the time the polls go by (tests move it as polls would).
	clock func() time.Time
}

// indexStamp is what a poll saw of a live index directory: its version,
// when (by this node's monotonic clock) a poll first saw that version, and
// whether it changed too recently for its time stamp to tell a change that
// follows (racyStamp), when the next poll walks its project whatever it
// sees.
type indexStamp struct {
	seen  fileSeen
	first time.Time
	racy  bool
}

// launchSeen is the node a version of launch.json names.
type launchSeen struct {
	launch fileSeen
	node   string
}

type taskSeen struct {
	status fileSeen
	alive  bool
	// lockErr is why the lock could not be probed ("" when it was).
	lockErr string
}

// fileSeen identifies one version of a file: a rename replaces its inode.
type fileSeen struct {
	ino, size, mtime int64
}

func NewScanner(root string) *scanner {
	return &scanner{root: root, Known: map[string]taskSeen{}, nodes: map[string]launchSeen{}, projects: map[string]bool{}, index: map[string]indexStamp{}, named: map[string]bool{}, clock: time.Now}
}

// Prime records what every task directory under root is now, without a
// frame. It probes only the locks of the tasks the live index names (see
// live.go): a supervisor runs with its marker there (the launch writes it
// before the supervisor starts, the supervisor removes it after its final
// status), and the task directories a node keeps of the projects it ran
// need no lock probe each time a controller starts watching. One whose
// marker a task removed is found by the next look at every lock
// (fullLiveEvery).
func (s *scanner) Prime() {
	s.mu.Lock()
	defer s.mu.Unlock()
	projects, _ := os.ReadDir(s.root)
	for _, p := range projects {
		if !p.IsDir() || strings.HasPrefix(p.Name(), ".") {
			continue
		}
		s.projects[p.Name()] = true
		s.index[p.Name()] = indexSeen(filepath.Join(s.root, p.Name(), "tasks", DirLive), indexStamp{}, s.clock())
		live, all := liveIndex(filepath.Join(s.root, p.Name(), "tasks"))
		walkProject(s.root, p.Name(), func(key, dir string) {
			_, id, _ := strings.Cut(key, "/")
			if all || live[id] {
				s.look(key, dir, true)
				return
			}
			s.Known[key] = taskSeen{status: statSeen(filepath.Join(dir, taskfiles.FileStatus))}
		})
	}
	s.primed = true
}

// Scan looks at every task directory under root and returns the tasks
// whose status.json changed since the last scan (and, with probeLive,
// whose supervisor died or appeared), sorted.
func (s *scanner) Scan(probeLive bool) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := map[string]bool{}
	var changed []string
	walkTaskDirs(s.root, func(key, dir string) {
		seen[key] = true
		if s.look(key, dir, probeLive) {
			changed = append(changed, key)
		}
	})
	s.projects = map[string]bool{}
	for key := range seen {
		project, _, _ := strings.Cut(key, "/")
		s.projects[project] = true
	}
	s.primed = true
	for key := range s.Known {
		if !seen[key] {
			s.forget(key)
		}
	}
	sort.Strings(changed)
	return changed
}

// dirChange is what file events named: the tasks (project/ID) whose
// status file changed or whose directory came or went, the projects (or
// their tasks/) made, all when anything higher went (or the kernel
// dropped events), and the new task directories to watch.
type dirChange struct {
	all      bool
	keys     map[string]bool
	projects map[string]bool
	newDirs  []string
}

func newDirChange() dirChange {
	return dirChange{keys: map[string]bool{}, projects: map[string]bool{}}
}

// ScanKeys looks at the named task directories and at every task
// directory of the named projects only, and returns those whose
// status.json, supervisor (or presence) changed, sorted; a directory gone
// is forgotten.
func (s *scanner) ScanKeys(keys, projects map[string]bool) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.scanKeys(keys, projects)
}

// ScanLive is the poll's look, where no file event tells what changed (a
// Darwin node, or inotify out of watches). A project whose live index
// (tasks/.live) changed since the last poll — an attempt started or ended:
// its launch marks it there, its supervisor removes the mark once its
// final status is written — or that is new, or whose index cannot be read,
// is looked at whole, as before: an attempt that started and ended between
// two polls left no mark to follow. The others are looked at only where
// the index says now or said at the last poll, and where a supervisor was
// alive at the last look: a node keeps every task directory its projects
// ran, and looking at all of them every 100 ms while nothing started or
// ended (agent tasks run for minutes) took half a core with 10,000. What no
// mark tells (a task's own doing, an older wrapper's supervisor) is found
// by the full look every fullLiveEvery seconds, as with file events.
func (s *scanner) ScanLive() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	entries, _ := os.ReadDir(s.root)
	projects, walk := map[string]bool{}, map[string]bool{}
	index := map[string]indexStamp{}
	keys := map[string]bool{}
	named := map[string]bool{}
	for _, p := range entries {
		name := p.Name()
		if !p.IsDir() || strings.HasPrefix(name, ".") || !ValidName(name) {
			continue
		}
		projects[name] = true
		tasksDir := filepath.Join(s.root, name, "tasks")
		last := s.index[name]
		index[name] = indexSeen(filepath.Join(tasksDir, DirLive), last, s.clock())
		ids, all := liveIndex(tasksDir)
		if all || !s.projects[name] || last.racy || index[name].seen != last.seen {
			walk[name] = true
		}
		for id := range ids {
			if !strings.HasPrefix(id, ".") { // a temporary file of MarkLive
				named[name+"/"+id] = true
			}
		}
	}
	// A lock is probed when its task is newly named (a launch marks its
	// attempt with the lock held) or its supervisor was alive at the last
	// look (it ends, or dies, any moment); one named at the last poll too
	// is probed when its status changes, so that a task's flood of marks
	// costs the poll a stat each, no lock.
	for key := range s.named {
		keys[key] = false
	}
	for key, seen := range s.Known {
		if seen.alive {
			keys[key] = true
		}
	}
	for key := range named {
		keys[key] = keys[key] || !s.named[key]
	}
	s.projects, s.index, s.named = projects, index, named
	return s.scanKeys(keys, walk)
}

// indexSeen is what a poll sees at now (taken before the look) of the live
// index directory at path, last what the poll before saw. Looked at before
// it is listed: a mark made or removed after this is a change at the next
// poll.
func indexSeen(path string, last indexStamp, now time.Time) indexStamp {
	st := indexStamp{seen: statSeen(path), first: now}
	if st.seen == last.seen && !last.first.IsZero() {
		st.first = last.first
	}
	st.racy = racyStamp(st.seen.mtime, now, st.first)
	return st
}

// racyStamp reports whether a directory stamped mtime (ns), looked at at
// now and first seen so at first, may change again keeping that stamp (as
// git's "racily clean" index entries): a stamp's grain is a second where
// the file system stamps whole seconds (HFS+, ext3, ext4 with small
// inodes, NFS of those), a clock tick (under 20 ms) otherwise. Racy while
// this node's clock is within two grains of the stamp (a stamp ahead of it
// by no more than a minute, an NFS server's clock ahead, included), and for
// one grain after a poll first saw it (an NFS server's clock behind this
// node's: the grain the stamp names ended at most one grain after it was
// first seen). A stamp further ahead is not believed: a task's `touch -d
// 2099` would make its project walked at every poll for good.
func racyStamp(mtime int64, now, first time.Time) bool {
	if mtime == 0 {
		return false
	}
	grain := 20 * time.Millisecond
	if mtime%int64(time.Second) == 0 {
		grain = time.Second
	}
	age := now.Sub(time.Unix(0, mtime))
	return (age > -time.Minute && age < 2*grain) || now.Sub(first) < grain
}

// scanKeys is ScanKeys with s.mu held; a key's lock is probed when its
// value is true, else only when its status changed (as look does).
func (s *scanner) scanKeys(keys, projects map[string]bool) []string {
	var changed []string
	for project := range projects {
		if !ValidName(project) || strings.HasPrefix(project, ".") {
			continue
		}
		walkProject(s.root, project, func(key, dir string) {
			if _, named := keys[key]; !named && s.look(key, dir, false) {
				changed = append(changed, key)
			}
		})
	}
	for key, probe := range keys {
		project, task, ok := strings.Cut(key, "/")
		if !ok || !ValidName(project) || !ValidName(task) {
			continue
		}
		dir := filepath.Join(s.root, project, "tasks", task)
		if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() {
			s.forget(key)
			continue
		}
		// The event may be the lock file's (a supervisor starting, or
		// ending): its lock is probed.
		if s.look(key, dir, probe) {
			changed = append(changed, key)
		}
	}
	sort.Strings(changed)
	return changed
}

// scanAlive looks at the task directories whose supervisor was alive at
// their last look, probing their locks, and returns those that changed,
// sorted; a directory gone is forgotten.
func (s *scanner) scanAlive() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var changed []string
	for key, seen := range s.Known {
		if !seen.alive {
			continue
		}
		project, task, _ := strings.Cut(key, "/")
		dir := filepath.Join(s.root, project, "tasks", task)
		if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() {
			s.forget(key)
			continue
		}
		if s.look(key, dir, true) {
			changed = append(changed, key)
		}
	}
	sort.Strings(changed)
	return changed
}

// look records what dir's status and supervisor are now, probing the lock
// when probeLive is set or the directory is new or its status changed,
// and reports whether that is a change. A change is always probed: the
// frame that tells it takes the probe from here (scanner.probe).
func (s *scanner) look(key, dir string, probeLive bool) bool {
	old, had := s.Known[key]
	now := taskSeen{status: statSeen(filepath.Join(dir, taskfiles.FileStatus)), alive: old.alive, lockErr: old.lockErr}
	if probeLive || !had || now.status != old.status {
		alive, err := taskfiles.SupervisorAlive(dir)
		now.alive, now.lockErr = alive, ""
		if err != nil {
			now.lockErr = err.Error()
		}
	}
	s.Known[key] = now
	return had && now != old || !had && s.primed && now != (taskSeen{})
}

// forget drops what the scanner knows of key, a directory gone.
func (s *scanner) forget(key string) {
	delete(s.Known, key)
	delete(s.nodes, key)
}

// othersTask is proc.OthersTask for the task key in dir, launch.json read
// only when it is not the file read last time (each attempt's launch
// writes a new one): a change frame read it for every task it named.
func (s *scanner) othersTask(node, key, dir string) bool {
	if node == "" {
		return false
	}
	now := statSeen(filepath.Join(dir, taskfiles.FileLaunch))
	s.mu.Lock()
	seen, ok := s.nodes[key]
	s.mu.Unlock()
	if !ok || seen.launch != now || now == (fileSeen{}) {
		seen = launchSeen{launch: now, node: proc.TaskNode(dir)}
		s.mu.Lock()
		s.nodes[key] = seen
		s.mu.Unlock()
	}
	return seen.node != "" && seen.node != node
}

// status is what a change frame tells of key. The look that found the
// change probed the lock, before it looked at status.json; that probe
// holds for the status read here only when it is still the version that
// look saw (the fstat of the file read). Otherwise another attempt may have
// taken the lock and written its status since: a probe of "no supervisor"
// beside a newer "running" would read as a supervisor gone, and the
// controller would fail a live attempt. The lock is then probed again and
// the status read after it, as taskStatus does.
func (s *scanner) status(key string) wire.TaskStatus {
	project, task, _ := strings.Cut(key, "/")
	dir := filepath.Join(s.root, project, "tasks", task)
	st, v, err := taskfiles.ReadStatusVersion(dir)
	s.mu.Lock()
	seen := s.Known[key]
	s.mu.Unlock()
	if (fileSeen{ino: v.Ino, size: v.Size, mtime: v.Mtime}) != seen.status {
		return taskStatus(project, task, dir)
	}
	p := lockProbe{alive: seen.alive}
	if seen.lockErr != "" {
		p.err = errors.New(seen.lockErr)
	}
	return taskStatusAfter(project, task, dir, p, st, err)
}

// walkTaskDirs calls task for every <project>/tasks/<ID> directory under
// root. Hidden names (.bin) are skipped.
func walkTaskDirs(root string, task func(key, dir string)) {
	projects, _ := os.ReadDir(root)
	for _, p := range projects {
		if p.IsDir() && !strings.HasPrefix(p.Name(), ".") {
			walkProject(root, p.Name(), task)
		}
	}
}

// walkProject calls task for every tasks/<ID> directory of project.
func walkProject(root, project string, task func(key, dir string)) {
	tasksDir := filepath.Join(root, project, "tasks")
	tasks, err := os.ReadDir(tasksDir)
	if err != nil {
		return
	}
	for _, t := range tasks {
		if t.IsDir() && !strings.HasPrefix(t.Name(), ".") {
			task(project+"/"+t.Name(), filepath.Join(tasksDir, t.Name()))
		}
	}
}

// statSeen describes path without following a link; a missing or odd file
// is the zero value, which differs from any real one.
func statSeen(path string) fileSeen {
	fi, err := os.Lstat(path)
	if err != nil {
		return fileSeen{}
	}
	fs := fileSeen{size: fi.Size(), mtime: fi.ModTime().UnixNano()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		fs.ino = int64(st.Ino)
	}
	return fs
}
