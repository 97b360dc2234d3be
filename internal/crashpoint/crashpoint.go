// Package crashpoint kills the controller at a named point of its work,
// when a test asks for it: the tests prove that a controller killed
// anywhere loses nothing and runs nothing twice.
package crashpoint

import (
	"os"
	"sync"
	"syscall"
)

// Env names the environment variable that makes a controller kill itself
// with SIGKILL the first time it reaches the named point. Unset (always,
// outside tests), crash points do nothing.
const Env = "DISPATCH_CRASH_AT"

// Crash points.
const (
	AfterPull    = "tick:after-pull"      // statuses pulled, nothing written
	AfterApply   = "tick:after-apply"     // statuses applied, nothing claimed
	AfterClaim   = "launch:after-claim"   // claimed in the database, nothing pushed
	AfterPush    = "launch:after-push"    // base trees pushed and the launch document built, launch not called
	AfterRun     = "launch:after-run"     // the wrapper started the batch, the starts not recorded
	MidCollect   = "collect:mid"          // output fetched, the manifest not recorded
	MidFetch     = "collect:mid-fetch"    // part of a task's commits read into the operator's repository
	AfterImport  = "collect:after-import" // a task's branch set, its attempt not marked collected
	BeforeFinish = "finish:before-done"   // report written, project not marked done
	AfterArchive = "run:after-archive"    // a new run's files archived on disk, the run not begun in the database
	MidPrune     = "prune:mid"            // a pruned run's node directories and files removed, its rows not
)

var once sync.Once

// At kills the process with SIGKILL when Env names point.
func At(point string) {
	if os.Getenv(Env) != point {
		return
	}
	once.Do(func() {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // SIGKILL is not delivered synchronously
	})
}
