package controller

import (
	"context"
	"syscall"
	"testing"

	"github.com/dispatch-tool/dispatch/store"
)

func syscallKill(pid int) error { return syscall.Kill(pid, syscall.SIGKILL) }

// killAll stops every attempt still running so no process outlives the test.
func killAll(t *testing.T, h *harness) {
	t.Helper()
	tasks, _ := h.st.Tasks(context.Background(), "p")
	for _, tk := range tasks {
		if tk.Status != store.Running {
			continue
		}
		dir := taskDir(&nodeRuntime{workDir: h.work}, "p", tk.ID)
		n := h.ctl.nodes["local"]
		if n == nil || n.wrapper == "" {
			continue
		}
		_, _ = n.tr.Exec(context.Background(), []string{n.wrapper, "kill", "--dir", dir, "--grace", "1s"}, nil)
	}
}
