package controller

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/home"
	"github.com/dispatch-tool/dispatch/internal/crashpoint"
	"github.com/dispatch-tool/dispatch/internal/filetree"
	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/policy"
	"github.com/dispatch-tool/dispatch/store"
	"github.com/dispatch-tool/dispatch/wire"
)

// settledCache holds the projects whose finished attempts were all
// collected when the database's change counter (store.Version) was at
// version: while it stays there, none finished since, and a steady tick
// reads the counter, not every live attempt's row.
type settledCache struct {
	mu       sync.Mutex
	version  int64
	projects map[string]bool
}

// take returns the counter now and the projects known settled at it (none
// when it moved or cannot be read: version is then -1).
func (s *settledCache) take(ctx context.Context, st *store.Store) (int64, map[string]bool) {
	v, err := st.Version(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		v = -1
	}
	if v != s.version || v < 0 {
		s.version, s.projects = v, map[string]bool{}
	}
	return v, maps.Clone(s.projects)
}

// add records project as settled at version (read before its attempts
// were).
func (s *settledCache) add(version int64, project string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if version >= 0 && version == s.version {
		s.projects[project] = true
	}
}

// collectAll pulls the files of every finished attempt not yet collected to
// runs/<project>/<ID>/, so results are on the operator's machine even if the
// node disappears later: every attempt's task.log goes to attempts/<n>/, and
// the latest attempt's output/ and task.log to the top of the task's
// directory, with the manifest in the database.
func (c *Controller) collectAll(ctx context.Context, projects []string, pulls map[string]*pull, launching map[string]bool) error {
	roles := map[string]collectRole{}
	byNode := map[string][]domain.Attempt{}
	unkilledNodes, _ := c.unkilled()
	version, settled := c.settled.take(ctx, c.st)
	live := map[string]bool{} // the attempts still to collect: they may wait for room
	for _, project := range projects {
		if settled[project] {
			continue
		}
		runs, err := c.st.Uncollected(ctx, project)
		if err != nil {
			return err
		}
		if len(runs) == 0 {
			c.settled.add(version, project)
		}
		for _, u := range runs { // by task, then attempt
			r := u.Attempt
			live[collectKey(r)] = true
			if p := pulls[r.Node]; p == nil || p.err != nil || unkilledNodes[r.Node] {
				continue // not reachable, or a stale attempt not killed yet there; try again next tick
			}
			if launching[taskKey(r.Project, r.Task)] {
				continue // its directory is being taken over by the next attempt; collected next tick
			}
			byNode[r.Node] = append(byNode[r.Node], r)
			roles[collectKey(r)] = collectRole{current: u.Current, based: u.Based}
		}
	}
	c.dropRoomWaits(live)
	names := make([]string, 0, len(byNode))
	for name := range byNode {
		names = append(names, name)
	}
	b := &collectBatch{}
	// An attempt waiting for room is collected again in this round, or
	// its node cannot be reached now: it waits now only once refused again.
	c.waitingNow.Clear()
	round := c.room.round() // every node's collection draws from the one ledger: they run side by side
	c.onNodes(names, collecting, c.callTimeout(), func(n *nodeRuntime) {
		b.add(ctx, c, c.collectNode(ctx, n, byNode[n.cfg.Name], roles, pulls[n.cfg.Name], round))
	})
	return errors.Join(b.close(ctx, c)...)
}

// dropRoomWaits forgets the waits for room of attempts no longer to be
// collected (collected, given up, their project settled or no longer
// served): only a collection's outcome removed them, and an attempt that
// left otherwise kept its entry for the controller's life.
func (c *Controller) dropRoomWaits(live map[string]bool) {
	c.roomWaits.Range(func(k, _ any) bool {
		if !live[k.(string)] {
			c.roomWaits.Delete(k)
		}
		return true
	})
}

// collect copies one finished attempt: its task.log to
// runs/<p>/<ID>/attempts/<n>/ always, and, when it is the task's current
// attempt, its output/ and task.log to the top of runs/<p>/<ID>/ with the
// manifest. It returns what to record of it, in the tick's transaction
// (with an error, what to record besides the failure). Every remote call
// has its own deadline, so a large output/ is not cut off by one for the
// whole attempt. p is the node's pull of this tick: it says where the
// attempt is when it is still in its task directory.
func (c *Controller) collect(ctx context.Context, n *nodeRuntime, r domain.Attempt, role collectRole, p *pull, round *roomRound) (txFunc, error) {
	current := role.current
	src, err := c.attemptFiles(ctx, n, r, p)
	if err != nil {
		return nil, err
	}
	if src == "" {
		return goneRecord(ctx, r), nil
	}
	dest := filepath.Join(home.RunsDir(c.opts.Home, r.Project), r.Task)
	attemptDir := filepath.Join(dest, "attempts", strconv.Itoa(r.Attempt))
	tmp := filepath.Join(home.RunsDir(c.opts.Home, r.Project), fmt.Sprintf(".%s.%d.collecting", r.Task, r.Attempt))
	if err := os.RemoveAll(tmp); err != nil {
		return nil, err
	}
	// task.log, like output/, draws from the room.
	if err := c.roundRoom(round, r.Project); err != nil {
		return nil, err
	}
	room := round.open()
	placed := false
	defer func() {
		room.release()
		if err := os.RemoveAll(tmp); err == nil && !placed {
			room.discard() // what it wrote is gone: the next attempt may have it
		}
	}()
	if err := os.MkdirAll(filepath.Join(tmp, "output"), 0o755); err != nil {
		return nil, err
	}
	maxBytes := c.config().Controller.CollectMaxBytes
	// A git-native task's result is its commit, not its workspace (the
	// whole repository): only a completed attempt's commit is collected.
	gitTask, err := c.gitTask(ctx, r, role)
	if err != nil {
		return nil, err
	}
	// task.log and output/ are claimed together before either is copied:
	// an attempt that waits for room copies nothing, round after round.
	var files []nodes.FileInfo
	// refused is an output/ that is not collected at all (over quota, or
	// a symbolic link): the task.log still is, then the task fails.
	var refused error
	if current && gitTask == nil {
		if files, refused, err = c.listOutput(ctx, n, src); err != nil {
			return nil, err
		}
	}
	logSize, err := c.logSize(ctx, n, path.Join(src, "task.log"))
	if err != nil {
		return nil, err
	}
	listed := files
	if refused != nil {
		listed = nil // not copied
	}
	if err := c.claimListed(room, r.Project, min(logSize, maxBytes), listed); err != nil {
		return nil, err
	}
	logChanged, err := c.fetchLog(ctx, n, path.Join(src, "task.log"), filepath.Join(tmp, "task.log"), logSize, maxBytes, room)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		if errors.Is(err, errRoomSpent) {
			return nil, c.noRoom(r.Project, "task.log")
		}
		return nil, err
	}
	var manifest []store.File
	if gitTask != nil && r.Status == domain.Completed {
		manifest, err = c.collectCommit(ctx, n, r, gitTask.task, gitTask.repo, tmp)
		var perm *permanentError
		switch {
		case errors.As(err, &perm):
			refused = err
		case err != nil:
			return nil, err
		}
	}
	var changed wire.CollectEnd
	if current && gitTask == nil {
		if manifest, changed, err = c.collectOutput(ctx, n, r, src, tmp, files, refused, room); err != nil {
			return nil, err
		}
	}
	crashpoint.At(crashpoint.MidCollect)
	placed = true // placed, even partly: what moved is no longer tmp's to give back
	if err := placeCollected(tmp, dest, attemptDir, current, gitTask != nil); err != nil {
		return nil, err
	}
	// A refused output/ (err) leaves changed empty: task.log's warning
	// is recorded all the same.
	rec, err := c.collectedRecord(ctx, r, current, manifest, refused)
	return withChangedWarning(ctx, r, changed, logChanged, rec), err
}

// listOutput lists the output/ of the attempt in src on n: its files, or
// why it is refused whole (a symbolic link, over the quotas).
func (c *Controller) listOutput(ctx context.Context, n *nodeRuntime, src string) ([]nodes.FileInfo, error, error) {
	files, err := c.walk(ctx, n, path.Join(src, "output"))
	switch {
	case errors.Is(err, nodes.ErrNotFollowed):
		return nil, permanent(fmt.Errorf("output/ is not a directory, and a symbolic link is never followed: nothing of it collected (%w)", err)), nil
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return nil, nil, err
	}
	return files, c.checkQuota(files), nil
}

// logSize is the size of the task.log at p on n, as the node says (0 when
// there is none, or it is no regular file: its fetch says why).
func (c *Controller) logSize(ctx context.Context, n *nodeRuntime, p string) (int64, error) {
	cctx, cancel := context.WithTimeout(ctx, c.callTimeout())
	defer cancel()
	st, err := n.tr.Lstat(cctx, p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return 0, nil
	case err != nil:
		return 0, err
	case !st.Mode.IsRegular():
		return 0, nil
	}
	return max(st.Size, 0), nil
}

// collectOutput fetches the current attempt's output/ from src on n into
// tmp/output (one archive for many files, else file by file, each as
// listed: changed names what changed since), held to collect_max_bytes
// and drawn from room, the attempt's claim on the ledger (which holds the
// listing already). files is the listing, refused why output/ is refused
// whole (over quota, a symbolic link): it is left empty, the task fails,
// its task.log still collected.
func (c *Controller) collectOutput(ctx context.Context, n *nodeRuntime, r domain.Attempt, src, tmp string, files []nodes.FileInfo, refused error, room *roomClaim) (manifest []store.File, changed wire.CollectEnd, err error) {
	maxBytes := c.config().Controller.CollectMaxBytes
	if refused != nil {
		return nil, changed, nil // nothing of it is copied: output/ stays empty
	}
	var total int64
	if regularFiles(files) > tarThreshold {
		// Many files travel as one archive: one transfer instead of
		// one per file; the node holds it to the room left now.
		left := room.remaining()
		limit, byRoom := min(maxBytes, left), left < maxBytes
		manifest, err = c.fetchTree(ctx, n, r, path.Join(src, "output"), filepath.Join(tmp, "output"), files, limit, room)
		if byRoom && errors.Is(err, errOverQuota) || errors.Is(err, errRoomSpent) {
			return nil, changed, c.noRoom(r.Project, "output/")
		}
		if err != nil {
			return nil, changed, err
		}
		files = nil // fetched
	}
	for _, f := range files {
		if !f.Mode.IsRegular() {
			continue // symlinks and the like are not copied off a node
		}
		local, err := safeJoin(filepath.Join(tmp, "output"), f.Path)
		if err != nil {
			return nil, changed, err
		}
		// The file may have grown since the listing: the quota holds
		// for what is actually copied, and so does the room.
		sum, size, change, err := c.fetchListed(ctx, n, path.Join(src, "output", f.Path), local, f, maxBytes-total, room)
		if change != nil {
			changed.Change(*change)
		}
		if change != nil && change.Now < 0 {
			continue // removed since the listing
		}
		if errors.Is(err, errRoomSpent) {
			return nil, changed, c.noRoom(r.Project, "output/")
		}
		if err != nil {
			return nil, changed, err
		}
		total += size
		manifest = append(manifest, store.File{Project: r.Project, Task: r.Task, Attempt: r.Attempt, Path: f.Path, Size: size, SHA256: sum})
	}
	return manifest, changed, nil
}

// placeCollected moves what was collected into tmp into place: the
// attempt's task.log under dest/attempts/<N>/ and, for the current
// attempt, its output/ (git-native: its diffstat) and task.log in dest.
func placeCollected(tmp, dest, attemptDir string, current, git bool) error {
	// Everything is on local disk now; move it into place.
	if err := os.MkdirAll(attemptDir, 0o755); err != nil {
		return err
	}
	if err := keepLog(filepath.Join(tmp, "task.log"), filepath.Join(attemptDir, "task.log")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if current {
		if err := os.RemoveAll(filepath.Join(dest, "output")); err != nil {
			return err
		}
		if git {
			// Its result is the branch; the diffstat says what it holds.
			if err := os.Rename(filepath.Join(tmp, "diffstat.txt"), filepath.Join(dest, "diffstat.txt")); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		} else if err := placeOutput(filepath.Join(tmp, "output"), filepath.Join(dest, "output")); err != nil {
			return err
		}
		// Replaced whole, never written in place: an ended run's archive
		// may hold a hard link to the file it replaces.
		if err := os.Rename(filepath.Join(tmp, "task.log"), filepath.Join(dest, "task.log")); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// keepLog gives the attempt's collected task.log (src) its name under
// attempts/<N>/ (dst): a hard link where the filesystem allows, a copy
// otherwise. Both names are only ever replaced whole (renamed over),
// never written in place, so sharing the file is safe — and saves a copy
// of every log of every task.
//
// dst is replaced only once the new name exists (a link made beside it,
// renamed over it): a node that sent no task.log this time leaves the
// one collected before.
func keepLog(src, dst string) error {
	tmp := dst + ".new"
	if err := os.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	err := os.Link(src, tmp)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return err
	case err != nil:
		if err := filetree.CopyFile(src, tmp); err != nil {
			os.Remove(tmp)
			return err
		}
	}
	return os.Rename(tmp, dst)
}

// placeOutput moves the collected output/ (src) to dst; an attempt that
// left no file has no src: dst is an empty directory.
func placeOutput(src, dst string) error {
	err := os.Rename(src, dst)
	if errors.Is(err, fs.ErrNotExist) {
		if _, serr := os.Lstat(src); errors.Is(serr, fs.ErrNotExist) {
			return os.Mkdir(dst, 0o755)
		}
	}
	return err
}

// remoteArchive runs argv, a wrapper command that writes the file archive
// on n, within the call's deadline plus extra (for the archive's size);
// remove removes the archive, whatever happened (call it when done).
func (c *Controller) remoteArchive(ctx context.Context, n *nodeRuntime, archive string, extra time.Duration, argv []string) (res nodes.Result, remove func(), err error) {
	cctx, cancel := context.WithTimeout(ctx, c.callTimeout()+extra)
	res, err = n.tr.Exec(cctx, argv, nil)
	cancel()
	return res, func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.callTimeout())
		defer cancel()
		_ = n.tr.Remove(rctx, archive)
	}, err
}

// tarThreshold is the number of output files above which a collection
// fetches output/ as one tar archive: below it, a few transfers of their
// own cost less than starting `wrapper tar`.
const tarThreshold = 16

func regularFiles(files []nodes.FileInfo) int {
	n := 0
	for _, f := range files {
		if f.Mode.IsRegular() {
			n++
		}
	}
	return n
}

// fetchTree copies the regular files under remote (an attempt's output/) to
// local as one tar archive that `wrapper tar` makes beside it and that is
// removed afterwards, holding the content to limit bytes on both sides, and
// returns the manifest. files is the listing the quota was checked on; the
// archive's own deadline grows with its size.
func (c *Controller) fetchTree(ctx context.Context, n *nodeRuntime, r domain.Attempt, remote, local string, files []nodes.FileInfo, limit int64, room *roomClaim) ([]store.File, error) {
	inst := n.installed()
	if inst == nil {
		return nil, fmt.Errorf("the wrapper on %s is being checked again", n.cfg.Name)
	}
	var listed int64
	for _, f := range files {
		listed += max(f.Size, 0)
	}
	archive := path.Join(path.Dir(remote), ".output.tar")
	res, removeArchive, err := c.remoteArchive(ctx, n, archive, time.Duration(min(listed, limit)/(4<<20))*time.Second,
		[]string{inst.Path, "tar", "--dir", remote, "--out", archive, "--max-bytes", strconv.FormatInt(limit, 10)})
	defer removeArchive()
	if err != nil {
		return nil, err
	}
	if res.ExitCode != 0 {
		var e wire.ErrorReply
		if json.Unmarshal(res.Stdout, &e) == nil && e.Kind == wire.KindTooLarge {
			return nil, errOverQuota
		}
		return nil, errors.New(policy.ReplyError(res, nil))
	}
	pr, pw := io.Pipe()
	fetched := make(chan struct{})
	go func() {
		defer close(fetched)
		pw.CloseWithError(nodes.GetIdle(ctx, n.tr, archive, pw, c.transferIdle()))
	}()
	// Closing the reader ends a transfer still writing; the transfer is
	// over before this returns (the node's transport may be closed next).
	defer func() { pr.Close(); <-fetched }()
	var manifest []store.File
	seen := map[string]bool{}
	left := limit
	tr := tar.NewReader(pr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return manifest, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read the archive of output/: %w", err)
		}
		if h.Typeflag != tar.TypeReg {
			continue // `wrapper tar` writes none; a node may
		}
		name := path.Clean(h.Name)
		if seen[name] {
			return nil, fmt.Errorf("the archive of output/ names %q twice", h.Name)
		}
		seen[name] = true
		if len(seen) > c.config().Controller.CollectMaxFiles {
			// The node's archive holds more than its listing did.
			return nil, permanent(fmt.Errorf("output/ holds more than collect_max_files (%d) files: nothing of it collected", c.config().Controller.CollectMaxFiles))
		}
		dst, err := safeJoin(local, h.Name)
		if err != nil {
			return nil, err
		}
		sum, size, err := writeLocal(dst, fs.FileMode(h.Mode).Perm(), tr, left, room)
		if err != nil {
			return nil, err
		}
		left -= size
		manifest = append(manifest, store.File{Project: r.Project, Task: r.Task, Attempt: r.Attempt,
			Path: name, Size: size, SHA256: sum})
	}
}

// noRoom is the error of a collection that stopped copying what (output/
// or task.log) to keep collectFreeMargin free: it is tried again.
func (c *Controller) noRoom(project, what string) error {
	return fmt.Errorf("not enough free space under %s: %s is larger than the room left, and %s must stay free\n  fix: free space on the controller's disk; the collection is tried again",
		home.RunsDir(c.opts.Home, project), what, mib(collectFreeMargin))
}

// attemptFiles finds where attempt r's files are on its node: still in the
// task directory, or moved to attempts/<n>/ by a later attempt there. It
// returns "" when neither holds that attempt's status.json. When the
// tick's pull p saw the attempt in its task directory, that is where it
// is: no status.json is read.
func (c *Controller) attemptFiles(ctx context.Context, n *nodeRuntime, r domain.Attempt, p *pull) (string, error) {
	inst := n.installed()
	if inst == nil {
		return "", fmt.Errorf("the wrapper on %s is being checked again", n.cfg.Name)
	}
	dir := taskDir(inst, r.Project, r.Task)
	if p != nil && p.err == nil {
		if ts := p.tasks[taskKey(r.Project, r.Task)]; ts != nil && ts.Status != nil && ts.Status.Attempt == r.Attempt {
			return dir, nil
		}
	}
	for _, src := range []string{dir, path.Join(dir, "attempts", strconv.Itoa(r.Attempt))} {
		var b bytes.Buffer
		cctx, cancel := context.WithTimeout(ctx, c.callTimeout())
		err := n.tr.Get(cctx, path.Join(src, "status.json"), &limitWriter{w: &b, left: maxStatusSize})
		cancel()
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if errors.Is(err, errOverQuota) || errors.Is(err, nodes.ErrNotFollowed) {
			return "", permanent(fmt.Errorf("status.json of the attempt: %w", err))
		}
		if err != nil {
			return "", err
		}
		var st wire.Status
		if json.Unmarshal(b.Bytes(), &st) == nil && st.Attempt == r.Attempt {
			return src, nil
		}
	}
	return "", nil
}

func (c *Controller) walk(ctx context.Context, n *nodeRuntime, dir string) ([]nodes.FileInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, c.callTimeout())
	defer cancel()
	return n.tr.Walk(ctx, dir)
}

// fetchLog copies the task.log at remote on n, whose size was read as
// size and claimed, to local, no further than that size: what it grew by
// since (a process the task left behind still writing to it) stays on the
// node, as the wrapper's collect leaves it; one cut short since is copied
// short. lc says which, and by how much: the bytes the copy was offered
// past size, or the growth a second read of its size shows when that is
// more; less (the log was rotated or cut again since), the former, as a
// floor. More than limit bytes is an error wrapping errOverQuota; the
// transfer is bounded by progress (transferIdle), not by its duration.
func (c *Controller) fetchLog(ctx context.Context, n *nodeRuntime, remote, local string, size, limit int64, room *roomClaim) (lc logChange, err error) {
	lc.path = remote
	lw := &listedWriter{left: size}
	_, copied, err := writeCapped(local, 0o644, limit, room, func(w io.Writer) error {
		lw.w = w
		if err := nodes.GetIdle(ctx, n.tr, remote, lw, c.transferIdle()); !errors.Is(err, errPastListing) {
			return err
		}
		return nil
	})
	switch {
	case err != nil:
		return lc, err
	case lw.refused > 0:
		lc.grew, lc.atLeast = lw.refused, true
		if now, serr := c.logSize(ctx, n, remote); serr == nil && now-size >= lw.refused {
			lc.grew, lc.atLeast = now-size, false
		}
	case copied < size:
		lc.shrank = size - copied
	}
	return lc, nil
}

// fetchListed fetches the output/ file f, listed at f.Size bytes, as
// fetch does, but no more than its listed size: a file that grew since
// is taken as listed, one removed is not taken; change says which.
func (c *Controller) fetchListed(ctx context.Context, n *nodeRuntime, remote, local string, f nodes.FileInfo, limit int64, room *roomClaim) (string, int64, *wire.CollectChange, error) {
	var change *wire.CollectChange
	sum, size, err := writeCapped(local, f.Mode.Perm(), limit, room, func(w io.Writer) error {
		err := nodes.GetIdle(ctx, n.tr, remote, &listedWriter{w: w, left: f.Size}, c.transferIdle())
		if errors.Is(err, errPastListing) {
			change = &wire.CollectChange{Path: f.Path, Listed: f.Size, Now: f.Size + 1} // grew: how much is not read
			return nil
		}
		return err
	})
	if errors.Is(err, fs.ErrNotExist) {
		return "", 0, &wire.CollectChange{Path: f.Path, Listed: f.Size, Now: -1}, nil
	}
	if err == nil && change == nil && size != f.Size {
		change = &wire.CollectChange{Path: f.Path, Listed: f.Size, Now: size}
	}
	return sum, size, change, err
}

// writeLocal writes r to the new file dst, at most limit bytes (more is
// errOverQuota) drawn from room, and returns its sha256 and size.
func writeLocal(dst string, perm fs.FileMode, r io.Reader, limit int64, room *roomClaim) (string, int64, error) {
	return writeCapped(dst, perm, limit, room, func(w io.Writer) error {
		buf := copyBufs.Get().(*[32 << 10]byte)
		defer copyBufs.Put(buf)
		_, err := io.CopyBuffer(w, r, buf[:])
		return err
	})
}

// copyBufs are writeLocal's buffers: io.Copy from a collect stream's tar
// entry made one of 32 KiB for each file, a quarter of what the
// controller allocated for 200 no-op tasks (issue 35).
var copyBufs = sync.Pool{New: func() any { return new([32 << 10]byte) }}

// writeCapped makes the file dst (and its directories), mode perm and
// writable by its owner, fills it with what fill writes, at most limit
// bytes (more is errOverQuota) and each chunk drawn from room first (past
// it, the claim's error; nil draws nothing), and returns its sha256 and size.
// Every collected file is written here: a fetch off the node, an entry of
// an archive or of a collect stream. A failed file is removed, and what it
// drew given back.
func writeCapped(dst string, perm fs.FileMode, limit int64, room *roomClaim, fill func(io.Writer) error) (string, int64, error) {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return "", 0, err
	}
	f, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, perm|0o200)
	if err != nil {
		return "", 0, err
	}
	sum := sha256.New()
	cw := &countWriter{w: io.MultiWriter(f, sum)}
	var w io.Writer = &limitWriter{w: cw, left: limit}
	var rw *roomWriter
	if room != nil {
		rw = &roomWriter{w: w, room: room}
		w = rw
	}
	err = fill(w)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		if os.Remove(dst) == nil && rw != nil {
			room.freed(rw.drawn)
		}
		return "", cw.n, err
	}
	return hex.EncodeToString(sum.Sum(nil)), cw.n, nil
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// safeJoin joins a node-supplied relative path under dir, refusing any path
// that would escape it.
func safeJoin(dir, rel string) (string, error) {
	clean := path.Clean("/" + rel)
	if clean == "/" || strings.Contains(rel, "\x00") {
		return "", fmt.Errorf("refusing file name %q from node", rel)
	}
	return filepath.Join(dir, filepath.FromSlash(clean[1:])), nil
}
