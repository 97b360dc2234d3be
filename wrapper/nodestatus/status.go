package nodestatus

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/errkind"
	"github.com/dispatch-tool/dispatch/wrapper/proc"
	"github.com/dispatch-tool/dispatch/wrapper/taskfiles"
)

// ValidName rejects names that would leave the directory they name a child of.
func ValidName(name string) bool {
	return name != "" && name != "." && name != ".." && !strings.ContainsAny(name, "/\x00")
}

// NodeStatus lists the tasks of projects under root (all projects when none
// are given), leaving out those of another node than node (see proc.OthersTask).
// It reads a few small files per task and forks nothing on Linux, so one
// call stays cheap with many tasks. A project whose tasks/ cannot be
// listed (an unconfined task can chmod 000 it, one level above its own
// directory) is named in the reply's Unlisted, with why: one project's
// trouble never fails the others' listing.
func NodeStatus(ctx context.Context, version, root, node string, projects []string) (*wire.NodeStatus, error) {
	ns := &wire.NodeStatus{
		WrapperVersion: version,
		Time:           taskfiles.Timestamp(time.Now()),
		Facts:          readFacts(ctx, root),
		Tasks:          []wire.TaskStatus{},
	}
	projects, err := listProjects(root, projects)
	if err != nil {
		return nil, err
	}
	sort.Strings(projects)
	for i, project := range projects {
		if i > 0 && project == projects[i-1] {
			continue
		}
		tasksDir := filepath.Join(root, project, "tasks")
		tasks, err := listTasks(tasksDir, node)
		if err != nil {
			addUnlisted(ns, project, tasksDir, err)
			continue
		}
		ns.Tasks = append(ns.Tasks, tasks...)
	}
	return ns, nil
}

// addUnlisted names project in ns as one whose tasks directory could not
// be listed, for err.
func addUnlisted(ns *wire.NodeStatus, project, tasksDir string, err error) {
	ns.Unlisted = append(ns.Unlisted, wire.Unlisted{Project: project, Dir: tasksDir, Error: err.Error()})
}

// listProjects returns projects, or when it is empty every project
// directory under root.
func listProjects(root string, projects []string) ([]string, error) {
	if len(projects) > 0 {
		return slices.Clone(projects), nil
	}
	entries, err := os.ReadDir(root)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, errkind.IO(fmt.Errorf("list projects in %s: %w", root, err))
	}
	for _, e := range entries {
		// Hidden directories (.bin holds the wrappers) are not projects.
		if e.IsDir() && !strings.HasPrefix(e.Name(), ".") {
			projects = append(projects, e.Name())
		}
	}
	return projects, nil
}

// listTasks reports every task directory of tasksDir (none when it does
// not exist) but those of another node than node; hidden entries (the
// live index) are not tasks. A tasksDir whose names can be read but not
// looked into (mode r--) is an error as one that cannot be read: each of
// its tasks would read as a task without a status, whose attempt the
// controller takes for crashed.
func listTasks(tasksDir, node string) ([]wire.TaskStatus, error) {
	entries, err := os.ReadDir(tasksDir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, errkind.IO(fmt.Errorf("list tasks in %s: %w", tasksDir, err))
	}
	if len(entries) > 0 {
		// "." is looked up in tasksDir, which takes the search permission.
		if _, err := os.Lstat(tasksDir + string(filepath.Separator) + "."); err != nil {
			return nil, errkind.IO(fmt.Errorf("look into %s: %w", tasksDir, err))
		}
	}
	project := filepath.Base(filepath.Dir(tasksDir))
	var out []wire.TaskStatus
	for _, e := range entries {
		dir := filepath.Join(tasksDir, e.Name())
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") || proc.OthersTask(node, dir) {
			continue
		}
		out = append(out, taskStatus(project, e.Name(), dir))
	}
	return out, nil
}

// lockProbe is what taskfiles.SupervisorAlive said of a task directory.
type lockProbe struct {
	alive bool
	err   error
}

func taskStatus(project, task, dir string) wire.TaskStatus {
	// Probe the lock before reading the status: the supervisor writes its
	// final status and then releases the lock, so in this order a finished
	// attempt can never read as "running, supervisor gone" (a false crash).
	// A lock that cannot even be opened has no supervisor behind it.
	alive, err := taskfiles.SupervisorAlive(dir)
	st, _, stErr := taskfiles.ReadStatusVersion(dir)
	return taskStatusAfter(project, task, dir, lockProbe{alive: alive, err: err}, st, stErr)
}

// taskStatusAfter is taskStatus with the lock probed (probe) and then
// status.json read (st, err) already. Every file here may be anything the
// task made of it: a bad one is an error of this task alone (see
// taskfiles.ReadControlFile).
func taskStatusAfter(project, task, dir string, probe lockProbe, st *wire.Status, err error) wire.TaskStatus {
	ts := wire.TaskStatus{Project: project, Task: task, Dir: dir}
	alive, lockErr := probe.alive, probe.err
	ts.Alive = alive
	switch {
	case errors.Is(err, os.ErrNotExist):
		ts.StatusError = taskfiles.FileStatus + " missing"
	case err != nil:
		ts.StatusError = err.Error()
	default:
		ts.Status = st
		// The session comes from the supervisor's private record, never
		// from status.json, which the task can rewrite.
		st.SessionID, st.Gate = "", nil
		if st.Final() {
			if rec, err := proc.ReadRecord(dir); err == nil && rec.Attempt == st.Attempt {
				st.SessionID, st.Gate = rec.SessionID, rec.Gate
				// A supervisor ends the tool's group before it writes a
				// final status: a member left means the status is not its.
				if alive && rec.ToolPGID > 1 && rec.SID > 1 {
					ts.ToolRunning, _ = proc.GroupInSession(rec.ToolPGID, rec.SID)
				}
			}
		}
	}
	if lockErr != nil {
		ts.Status = nil
		ts.StatusError = lockErr.Error()
	}
	data, err := taskfiles.ReadControlFile(filepath.Join(dir, taskfiles.FileHeartbeat))
	switch {
	case err == nil:
		ts.Heartbeat = strings.TrimSpace(string(data))
	case !errors.Is(err, os.ErrNotExist) && ts.StatusError == "":
		ts.Status = nil
		ts.StatusError = err.Error()
	}
	ts.SetTag()
	return ts
}
