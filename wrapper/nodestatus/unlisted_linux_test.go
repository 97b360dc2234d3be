package nodestatus

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/dispatch-tool/dispatch/wire"
)

// TestStatusNamesAnUnreadableTasksDirUnlisted: a task that makes its project's
// tasks/ unreadable (chmod 000 of the directory above its own, as an
// unconfined task can; or r-- or --x) fails neither listing of the node:
// the other projects are listed as usual, and that one is named unlisted,
// with its directory and why, so that the controller takes its tasks for
// unknown, not gone. A tasks/ whose names can be read but not looked into
// (r--) is unlisted too: its tasks would read as tasks without a status.
// What can still be read is listed (--x: the live index and the named
// tasks, in a live call).
func TestStatusNamesAnUnreadableTasksDirUnlisted(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		mode     os.FileMode
		live     bool
		tasks    string
		unlisted bool
	}{
		{"full listing, 000", 0, false, "b/T1", true},
		{"full listing, r--", 0o400, false, "b/T1", true},
		{"full listing, --x", 0o100, false, "b/T1", true},
		{"live listing, 000", 0, true, "b/T1", true},
		{"live listing, r--", 0o400, true, "b/T1", true},
		{"live listing, --x: index and named tasks read", 0o100, true, "a/T1 b/T1", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			root := t.TempDir()
			runningInTwoProjects(t, root)
			tasks := filepath.Join(root, "a", "tasks")
			if err := os.Chmod(tasks, tc.mode); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.Chmod(tasks, 0o700) })
			var ns *wire.NodeStatus
			var err error
			if e := withoutFileCapabilities(tasks, func() {
				if tc.live {
					ns, err = LiveStatus(t.Context(), "v", root, "", nil, map[string][]string{"a": {"T1"}}, nil)
				} else {
					ns, err = NodeStatus(t.Context(), "v", root, "", nil)
				}
			}); e != nil {
				t.Fatal(e)
			}
			if err != nil {
				t.Fatalf("status with a/tasks mode %o: %v; want the other projects listed and a named unlisted", tc.mode, err)
			}
			var got []string
			for _, ts := range ns.Tasks {
				got = append(got, ts.Project+"/"+ts.Task)
			}
			if strings.Join(got, " ") != tc.tasks {
				t.Errorf("listed %q, want %q", strings.Join(got, " "), tc.tasks)
			}
			if !tc.unlisted {
				if len(ns.Unlisted) != 0 {
					t.Errorf("unlisted %+v, want none (all that was asked could be read)", ns.Unlisted)
				}
				return
			}
			if len(ns.Unlisted) != 1 || ns.Unlisted[0].Project != "a" || ns.Unlisted[0].Dir != tasks ||
				!strings.Contains(ns.Unlisted[0].Error, "permission denied") {
				t.Errorf("unlisted %+v, want project a, dir %s, permission denied", ns.Unlisted, tasks)
			}
		})
	}
}

// withoutFileCapabilities calls f on a thread without the capabilities
// that let root read what a mode refuses (see unreadableTo), after it
// checked that dir cannot be listed or looked into from there.
func withoutFileCapabilities(dir string, f func()) error {
	done := make(chan error)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		if err := dropFileCapabilities(); err != nil {
			done <- err
			return
		}
		_, listErr := os.ReadDir(dir)
		_, searchErr := os.Lstat(dir + "/.")
		if listErr == nil && searchErr == nil {
			done <- fmt.Errorf("%s can still be listed and looked into: the test shows nothing", dir)
			return
		}
		f()
		done <- nil
	}()
	return <-done
}
