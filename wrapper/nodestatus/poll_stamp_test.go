package nodestatus

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/wrapper/taskfiles"
)

// pollRoot is a work directory with project p's task directories ids, each
// with a final status of attempt 1.
func pollRoot(t *testing.T, ids ...string) (root string, write func(id, status string)) {
	t.Helper()
	root = t.TempDir()
	write = func(id, status string) {
		t.Helper()
		dir := filepath.Join(root, "p", "tasks", id)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := taskfiles.WriteFileAtomic(filepath.Join(dir, taskfiles.FileStatus), []byte(status), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range ids {
		write(id, `{"status":"completed","attempt":1}`)
	}
	return root, write
}

// TestPollWalksAfterAStampTooCoarseToTell: where the file system stamps
// whole seconds (HFS+, ext3, ext4 with small inodes), the live index can
// be marked and unmarked again within the second of the poll before and
// look unchanged: an index changed within its stamp's grain is walked
// again at the next poll (as git's racily clean entries), so an attempt
// that started and ended meanwhile is told at once, not by the full look.
func TestPollWalksAfterAStampTooCoarseToTell(t *testing.T) {
	root, write := pollRoot(t, "T0", "T3")
	dirOf := func(id string) string { return filepath.Join(root, "p", "tasks", id) }
	idx := filepath.Join(root, "p", "tasks", DirLive)
	second := time.Now().Truncate(time.Second)
	coarse := func() {
		t.Helper()
		if err := os.Chtimes(idx, second, second); err != nil {
			t.Fatal(err)
		}
	}
	if err := MarkLive(dirOf("T0"), 1); err != nil {
		t.Fatal(err)
	}
	UnmarkLive(dirOf("T0"), 1)
	sc := NewScanner(root)
	sc.Prime()
	if err := MarkLive(dirOf("T0"), 2); err != nil {
		t.Fatal(err)
	}
	UnmarkLive(dirOf("T0"), 2)
	coarse()
	sc.ScanLive()
	lock, ok, err := taskfiles.LockTask(dirOf("T3"), 0)
	if err != nil || !ok {
		t.Fatalf("lock: %v %v", ok, err)
	}
	if err := MarkLive(dirOf("T3"), 2); err != nil {
		t.Fatal(err)
	}
	write("T3", `{"status":"running","attempt":2}`)
	write("T3", `{"status":"failed","attempt":2}`)
	UnmarkLive(dirOf("T3"), 2)
	lock.Close()
	coarse()
	if got := sc.ScanLive(); !slices.Equal(got, []string{"p/T3"}) {
		t.Fatalf("the poll after an attempt made and ended within the index's second told %v, want [p/T3]", got)
	}
	if !racyStamp(second.UnixNano(), second.Add(1900*time.Millisecond)) || racyStamp(second.UnixNano(), second.Add(2100*time.Millisecond)) ||
		!racyStamp(second.UnixNano()+5, second.Add(10*time.Millisecond)) || racyStamp(second.UnixNano()+5, second.Add(30*time.Millisecond)) ||
		!racyStamp(second.UnixNano()+5, second.Add(-time.Hour)) || racyStamp(0, second) {
		t.Error("racyStamp: want whole seconds racy for 2 s, finer stamps for 20 ms, a stamp ahead of now racy, none never")
	}
}

// TestPollFollowsWhatPrimeSawNamed: the first poll looks at the tasks the
// index named when the stream started, as at those the last poll saw
// named: a mark removed meanwhile (a `kill` ending a dead supervisor's
// attempt), in an index whose stamp did not change, is told.
func TestPollFollowsWhatPrimeSawNamed(t *testing.T) {
	root, write := pollRoot(t)
	write("T1", `{"status":"running","attempt":1}`)
	dir := filepath.Join(root, "p", "tasks", "T1")
	if err := MarkLive(dir, 1); err != nil {
		t.Fatal(err)
	}
	idx := filepath.Join(root, "p", "tasks", DirLive)
	old := time.Now().Add(-time.Minute)
	if err := os.Chtimes(idx, old, old); err != nil {
		t.Fatal(err)
	}
	sc := NewScanner(root)
	sc.Prime()
	write("T1", `{"status":"killed","attempt":1}`)
	UnmarkLive(dir, 1)
	if err := os.Chtimes(idx, old, old); err != nil {
		t.Fatal(err)
	}
	if got := sc.ScanLive(); !slices.Equal(got, []string{"p/T1"}) {
		t.Fatalf("the first poll told %v, want [p/T1]", got)
	}
}
