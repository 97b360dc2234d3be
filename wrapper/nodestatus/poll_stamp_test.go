package nodestatus

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/wrapper/taskfiles"
)

// pollTest is a work directory with project p and a scanner over it whose
// clock moves on by a poll's interval at each poll.
type pollTest struct {
	t    *testing.T
	root string
	sc   *scanner
	by   time.Duration
}

func newPollTest(t *testing.T, ids ...string) *pollTest {
	t.Helper()
	pt := &pollTest{t: t, root: t.TempDir()}
	for _, id := range ids {
		pt.write("p", id, `{"status":"completed","attempt":1}`)
	}
	return pt
}

func (pt *pollTest) dir(project, id string) string {
	return filepath.Join(pt.root, project, "tasks", id)
}

func (pt *pollTest) write(project, id, status string) {
	pt.t.Helper()
	if err := os.MkdirAll(pt.dir(project, id), 0o755); err != nil {
		pt.t.Fatal(err)
	}
	if err := taskfiles.WriteFileAtomic(filepath.Join(pt.dir(project, id), taskfiles.FileStatus), []byte(status), 0o644); err != nil {
		pt.t.Fatal(err)
	}
}

// prime starts the scanner, as a stream does.
func (pt *pollTest) prime() {
	pt.sc = NewScanner(pt.root)
	pt.sc.clock = func() time.Time { return time.Now().Add(pt.by) }
	pt.sc.Prime()
}

// poll is the next poll, pollScan after the one before.
func (pt *pollTest) poll() []string {
	pt.by += pollScan
	return pt.sc.ScanLive()
}

func (pt *pollTest) want(what string, got []string, keys ...string) {
	pt.t.Helper()
	if !slices.Equal(got, keys) && !(len(got) == 0 && len(keys) == 0) {
		pt.t.Fatalf("%s: the poll told %v, want %v", what, got, keys)
	}
}

// launch marks attempt of p's task id live with its lock held, as a launch
// does.
func (pt *pollTest) launch(id string, attempt int) *os.File {
	pt.t.Helper()
	lock, ok, err := taskfiles.LockTask(pt.dir("p", id), 0)
	if err != nil || !ok {
		pt.t.Fatalf("lock: %v %v", ok, err)
	}
	if err := MarkLive(pt.dir("p", id), attempt); err != nil {
		pt.t.Fatal(err)
	}
	return lock
}

// TestPollLooksWhereTheLiveIndexSays: without file events (a Darwin node,
// inotify out of watches), the 100 ms poll looked at every task directory
// the node ever ran — half a core with 10,000 — and now walks a project
// only when its live index changed (an attempt started or ended) and looks
// otherwise where the index says, where it said at the last poll, and at
// the supervisors alive; what no mark tells waits for the full look.
func TestPollLooksWhereTheLiveIndexSays(t *testing.T) {
	pt := newPollTest(t)
	for i := range 200 {
		pt.write("p", "T"+strconv.Itoa(i), `{"status":"completed","attempt":1}`)
	}
	if err := MarkLive(pt.dir("p", "T0"), 1); err != nil { // an index to look at
		t.Fatal(err)
	}
	UnmarkLive(pt.dir("p", "T0"), 1)
	pt.prime()
	pt.poll() // the first poll after the index changed walks it

	pt.write("p", "T1", `{"status":"failed","attempt":1}`) // no mark: the task's own doing
	pt.want("a status no mark tells, the index as it was", pt.poll())
	lock := pt.launch("T2", 2)
	pt.write("p", "T2", `{"status":"running","attempt":2}`)
	pt.want("a launch (its mark changed the index: the project is walked)", pt.poll(), "p/T1", "p/T2")
	pt.want("nothing new", pt.poll())
	pt.write("p", "T2", `{"status":"completed","attempt":2}`)
	pt.want("a final status, the mark still there", pt.poll(), "p/T2")
	lock.Close()
	pt.want("its lock released (a supervisor alive at the last look)", pt.poll(), "p/T2")
	UnmarkLive(pt.dir("p", "T2"), 2)
	pt.want("its mark removed", pt.poll())
	// An attempt that starts and ends between two polls.
	lock = pt.launch("T3", 2)
	pt.write("p", "T3", `{"status":"running","attempt":2}`)
	pt.write("p", "T3", `{"status":"failed","attempt":2}`)
	lock.Close()
	UnmarkLive(pt.dir("p", "T3"), 2)
	pt.want("an attempt that ended between two polls", pt.poll(), "p/T3")

	pt.write("q", "Q1", `{"status":"running","attempt":1}`)
	pt.want("a new project", pt.poll(), "q/Q1")
	if err := os.WriteFile(filepath.Join(pt.root, "q", "tasks", DirLive), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	pt.write("q", "Q1", `{"status":"completed","attempt":1}`)
	pt.want("a project whose live index is not a directory (walked whole)", pt.poll(), "q/Q1")
	pt.write("p", "T4", `{"status":"failed","attempt":1}`)
	pt.want("the full look", pt.sc.Scan(true), "p/T4")
}

// TestPollWalksAfterAStampTooCoarseToTell: where the file system stamps
// whole seconds (HFS+, ext3, ext4 with small inodes), the live index can
// be marked and unmarked again within the second of the poll before and
// look unchanged: an index changed within its stamp's grain is walked
// again at the next poll (as git's racily clean entries), so an attempt
// that started and ended meanwhile is told at once, not by the full look.
func TestPollWalksAfterAStampTooCoarseToTell(t *testing.T) {
	pt := newPollTest(t, "T0", "T3")
	idx := filepath.Join(pt.root, "p", "tasks", DirLive)
	second := time.Now().Truncate(time.Second)
	coarse := func() {
		t.Helper()
		if err := os.Chtimes(idx, second, second); err != nil {
			t.Fatal(err)
		}
	}
	if err := MarkLive(pt.dir("p", "T0"), 1); err != nil {
		t.Fatal(err)
	}
	UnmarkLive(pt.dir("p", "T0"), 1)
	pt.prime()
	if err := MarkLive(pt.dir("p", "T0"), 2); err != nil {
		t.Fatal(err)
	}
	UnmarkLive(pt.dir("p", "T0"), 2)
	coarse()
	pt.poll()
	lock := pt.launch("T3", 2)
	pt.write("p", "T3", `{"status":"running","attempt":2}`)
	pt.write("p", "T3", `{"status":"failed","attempt":2}`)
	UnmarkLive(pt.dir("p", "T3"), 2)
	lock.Close()
	coarse()
	pt.want("the poll after an attempt made and ended within the index's second", pt.poll(), "p/T3")
}

// TestFirstPollWalksTheIndexAsTheStreamStarted: a mark removed between the stream's
// start and its first poll (a `kill` ending a dead supervisor's attempt),
// in an index that looks as it did (another mark of a name as long made in
// its place: the size of a tmpfs directory counts its entries), is told:
// a version of the index is racy at the look that first sees it, so the
// first poll walks the project.
func TestFirstPollWalksTheIndexAsTheStreamStarted(t *testing.T) {
	pt := newPollTest(t, "T2")
	pt.write("p", "T1", `{"status":"running","attempt":1}`)
	if err := MarkLive(pt.dir("p", "T1"), 1); err != nil {
		t.Fatal(err)
	}
	idx := filepath.Join(pt.root, "p", "tasks", DirLive)
	old := time.Now().Add(-time.Minute)
	if err := os.Chtimes(idx, old, old); err != nil {
		t.Fatal(err)
	}
	pt.prime()
	before := statSeen(idx)
	pt.write("p", "T1", `{"status":"killed","attempt":1}`)
	UnmarkLive(pt.dir("p", "T1"), 1)
	if err := MarkLive(pt.dir("p", "T2"), 2); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(idx, old, old); err != nil {
		t.Fatal(err)
	}
	if statSeen(idx) != before {
		t.Fatalf("the index's version changed (%+v, was %+v): the test would show nothing", statSeen(idx), before)
	}
	pt.want("the first poll", pt.poll(), "p/T1")
}

// TestRacyStamp: which time stamps of a live index may hide a change.
func TestRacyStamp(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 30, 500_000_000, time.UTC)
	whole := now.Truncate(time.Second).UnixNano()
	fine := now.Add(-5 * time.Millisecond).UnixNano()
	long := now.Add(-time.Hour)
	for _, tc := range []struct {
		name  string
		mtime int64
		first time.Time
		want  bool
	}{
		{"no index", 0, long, false},
		{"a fine stamp 5 ms old", fine, long, true},
		{"a fine stamp 50 ms old", now.Add(-50 * time.Millisecond).UnixNano(), long, false},
		{"a whole second 0.5 s old", whole, long, true},
		{"a whole second 1.5 s old", now.Add(-1400 * time.Millisecond).Truncate(time.Second).UnixNano(), long, true},
		{"a whole second 2.5 s old", now.Add(-2 * time.Second).Truncate(time.Second).UnixNano(), long, false},
		{"a whole second seen first 0.5 s ago (a server's clock behind)", now.Add(-time.Hour).Truncate(time.Second).UnixNano(), now.Add(-500 * time.Millisecond), true},
		{"a whole second seen first 1.5 s ago", now.Add(-time.Hour).Truncate(time.Second).UnixNano(), now.Add(-1500 * time.Millisecond), false},
		{"a fine stamp seen first at this poll", now.Add(-time.Hour).UnixNano() + 7, now, true},
		{"a stamp 30 s ahead (a server's clock ahead)", now.Add(30 * time.Second).UnixNano(), long, true},
		{"a stamp a year ahead (a task's touch -d)", now.AddDate(1, 0, 0).UnixNano(), long, false},
	} {
		if got := racyStamp(tc.mtime, now, tc.first); got != tc.want {
			t.Errorf("%s: racy = %v, want %v", tc.name, got, tc.want)
		}
	}
}
