package nodestatus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/errkind"
	"github.com/dispatch-tool/dispatch/wrapper/proc"
	"github.com/dispatch-tool/dispatch/wrapper/taskfiles"
)

// The live index: <root>/<project>/tasks/.live/<ID> holds the attempt
// number of an attempt of tasks/<ID> whose supervisor may still run. The
// launch writes it before the supervisor starts; the supervisor (or a
// `kill` of a dead one) removes it once the final status is written. A
// supervisor killed outright leaves it, which is the point: its attempt is
// still reported, and the controller sees it died. `status --live` reads
// only the tasks the index holds and those the controller names, so that a
// steady pull costs what runs, not what the project ever ran.
//
// The index is a hint, never the only record: the controller names every
// attempt it has as claimed or running on the node whatever the index
// says, and its periodic full listing finds an attempt the index lost.

// DirLive is the live index of a tasks directory.
const DirLive = ".live"

// staleMarkerAge is how long a marker that names a newer attempt than
// status.json shows is kept with no supervisor behind it: the launch that
// wrote it is still starting its supervisor (see taskfiles.ReadyTimeout), or failed.
const staleMarkerAge = 2 * taskfiles.ReadyTimeout

// maxLiveRequest caps the document `status --live` reads on stdin.
const maxLiveRequest = 16 << 20

// liveMarker returns the marker of the task directory dir, or "" when dir
// is not a <project>/tasks/<ID> directory (a `run --dir` elsewhere).
func liveMarker(dir string) string {
	tasks := filepath.Dir(dir)
	if filepath.Base(tasks) != "tasks" || !ValidName(filepath.Base(dir)) || strings.HasPrefix(filepath.Base(dir), ".") {
		return ""
	}
	return filepath.Join(tasks, DirLive, filepath.Base(dir))
}

// MarkLive records attempt of dir in the live index. What the task may
// have left at the index's name (a file, a link out) is replaced by a
// private directory; the marker itself is written by rename, so a link
// at its name is replaced, never followed.
func MarkLive(dir string, attempt int) error {
	path := liveMarker(dir)
	if path == "" {
		return nil
	}
	idx := filepath.Dir(path)
	// Looked at first: it is there but for a project's first launch (one
	// call, where making it first took two).
	if fi, err := os.Lstat(idx); err != nil || !fi.IsDir() {
		if err == nil {
			if err := os.Remove(idx); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("replace %s: %w", idx, err)
			}
		}
		if err := os.Mkdir(idx, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("create %s: %w", idx, err)
		} else if err != nil {
			// Made meanwhile, by another launch: a directory, or not ours.
			if fi, err := os.Lstat(idx); err != nil || !fi.IsDir() {
				return fmt.Errorf("create %s: something else is there", idx)
			}
		}
	}
	return taskfiles.WriteFileAtomic(path, []byte(strconv.Itoa(attempt)+"\n"), 0o600)
}

// UnmarkLive removes dir's marker when it still names attempt (or names
// none that parses): a later launch's marker is left alone.
func UnmarkLive(dir string, attempt int) {
	path := liveMarker(dir)
	if path == "" {
		return
	}
	if a, err := readMarker(path); err == nil && a > attempt {
		return
	}
	os.Remove(path)
}

// readMarker reads the attempt number a marker holds.
func readMarker(path string) (int, error) {
	data, err := taskfiles.ReadControlFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(data)))
}

// ReadLiveRequest reads and checks the names `status --live` gets on stdin.
func ReadLiveRequest(stdin io.Reader) (named map[string][]string, held map[string]string, err error) {
	data, err := io.ReadAll(io.LimitReader(stdin, maxLiveRequest+1))
	if err != nil {
		return nil, nil, errkind.IO(fmt.Errorf("read the named tasks from stdin: %w", err))
	}
	if len(data) > maxLiveRequest {
		return nil, nil, errkind.Usagef("status: the document on stdin is larger than %d bytes", maxLiveRequest)
	}
	var req wire.LiveRequest
	if len(strings.TrimSpace(string(data))) > 0 {
		dec := json.NewDecoder(strings.NewReader(string(data)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			return nil, nil, errkind.Usagef("status: stdin: want {\"tasks\":[\"project/ID\",…],\"tags\":[\"tag\",…]}: %v", err)
		}
	}
	return checkLiveRequest(req)
}

// checkLiveRequest checks the names and tags of a live request and returns
// the names by project and the tags by name.
func checkLiveRequest(req wire.LiveRequest) (named map[string][]string, held map[string]string, err error) {
	if len(req.Tags) > 0 && len(req.Tags) != len(req.Tasks) {
		return nil, nil, errkind.Usagef("status: stdin: %d tags for %d tasks (want one tag per task, \"\" for none)", len(req.Tags), len(req.Tasks))
	}
	named = map[string][]string{}
	held = map[string]string{}
	for i, name := range req.Tasks {
		project, task, ok := strings.Cut(name, "/")
		if !ok || !ValidName(project) || !ValidName(task) {
			return nil, nil, errkind.Usagef("status: invalid task name %q (want project/ID)", name)
		}
		named[project] = append(named[project], task)
		if i < len(req.Tags) && req.Tags[i] != "" {
			held[name] = req.Tags[i]
		}
	}
	return named, held, nil
}

// LiveStatus is NodeStatus for `status --live`: in each listed project
// (every one when none is), the tasks of its live index, and the named
// tasks of any project. A marker whose attempt is over
// (no supervisor, and a final status of that attempt or a later one, or
// the marker older than staleMarkerAge) or whose task directory is gone
// is removed as it is read. An index that is not a directory or cannot be
// listed (the task of an unconfined attempt can reach it, and chmod it)
// lists the whole project, as the full listing does: one project's index
// never fails the others'. A project whose tasks/ cannot be listed either
// is named in the reply's Unlisted, with its named tasks that can still be
// read. The attempts of another node than node (see
// proc.OthersTask) are neither listed nor unmarked: the index is shared by
// the nodes that share the work_dir.
func LiveStatus(ctx context.Context, version, root, node string, projects []string, named map[string][]string, held map[string]string) (*wire.NodeStatus, error) {
	ns := &wire.NodeStatus{
		WrapperVersion: version,
		Time:           taskfiles.Timestamp(time.Now()),
		Facts:          readFacts(ctx, root),
		Tasks:          []wire.TaskStatus{},
		Listing:        wire.ListingLive,
	}
	projects, err := listProjects(root, projects)
	if err != nil {
		return nil, err
	}
	indexed := map[string]bool{}
	for _, p := range projects {
		indexed[p] = true
	}
	for p := range named {
		projects = append(projects, p)
	}
	sort.Strings(projects)
	now := time.Now()
	for i, project := range projects {
		if i > 0 && project == projects[i-1] {
			continue
		}
		if !indexed[project] {
			// Named only: its index is not asked for.
			ids := slices.Compact(slices.Sorted(slices.Values(named[project])))
			for _, id := range ids {
				if dir := filepath.Join(root, project, "tasks", id); isDir(dir) && !proc.OthersTask(node, dir) {
					addLive(ns, taskStatus(project, id, dir), held)
				}
			}
			continue
		}
		if err := liveProject(ns, root, project, node, named[project], held, now); err != nil {
			return nil, err
		}
	}
	return ns, nil
}

// liveProject adds to ns the tasks of project's live index and the named
// ones, or every task of project when its index is not to be trusted
// (see liveIndex) — or only the named ones when the project's tasks/
// cannot be listed either.
func liveProject(ns *wire.NodeStatus, root, project, node string, named []string, held map[string]string, now time.Time) error {
	tasksDir := filepath.Join(root, project, "tasks")
	markers, all := liveIndex(tasksDir)
	if all {
		tasks, err := listTasks(tasksDir, node)
		if err == nil {
			for _, ts := range tasks {
				addLive(ns, ts, held)
			}
			return nil
		}
		// tasks/ itself cannot be listed (chmod 000 by an unconfined
		// task, one level above its own directory): the project is named
		// unlisted, its named tasks are looked at by name, as ever (those
		// that cannot be are unknown to the controller, not gone), and
		// the other projects listed as usual.
		addUnlisted(ns, project, tasksDir, err)
		markers = nil
	}
	idx := filepath.Join(tasksDir, DirLive)
	ids := map[string]bool{}
	for _, id := range named {
		ids[id] = true
	}
	live := map[string]int{}
	for id := range markers {
		if strings.HasPrefix(id, ".") || !ValidName(id) {
			continue // a temporary file of MarkLive, or not ours
		}
		live[id], ids[id] = -1, true
		if a, err := readMarker(filepath.Join(idx, id)); err == nil {
			live[id] = a
		}
	}
	for _, id := range sortedKeys(ids) {
		dir := filepath.Join(tasksDir, id)
		if _, err := os.Lstat(dir); err != nil || !isDir(dir) {
			if a, ok := live[id]; ok && errors.Is(err, os.ErrNotExist) {
				UnmarkLive(dir, max(a, 0))
			}
			continue
		}
		if proc.OthersTask(node, dir) {
			continue
		}
		ts := taskStatus(project, id, dir)
		addLive(ns, ts, held)
		if a, ok := live[id]; ok && markerOver(ts, a, filepath.Join(idx, id), now) {
			UnmarkLive(dir, max(a, 0))
		}
	}
	return nil
}

// liveIndex returns the task IDs the live index of tasksDir names; all
// when it is not a directory or cannot be listed (the task of an
// unconfined attempt can reach it, and chmod it): none of it is trusted,
// the whole project is looked at. No index (no launch yet) names none.
func liveIndex(tasksDir string) (ids map[string]bool, all bool) {
	idx := filepath.Join(tasksDir, DirLive)
	if fi, err := os.Lstat(idx); err == nil && !fi.IsDir() {
		return nil, true
	}
	markers, err := os.ReadDir(idx)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, true
	}
	ids = map[string]bool{}
	for _, m := range markers {
		ids[m.Name()] = true
	}
	return ids, false
}

// addLive adds ts to a live reply: in full, or as its heartbeat alone
// when the controller holds an entry of its tag.
func addLive(ns *wire.NodeStatus, ts wire.TaskStatus, held map[string]string) {
	key := ts.Project + "/" + ts.Task
	if tag, ok := held[key]; ok && ts.Tag != "" && tag == ts.Tag {
		if ns.Same == nil {
			ns.Same = &wire.Same{}
		}
		ns.Same.Add(key, ts.Heartbeat)
		return
	}
	ns.Tasks = append(ns.Tasks, ts)
}

// markerOver reports whether the attempt a marker names is over: its
// supervisor is gone and status.json is final for it or a later attempt,
// or the marker has waited staleMarkerAge for a supervisor. An attempt
// whose status still says running with no supervisor (an orphan, whose
// tool group may live on) keeps its marker until `kill` ends it.
func markerOver(ts wire.TaskStatus, attempt int, path string, now time.Time) bool {
	if ts.Alive || ts.Status == nil && ts.StatusError != taskfiles.FileStatus+" missing" {
		return false
	}
	if ts.Status != nil && !ts.Status.Final() {
		return false
	}
	if ts.Status != nil && attempt >= 0 && ts.Status.Attempt >= attempt {
		return true
	}
	fi, err := os.Lstat(path)
	return err == nil && now.Sub(fi.ModTime()) > staleMarkerAge
}

// isDir reports whether path is a directory, not a link to one.
func isDir(path string) bool {
	fi, err := os.Lstat(path)
	return err == nil && fi.IsDir()
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
