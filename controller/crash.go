package controller

import (
	"os"
	"sync"
	"syscall"
)

// CrashEnv names the environment variable that makes a controller kill
// itself with SIGKILL the first time it reaches the named point, so tests can
// prove that a controller killed anywhere loses nothing and runs nothing
// twice. Unset (always, outside tests), crash points do nothing.
const CrashEnv = "DISPATCH_CRASH_AT"

// Crash points.
const (
	CrashAfterPull    = "tick:after-pull"      // statuses pulled, nothing written
	CrashAfterApply   = "tick:after-apply"     // statuses applied, nothing claimed
	CrashAfterClaim   = "launch:after-claim"   // claimed in the database, nothing pushed
	CrashAfterPush    = "launch:after-push"    // base trees pushed and the launch document built, launch not called
	CrashAfterRun     = "launch:after-run"     // the wrapper started the batch, the starts not recorded
	CrashMidCollect   = "collect:mid"          // output fetched, the manifest not recorded
	CrashMidFetch     = "collect:mid-fetch"    // part of a task's commits read into the operator's repository
	CrashAfterImport  = "collect:after-import" // a task's branch set, its attempt not marked collected
	CrashBeforeFinish = "finish:before-done"   // report written, project not marked done
	CrashAfterArchive = "run:after-archive"    // a new run's files archived on disk, the run not begun in the database
)

var crashOnce sync.Once

func crashPoint(point string) {
	if os.Getenv(CrashEnv) != point {
		return
	}
	crashOnce.Do(func() {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // SIGKILL is not delivered synchronously
	})
}
