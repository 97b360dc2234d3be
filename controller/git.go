package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/gitrepo"
	"github.com/dispatch-tool/dispatch/home"
	"github.com/dispatch-tool/dispatch/internal/crashpoint"
	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/policy"
	"github.com/dispatch-tool/dispatch/store"
	"github.com/dispatch-tool/dispatch/wire"
)

// Git-native projects (issue 12), the controller's side: the base commit
// goes to each node once, as one pack over one transfer (shipBase); each
// attempt's workspace is a clone of the node's repo.git on the task's
// branch (launch.json repo); the attempt's commit comes back as a pack
// into the operator's repository (collectCommit); the integration phase
// merges the task branches with git (phase.go).

// taskBranch is a task's branch: refs/heads/<taskBranch> in the operator's
// repository, and the branch of its workspace on the node.
func taskBranch(project, id string) string { return "dispatch/" + project + "/" + id }

// mergeRef holds the merge of a project's task branches, the start of its
// integration task; finalRef holds the project's result. They sit beside
// the task branches (IDs are a capital and digits), since git cannot have
// refs/heads/dispatch/<project> itself next to refs under it.
func mergeRef(project string) string { return gitrepo.RefPrefix + project + "/merge" }
func finalRef(project string) string { return gitrepo.RefPrefix + project + "/final" }

// nodeRepo is a project's repository on a node.
func nodeRepo(inst *nodes.Installed, project string) string {
	return path.Join(inst.WorkDir, project, "repo.git")
}

// shipBase makes sure n's repository of project holds commit of the
// operator's repository opRepo: when it does not, what it lacks goes as
// one thin pack, uploaded bounded by progress, then indexed by the wrapper.
func (c *Controller) shipBase(ctx context.Context, n *nodeRuntime, inst *nodes.Installed, project, opRepo, commit string) error {
	repo := nodeRepo(inst, project)
	have, err := c.gitCall(ctx, n, c.callTimeout(), []string{inst.Path, "git-have", "--repo", repo})
	if err != nil {
		return err
	}
	if slices.Contains(have, commit) {
		return nil
	}
	// A node names what it has; only commits the operator's repository
	// knows can be left out of the pack.
	known := gitrepo.Known(ctx, opRepo, have)
	upload := path.Join(inst.WorkDir, project, "incoming.pack")
	pr, pw := io.Pipe()
	size := &countWriter{w: io.Discard}
	packed := make(chan struct{})
	go func() {
		defer close(packed)
		pw.CloseWithError(gitrepo.Pack(ctx, opRepo, commit, known, io.MultiWriter(pw, size)))
	}()
	err = nodes.PutIdle(ctx, n.tr, upload, pr, 0o600, c.transferIdle())
	// Closing the reader ends a pack still being written (its git
	// process in the operator's repository) before this returns; size is
	// read after.
	pr.CloseWithError(err)
	<-packed
	if err != nil {
		return fmt.Errorf("send the repository: %w", err)
	}
	// Indexing is local to the node: its deadline grows with the pack.
	got, err := c.gitCall(ctx, n, c.callTimeout()+time.Duration(size.n/(2<<20))*time.Second,
		[]string{inst.Path, "git-receive", "--repo", repo, "--commit", commit, "--pack", upload})
	if err != nil {
		return err
	}
	if !slices.Contains(got, commit) {
		return fmt.Errorf("the node's repository does not hold %s after receiving it", commit[:12])
	}
	c.log.Info("repository sent", keyNode, n.cfg.Name, keyProject, project, "commit", commit[:12], "bytes", size.n)
	return nil
}

// gitCall runs a wrapper git command that replies GitReply and returns its
// commits.
func (c *Controller) gitCall(ctx context.Context, n *nodeRuntime, timeout time.Duration, argv []string) ([]string, error) {
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	res, err := n.tr.Exec(cctx, argv, nil)
	if err != nil {
		return nil, err
	}
	var reply wire.GitReply
	perr := json.Unmarshal(res.Stdout, &reply)
	if res.ExitCode != 0 || perr != nil {
		return nil, errors.New(policy.ReplyError(res, perr))
	}
	return reply.Commits, nil
}

// collectCommit brings a completed git-native attempt's commit into the
// operator's repository as refs/heads/dispatch/<project>/<ID> (a pack the
// wrapper makes of what the attempt added to its base, fetched bounded by
// progress and by collect_max_bytes), writes its diffstat to
// diffstat.txt in local, and returns the changed files as the manifest.
func (c *Controller) collectCommit(ctx context.Context, n *nodeRuntime, r domain.Attempt, t domain.Task, opRepo, local string) ([]store.File, error) {
	inst := n.installed()
	if inst == nil {
		return nil, fmt.Errorf("the wrapper on %s is being checked again", n.cfg.Name)
	}
	if !wire.IsCommitID(r.Commit) {
		return nil, permanent(errors.New("the attempt completed without recording its workspace as a commit"))
	}
	ref := "refs/heads/" + taskBranch(r.Project, r.Task)
	base := startOf(r, t)
	if r.Commit != base {
		if err := c.fetchCommit(ctx, n, inst, r, t, opRepo, ref); err != nil {
			return nil, err
		}
	} else if err := gitrepo.SetRef(ctx, opRepo, ref, r.Commit); err != nil {
		return nil, err
	}
	changes, stat, err := gitrepo.Changes(ctx, opRepo, base, r.Commit)
	if err != nil {
		return nil, err
	}
	head := fmt.Sprintf("%s %s (attempt %d): %s..%s\n", r.Task, taskBranch(r.Project, r.Task), r.Attempt, base[:12], r.Commit[:12])
	if err := os.WriteFile(filepath.Join(local, "diffstat.txt"), []byte(head+stat), 0o644); err != nil {
		return nil, err
	}
	var manifest []store.File
	for _, ch := range changes {
		if ch.Size >= 0 {
			manifest = append(manifest, store.File{Project: r.Project, Task: r.Task, Attempt: r.Attempt, Path: ch.Path, Size: ch.Size})
		}
	}
	return manifest, nil
}

// fetchCommit has the wrapper pack what attempt r added to the commit it
// started on, and imports the pack into opRepo under ref.
func (c *Controller) fetchCommit(ctx context.Context, n *nodeRuntime, inst *nodes.Installed, r domain.Attempt, t domain.Task, opRepo, ref string) error {
	dir := taskDir(inst, r.Project, r.Task)
	archive := path.Join(dir, "result.pack")
	base := startOf(r, t)
	res, removeArchive, err := c.remoteArchive(ctx, n, archive, time.Duration(c.config().Controller.CollectMaxBytes/(8<<20))*time.Second,
		[]string{inst.Path, "git-pack", "--dir", dir, "--base", base, "--branch", taskBranch(r.Project, r.Task), "--out", archive})
	defer removeArchive()
	if err != nil {
		return err
	}
	var reply wire.PackReply
	perr := json.Unmarshal(res.Stdout, &reply)
	if res.ExitCode != 0 || perr != nil {
		var e wire.ErrorReply
		if json.Unmarshal(res.Stdout, &e) == nil && e.Kind == wire.KindNotFound {
			return permanent(fmt.Errorf("no result recorded on %s: %s", n.cfg.Name, e.Error))
		}
		return errors.New(policy.ReplyError(res, perr))
	}
	if reply.Commit != r.Commit {
		return permanent(fmt.Errorf("the node's result %q is not the commit its status named (%s)", reply.Commit, r.Commit))
	}
	if reply.Bytes > c.config().Controller.CollectMaxBytes {
		return permanent(fmt.Errorf("the task's commits pack to %d bytes, over collect_max_bytes (%d): nothing collected", reply.Bytes, c.config().Controller.CollectMaxBytes))
	}
	// The pack is spooled, then copied by index-pack, in the operator's
	// repository: room for twice what the node says, then held to the
	// room left as it arrives.
	room, err := c.freeRoom(opRepo, "the task's pack (twice, as received and as indexed)", 2*reply.Bytes)
	if err != nil {
		return err
	}
	limit, byRoom := c.config().Controller.CollectMaxBytes, room/2 < c.config().Controller.CollectMaxBytes
	if byRoom {
		limit = room / 2
	}
	pr, pw := io.Pipe()
	got := make(chan error, 1)
	go func() {
		lw := &limitWriter{w: crashWriter{pw}, left: limit}
		err := nodes.GetIdle(ctx, n.tr, archive, lw, c.transferIdle())
		pw.CloseWithError(err)
		got <- err
	}()
	err = gitrepo.Import(ctx, opRepo, pr, r.Commit, base, ref, c.limits())
	pr.CloseWithError(err)
	if err == nil {
		crashpoint.At(crashpoint.AfterImport)
	}
	if gerr := <-got; gerr != nil && !errors.Is(gerr, io.ErrClosedPipe) {
		err = fmt.Errorf("fetch the task's commits: %w", gerr) // the cause of a cut-off pack
	}
	switch {
	case errors.Is(err, errOverQuota) && byRoom:
		return fmt.Errorf("not enough free space under %s: the task's pack is larger than the room left, and %s must stay free\n  fix: free space on the controller's disk; the collection is tried again",
			opRepo, mib(collectFreeMargin))
	case errors.Is(err, errOverQuota):
		return permanent(fmt.Errorf("the task's commits are over collect_max_bytes (%d): nothing collected", c.config().Controller.CollectMaxBytes))
	case errors.Is(err, gitrepo.ErrOverLimit), errors.Is(err, gitrepo.ErrForeign):
		// Refused on what it holds: trying again fetches the same.
		return permanent(err)
	}
	return err
}

// limits are the quotas of a task's result.
func (c *Controller) limits() gitrepo.Limits {
	return gitrepo.Limits{MaxBytes: c.config().Controller.CollectMaxBytes, MaxFiles: c.config().Controller.CollectMaxFiles}
}

// gitAttempt is a git-native task's current attempt to collect: the task
// and the operator's repository.
type gitAttempt struct {
	task domain.Task
	repo string
}

// gitTask returns r's task and repository when r is the current attempt of
// a git-native task, else nil. role is what collectAll read of r: the task
// is read only when it starts from a commit (a plain task's collection
// read its whole row for nothing, issue 35).
func (c *Controller) gitTask(ctx context.Context, r domain.Attempt, role collectRole) (*gitAttempt, error) {
	if !role.current || !role.based {
		return nil, nil
	}
	t, err := c.st.Task(ctx, r.Project, r.Task)
	if err != nil || t.BaseCommit == "" {
		return nil, err
	}
	p, err := c.st.Project(ctx, r.Project)
	if err != nil {
		return nil, err
	}
	opts, err := p.ParseOptions()
	if err != nil {
		return nil, err
	}
	if opts.Repo == nil {
		return nil, permanent(fmt.Errorf("project %s has no repository recorded", r.Project))
	}
	return &gitAttempt{task: t, repo: opts.Repo.Dir}, nil
}

// taskBase is where a task's workspace starts: a tree on the controller
// (Dir) or, in a git-native project, a commit of the operator's
// repository (Commit).
type taskBase struct{ Dir, Commit string }

// baseOf is where t started.
func baseOf(t domain.Task) taskBase { return taskBase{Dir: t.BaseDir, Commit: t.BaseCommit} }

// resultOf is what t (completed and collected) left: its collected output/
// or, git-native, its current attempt's commit.
func resultOf(runsDir string, t domain.Task, runs []domain.Attempt) taskBase {
	if t.BaseCommit == "" {
		return taskBase{Dir: filepath.Join(runsDir, t.ID, "output")}
	}
	return taskBase{Commit: attemptCommit(t, runs)}
}

// attemptCommit is the commit t's current attempt recorded, or "".
func attemptCommit(t domain.Task, runs []domain.Attempt) string {
	for _, r := range runs {
		if r.Task == t.ID && r.Attempt == t.Attempt {
			return r.Commit
		}
	}
	return ""
}

// verdictReader reads verifier v's verdict.json: from its collected output/
// or, git-native, from its commit.
func (c *Controller) verdictReader(ctx context.Context, runsDir string, opts domain.ProjectOptions, v domain.Task, runs []domain.Attempt) func() ([]byte, error) {
	if v.BaseCommit == "" || opts.Repo == nil {
		return fileVerdict(filepath.Join(runsDir, v.ID, "output", "verdict.json"))
	}
	return func() ([]byte, error) {
		commit := attemptCommit(v, runs)
		if commit == "" {
			return nil, fmt.Errorf("%s recorded no commit", v.ID)
		}
		return gitrepo.ReadFile(ctx, opts.Repo.Dir, commit, "verdict.json", maxVerdictSize)
	}
}

// fileVerdict reads a collected verdict.json.
func fileVerdict(path string) func() ([]byte, error) {
	return func() ([]byte, error) { return readCapped(path, maxVerdictSize) }
}

// final records the project's result from: the tree copied to
// runs/<project>/final/ or, git-native, the commit set as finalRef,
// checked out there, and recorded as the project's final commit.
func (c *Controller) final(ctx context.Context, p domain.Project, opts domain.ProjectOptions, from taskBase) error {
	dest := filepath.Join(home.RunsDir(c.opts.Home, p.Name), "final")
	if from.Commit == "" || opts.Repo == nil {
		return copyTree(from.Dir, dest)
	}
	if err := gitrepo.SetRef(ctx, opts.Repo.Dir, finalRef(p.Name), from.Commit); err != nil {
		return err
	}
	if err := os.RemoveAll(dest); err != nil {
		return err
	}
	room, err := c.freeRoom(filepath.Dir(dest), "final/", 0)
	if err != nil {
		return err
	}
	// The tree is held to the quotas, as a collected output/ is: one over
	// them stays the branch only (the merge of tasks each within them may
	// not be).
	var warning string
	err = gitrepo.Export(ctx, opts.Repo.Dir, from.Commit, dest, c.limits(), room)
	switch {
	case errors.Is(err, gitrepo.ErrOverLimit):
		os.RemoveAll(dest)
		warning = fmt.Sprintf("final/ not written: %v\n  the result is the branch %s (git worktree add <dir> %s)", err,
			strings.TrimPrefix(finalRef(p.Name), "refs/heads/"), strings.TrimPrefix(finalRef(p.Name), "refs/heads/"))
	case err != nil:
		os.RemoveAll(dest)
		return fmt.Errorf("check out %s into %s: %w", from.Commit[:12], dest, err)
	}
	return c.st.Update(ctx, func(tx *store.Tx) error {
		if warning != "" {
			if err := tx.Event(ctx, store.Event{Project: p.Name, Kind: "warning", Message: warning}); err != nil {
				return err
			}
		}
		return tx.SetProject(ctx, p.Name, store.ProjectPatch{FinalCommit: new(from.Commit)},
			fmt.Sprintf("result %s is %s", finalRef(p.Name), from.Commit))
	})
}

// mergedBranches is the merge of a project's task branches.
type mergedBranches struct {
	Commit  string
	Changed []string
	// Overlaps are the files more than one task changed, listed before
	// the merge; Conflicts those git could not merge.
	Overlaps  []store.Conflict
	Conflicts []store.Conflict
}

// mergeBranches merges the completed author tasks' commits, in dependency
// order then by ID, onto the project's base with git's 3-way merge, and
// sets mergeRef to the result. Conflicts are committed with git's markers
// and listed.
func (c *Controller) mergeBranches(ctx context.Context, project string, repo *domain.RepoOptions, author []domain.Task, runs []domain.Attempt) (*mergedBranches, error) {
	var branches []gitrepo.TaskBranch
	for _, t := range mergeOrder(author) {
		if t.Status != domain.Completed {
			continue
		}
		commit := attemptCommit(t, runs)
		if commit == "" {
			return nil, fmt.Errorf("%s completed without a recorded commit", t.ID)
		}
		branches = append(branches, gitrepo.TaskBranch{ID: t.ID, Commit: commit, Base: attemptBase(t, runs)})
	}
	m, err := gitrepo.Integrate(ctx, repo.Dir, repo.Commit, branches)
	if err != nil {
		return nil, err
	}
	if err := gitrepo.SetRef(ctx, repo.Dir, mergeRef(project), m.Commit); err != nil {
		return nil, err
	}
	out := &mergedBranches{Commit: m.Commit, Changed: m.Changed}
	for _, o := range m.Overlaps {
		out.Overlaps = append(out.Overlaps, store.Conflict{Path: o.Path, Tasks: o.Tasks})
	}
	for _, cf := range m.Conflicts {
		out.Conflicts = append(out.Conflicts, store.Conflict{Path: cf.Path, Tasks: cf.Tasks})
	}
	return out, nil
}

// mergeOrder sorts tasks so that each comes after the tasks it depends on,
// the smallest ID first among those ready (Kahn's algorithm; ready is kept
// sorted in descending order, so the smallest is the last).
// Tasks left in a cycle, which validation refuses, follow in ID order.
func mergeOrder(tasks []domain.Task) []domain.Task {
	byID := map[string]domain.Task{}
	for _, t := range tasks {
		byID[t.ID] = t
	}
	waiting := map[string]int{}         // unmet dependencies of each task
	dependents := map[string][]string{} // who waits for each task
	var ready []string
	for id, t := range byID {
		for _, d := range slices.Compact(slices.Sorted(slices.Values(t.DependsOn))) {
			if _, ok := byID[d]; ok && d != id {
				waiting[id]++
				dependents[d] = append(dependents[d], id)
			}
		}
		if waiting[id] == 0 {
			ready = append(ready, id)
		}
	}
	slices.SortFunc(ready, descending)
	out := make([]domain.Task, 0, len(tasks))
	done := map[string]bool{}
	for len(ready) > 0 {
		id := ready[len(ready)-1]
		ready = ready[:len(ready)-1]
		done[id] = true
		out = append(out, byID[id])
		for _, w := range dependents[id] {
			if waiting[w]--; waiting[w] == 0 {
				i, _ := slices.BinarySearchFunc(ready, w, descending)
				ready = slices.Insert(ready, i, w)
			}
		}
	}
	for _, id := range slices.Sorted(maps.Keys(byID)) {
		if !done[id] {
			out = append(out, byID[id])
		}
	}
	return out
}

func descending(a, b string) int { return strings.Compare(b, a) }

// crashWriter reaches crashpoint.MidFetch once some of a pack was read.
type crashWriter struct{ w io.Writer }

func (c crashWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	crashpoint.At(crashpoint.MidFetch)
	return n, err
}
