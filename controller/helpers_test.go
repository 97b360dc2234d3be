package controller

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/dispatch-tool/dispatch/control"
	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/plan"
	"github.com/dispatch-tool/dispatch/spec"
)

func syscallKill(pid int) error { return signal(pid, syscall.SIGKILL) }

// signal sends sig to pid (a process group when pid < 0) and refuses pids
// that would reach the test's own process group (0, -1, 1): a status file
// read too early must fail the test, not kill the test run.
func signal(pid int, sig syscall.Signal) error {
	if pid == 0 || pid == 1 || pid == -1 {
		return fmt.Errorf("refusing to signal pid %d", pid)
	}
	return syscall.Kill(pid, sig)
}

// killAll stops every attempt still running so no process outlives the test.
// It asks the wrapper of every task directory, whatever the database says
// of the task: an attempt the controller no longer counts as running (a
// forged failure, a kill the node refused) may still run, and its sandbox
// would write into the test's directory while it is being removed.
func killAll(t *testing.T, h *harness) {
	t.Helper()
	n := h.ctl.nodes["local"]
	if n == nil || n.installed() == nil {
		return
	}
	inst := n.installed()
	projects, _ := h.st.Projects(context.Background())
	for _, p := range projects {
		tasks, _ := h.st.Tasks(context.Background(), p.Name)
		for _, tk := range tasks {
			dir := taskDir(inst, p.Name, tk.ID)
			if _, err := os.Stat(dir); err != nil {
				continue
			}
			_, _ = n.tr.Exec(context.Background(), []string{inst.Path, "kill", "--dir", dir, "--grace", "1s"}, nil)
		}
	}
}

// addProject adds a second project of the harness's home, from specs
// written under specs/<name>.
func (h *harness) addProject(name string, specs map[string]string) {
	h.t.Helper()
	dir := filepath.Join(h.home, "specs", name)
	for file, body := range specs {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, file)), 0o755); err != nil {
			h.t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, file), []byte(body), 0o644); err != nil {
			h.t.Fatal(err)
		}
	}
	p, err := spec.Load(filepath.Join(h.home, "specs"), name)
	if err != nil {
		h.t.Fatal(err)
	}
	if _, err := plan.AddProject(context.Background(), h.st, h.cfg, h.home, p, control.StartOptions{}); err != nil {
		h.t.Fatal(err)
	}
}

// wholeSnapshot is the snapshot of project p when every task of it is
// read: the counts and backoffs follow from tasks.
func wholeSnapshot(tasks []domain.Task, facts projectFacts, runs map[attemptKey]attemptFacts) *snapshot {
	counts := map[domain.Status]int{}
	for _, t := range tasks {
		counts[t.Status]++
	}
	ptrs := make([]*domain.Task, len(tasks))
	for i := range tasks {
		ptrs[i] = &tasks[i]
	}
	return &snapshot{projects: []string{"p"}, tasks: map[string][]*domain.Task{"p": ptrs},
		counts: map[string]map[domain.Status]int{"p": counts}, facts: map[string]projectFacts{"p": facts}, attempts: runs}
}

// useTransport has node name reached over tr from now on, with an executor
// of its own over it (the old one closed).
func (h *harness) useTransport(name string, tr nodes.Transport) {
	n := h.ctl.nodes[name]
	n.exec.Close()
	n.tr, n.exec = tr, h.ctl.newExecutor(n.cfg, tr)
}
