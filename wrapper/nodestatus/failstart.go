package nodestatus

import (
	"os"
	"time"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/taskfiles"
)

// FailStart writes the failed status (class start: another try may work)
// of attempt of task in dir, handed to a supervisor that could not start
// it, replacing the earlier attempt's (the controller has it), and takes
// it out of the live index, as the end of an attempt does. version is the
// wrapper's.
func FailStart(dir, task string, attempt int, version string, err error) {
	now := taskfiles.Timestamp(time.Now())
	st := wire.Status{Task: task, Attempt: attempt, Status: wire.StatusFailed, PID: os.Getpid(),
		StartedAt: now, CompletedAt: now, ExitCode: -1, ErrorClass: wire.ClassStart,
		Error: "the attempt did not start on the node: " + err.Error(), WrapperVersion: version}
	st.Clamp()
	if werr := taskfiles.WriteStatusDurable(dir, &st); werr != nil {
		taskfiles.LogWrapper(dir, "attempt %d not started (%v), and its status not written: %v", attempt, err, werr)
		return
	}
	UnmarkLive(dir, attempt)
}
