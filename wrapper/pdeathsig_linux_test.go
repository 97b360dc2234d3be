package wrapper

import (
	"syscall"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/internal/wtest"
	"github.com/dispatch-tool/dispatch/wrapper/proc"
)

// TestToolDiesWithItsSupervisor: on Linux a supervisor killed with SIGKILL
// takes its tool with it (PR_SET_PDEATHSIG), so no retry runs beside it.
func TestToolDiesWithItsSupervisor(t *testing.T) {
	t.Parallel()
	tk := newTask(t, "", wire.Launch{Command: []string{"sleep", "60"}})
	tk.run(t, "")
	st := tk.waitStatus(t, "tool_pid", func(st *wire.Status) bool { return st.ToolPID > 1 && st.PID > 1 })
	if !proc.GroupAlive(st.ToolPID) {
		t.Fatal("the tool died before its supervisor")
	}
	if err := syscall.Kill(st.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	wtest.Poll(t, 10*time.Second, "the tool to die with its supervisor", func() bool { return !proc.GroupAlive(st.ToolPID) })
}
