package controller

import (
	"archive/tar"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dispatch-tool/dispatch/controller/executor"
	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/home"
	"github.com/dispatch-tool/dispatch/internal/crashpoint"
	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/policy"
	"github.com/dispatch-tool/dispatch/store"
	"github.com/dispatch-tool/dispatch/wire"
)

// streamItem is one attempt of a node's collect stream (`wrapper
// collect`): what was asked of it and what came back.
type streamItem struct {
	r       domain.Attempt
	current bool
	git     *gitAttempt // a git-native task: its commit is fetched after the stream
	output  bool        // output/ was asked for
	tmp     string      // where its files land before placeCollected
	dir     string      // its task directory on the node, as the request names it
	asked   int64       // the room left when the stream was asked for
	others  roomWait    // what other collections held then
	room    *roomClaim  // its claim on the ledger, drawn from as files are written

	head     *wire.CollectHead
	err      error // what went wrong with it: its files are dropped
	gotLog   bool
	ended    bool             // its end entry came: every file it announced was sent
	end      *wire.CollectEnd // what the end entry says was sent (nil from an older wrapper's empty one)
	manifest []store.File
	seen     map[string]bool
	total    int64 // bytes of output/ written
	placed   bool  // its files were moved into place (or that began)
}

// errNoRoomLog and errNoRoomOutput are a collection that stopped to keep
// the controller's free space, at task.log or in output/.
var (
	errNoRoomLog    = errors.New("not enough free space for task.log")
	errNoRoomOutput = errors.New("not enough free space for output/")
)

// noRoomFor is c.noRoom of the file err stopped at, or nil.
func (c *Controller) noRoomFor(project string, err error) error {
	switch {
	case errors.Is(err, errNoRoomLog):
		return c.noRoom(project, "task.log")
	case errors.Is(err, errNoRoomOutput):
		return c.noRoom(project, "output/")
	}
	return nil
}

// maxCollectHead caps an attempt's head in a collect stream.
const maxCollectHead = 64 << 10

// collectStream collects a node's finished attempts in one `wrapper
// collect` call: one stream of all their task.logs and output/s, read
// as it comes (bounded by progress, never whole in memory) and checked
// entry by entry as collectOutput checks files. What a node sends wrong
// fails only the attempt it names.
func (c *Controller) collectStream(ctx context.Context, n *nodeRuntime, tr nodes.ExecToer, runs []domain.Attempt, roles map[string]collectRole, round *roomRound) []collected {
	out := make([]collected, 0, len(runs))
	items := make([]*streamItem, 0, len(runs))
	noRooms := map[string]error{}
	for _, r := range runs {
		role := roles[collectKey(r)]
		noRoom, ok := noRooms[r.Project]
		if !ok {
			noRoom = c.roundRoom(round, r.Project)
			noRooms[r.Project] = noRoom
		}
		it, err := c.prepareItem(ctx, r, role, round, noRoom)
		if err != nil {
			out = append(out, c.outcome(ctx, r, role.current, nil, err))
			continue
		}
		defer it.discard()
		items = append(items, it)
	}
	if len(items) == 0 {
		return out
	}
	err := c.runCollectStream(ctx, n, tr, items)
	for _, it := range items {
		if it.err == nil && it.head == nil {
			it.err = errors.New("the node's collect stream left this attempt out")
			if err != nil {
				it.err = err
			}
		}
		it.room.release()
		rec, ferr := c.finishItem(ctx, n, it)
		out = append(out, c.outcome(ctx, it.r, it.current, rec, ferr))
	}
	return out
}

// roundRoom is why project's attempts have no room in round, or nil: the
// free space under runs/ is read once a round, not once a stream or an
// attempt.
func (c *Controller) roundRoom(round *roomRound, project string) error {
	dir := home.RunsDir(c.opts.Home, project)
	free, err := round.figure()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	_, err = roomFrom(dir, "output/", 0, free)
	return err
}

// readRunsFree is the free space under the home's runs/, for the
// controller's roomLedger.
func (c *Controller) readRunsFree() (int64, error) {
	root := home.RunsRoot(c.opts.Home)
	if err := os.MkdirAll(root, 0o700); err != nil {
		return 0, err
	}
	free, err := diskFree(root)
	if err != nil {
		return 0, fmt.Errorf("free space under %s: %w", root, err)
	}
	return free, nil
}

// prepareItem makes attempt r's staging directory and reads what its
// collection needs from the database; noRoom is why its project has no
// room in round, if it has none.
func (c *Controller) prepareItem(ctx context.Context, r domain.Attempt, role collectRole, round *roomRound, noRoom error) (*streamItem, error) {
	current := role.current
	git, err := c.gitTask(ctx, r, role)
	if err != nil {
		return nil, err
	}
	if noRoom != nil {
		return nil, noRoom
	}
	runs := home.RunsDir(c.opts.Home, r.Project)
	room := round.open()
	it := &streamItem{r: r, current: current, git: git, output: current && git == nil, asked: room.remaining(), others: room.others(0), room: room, seen: map[string]bool{},
		tmp: filepath.Join(runs, fmt.Sprintf(".%s.%d.collecting", r.Task, r.Attempt))}
	if err := os.RemoveAll(it.tmp); err != nil {
		return nil, err
	}
	// output/ is made by its first file (writeLocal); an attempt that left
	// none gets an empty one in place (placeCollected).
	if err := os.MkdirAll(it.tmp, 0o755); err != nil {
		return nil, err
	}
	return it, nil
}

// runCollectStream asks n's wrapper for items' files and reads its
// stream into them: over the node's collect conversation when one is held
// (executor.Collector), else, or when the request reached no wrapper that
// answers it, with one `wrapper collect` exec. The error is the stream's:
// the attempts it had not finished sending get it.
func (c *Controller) runCollectStream(ctx context.Context, n *nodeRuntime, tr nodes.ExecToer, items []*streamItem) error {
	inst := n.installed()
	if inst == nil {
		return fmt.Errorf("the wrapper on %s is being checked again", n.cfg.Name)
	}
	q := c.config().Controller
	var req wire.CollectRequest
	for _, it := range items {
		it.dir = taskDir(inst, it.r.Project, it.r.Task)
		req.Attempts = append(req.Attempts, wire.CollectItem{Dir: it.dir, Attempt: it.r.Attempt,
			Output: it.output, MaxFiles: q.CollectMaxFiles, MaxBytes: min(q.CollectMaxBytes, it.asked)})
	}
	stdin, err := json.Marshal(req)
	if err != nil {
		return err
	}
	var cr streamReader
	read := func(send collectSender) error {
		sctx, cut := context.WithCancelCause(ctx)
		defer cut(nil)
		cr = streamReader{items: items, maxFiles: q.CollectMaxFiles, maxBytes: q.CollectMaxBytes, bound: c.claimDeadline, blocking: c.waitingForRoomNow, cut: cut}
		return readCollect(sctx, &cr, streamBudget(req), send)
	}
	rerr := errNotAnswered
	if cl, ok := n.exec.(executor.Collector); ok {
		rerr = read(c.converseCollect(cl, inst, stdin))
	}
	if errors.Is(rerr, errNotAnswered) {
		rerr = read(c.execCollect(tr, inst, stdin))
	}
	if rerr != nil {
		err := fmt.Errorf("collect stream from %s: %w", n.cfg.Name, rerr)
		if errors.Is(rerr, errClaimDeadline) && cr.last < len(cr.items) {
			// The attempt past its deadline counts a try; those the
			// stream had not reached are tried again, none counted.
			cr.items[cr.last].err = nil // its read saw the stream cut, not why
			cr.items[cr.last].fail(err)
			cr.last++
			err = fmt.Errorf("%w: %w", errNotReached, err)
		}
		cr.failRest(err)
	}
	return rerr
}

// collectSender sends a node's collect request and copies the tar stream
// it answers to w. said is the node's own word on a failure (a request it
// refused, an error it ended the stream with), err the transport's.
type collectSender func(ctx context.Context, w io.Writer) (said, err error)

// errNotAnswered is a collectSender's error when the request reached no
// wrapper that answers it, and nothing of a stream came: the exec is tried.
var errNotAnswered = errors.New("the collect conversation did not answer")

// readCollect runs send and reads the stream it copies into cr, at most
// budget bytes of it, as it comes.
func readCollect(ctx context.Context, cr *streamReader, budget int64, send collectSender) error {
	pr, pw := io.Pipe()
	type sent struct{ said, err error }
	ran := make(chan sent, 1)
	go func() {
		said, err := send(ctx, pw)
		pw.CloseWithError(err)
		ran <- sent{said, err}
	}()
	// A stream cut (a claim past its deadline) stops the read at once.
	defer context.AfterFunc(ctx, func() { pr.CloseWithError(context.Cause(ctx)) })()
	rerr := readBudgeted(cr, &io.LimitedReader{R: pr, N: budget})
	pr.CloseWithError(errors.New("the controller stopped reading the collect stream"))
	s := <-ran
	if cause := context.Cause(ctx); errors.Is(cause, errClaimDeadline) {
		return cause // the reader saw a closed pipe
	}
	switch {
	case errors.Is(s.err, errNotAnswered), s.said != nil:
		return cmp.Or(s.err, s.said)
	case rerr != nil:
		return rerr
	}
	return s.err
}

// execCollect sends the collect request with one `wrapper collect` exec.
func (c *Controller) execCollect(tr nodes.ExecToer, inst *nodes.Installed, stdin []byte) collectSender {
	return func(ctx context.Context, w io.Writer) (error, error) {
		res, err := nodes.ExecToIdle(ctx, tr, []string{inst.Path, "collect"}, stdin, w, c.transferIdle())
		if err == nil && res.ExitCode != 0 {
			// A wrapper that refused the request says why on stderr.
			res.Stdout = res.Stderr
			return errors.New(policy.ReplyError(res, nil)), nil
		}
		return nil, err
	}
}

// converseCollect sends the collect request over the node's collect
// conversation: errNotAnswered when none is held, the request could not be
// written, or the command ended (or is no `collect --serve`) before any
// frame of an answer, as nothing of the request was done then.
func (c *Controller) converseCollect(cl executor.Collector, inst *nodes.Installed, stdin []byte) collectSender {
	return func(ctx context.Context, w io.Writer) (error, error) {
		var fr *wire.CollectFrameReader
		err := cl.Collect(ctx, inst, stdin, c.transferIdle(), func(r io.Reader) error {
			fr = wire.NewCollectFrameReader(r)
			_, err := io.Copy(w, fr)
			return err
		})
		switch {
		case err != nil && notAnswered(err):
			return nil, fmt.Errorf("%w: %w", errNotAnswered, err)
		case err != nil:
			// fr may be read still, by a read given up on.
			return nil, err
		case fr == nil || fr.Done() == nil:
			return nil, errors.New("the collect conversation ended without its answer's end")
		}
		return fr.Done().Err(), nil
	}
}

// notAnswered reports a conversation's error that left the request
// undone: none of these comes once a frame of the answer arrived.
func notAnswered(err error) bool {
	for _, e := range []error{executor.ErrNoConversation, nodes.ErrNotSent, nodes.ErrConversationClosed, wire.ErrCollectNoAnswer} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// failRest fails the attempt the stream was at when it ended and those
// after it: a stream cut (by the transport, or a wrapper that died) often
// ends cleanly before a tar header, so the last attempt seen may be partial.
func (s *streamReader) failRest(err error) {
	for _, it := range s.items[s.last:] {
		it.fail(err)
	}
}

// streamBudget is the most a collect stream for req may carry: each
// attempt's task.log and output/ at their quotas, and a tar header for
// every file. Past it the node is sending what no attempt holds (an entry
// of a terabyte the controller would skip for hours): the stream ends.
func streamBudget(req wire.CollectRequest) int64 {
	var b int64
	for _, it := range req.Attempts {
		b += 2*max(it.MaxBytes, 0) + int64(it.MaxFiles+4)*4<<10 + maxCollectHead
	}
	return b
}

// readBudgeted reads the collect stream in, whose N is what the stream
// may carry, into cr, and then what follows the archive's end (its last
// block's padding), so that the command can exit.
func readBudgeted(cr *streamReader, in *io.LimitedReader) error {
	err := cr.read(in)
	if err == nil {
		_, err = io.Copy(io.Discard, in)
	}
	if in.N <= 0 {
		return errors.New("the collect stream is larger than its attempts' quotas allow")
	}
	return err
}

// streamReader reads a collect stream into its items, checking every
// entry: it names a requested attempt, in order, a file its head said
// follows, a path inside its output/, once; output/ holds at most
// maxFiles files and maxBytes bytes (and what the free space allows).
type streamReader struct {
	items    []*streamItem
	maxFiles int
	maxBytes int64
	last     int // the attempt entries come for; those before it are whole, it may not be

	// bound is how long the stream may take to send n bytes an attempt
	// claimed; past it, cut ends the stream (nil: no bound) when
	// blocking says that some collection waits for room now (nil:
	// always). With none waiting, a slow link goes on, bounded by
	// transfer_idle alone, for another such time.
	bound    func(n int64) time.Duration
	blocking func() bool
	cut      func(error)

	mu    sync.Mutex  // guards timer and gen: the deadline fires on a goroutine of its own
	timer *time.Timer // the claim being sent's deadline
	gen   int         // moves at each arm and disarm: a deadline of an earlier one does nothing
}

// errNotReached is the outcome of an attempt a stream was cut before it
// reached (another attempt's claim past its deadline): it is collected
// again in a later round, no try counted.
var errNotReached = errors.New("not reached before the stream was cut")

// errClaimDeadline is a stream cut because it did not send what an
// attempt claimed in time.
var errClaimDeadline = errors.New("the node did not send what the attempt claimed in time")

// claimMinRate is the slowest, in bytes a second, a collect stream may
// send what an attempt claimed, past transfer_idle: a stream that trickles
// a byte within each transfer_idle is never idle, and would hold its claim,
// and the attempts waiting for that room, for ever. Tests change it.
var claimMinRate int64 = 1 << 20

// claimDeadline is how long a collect stream may take to send n bytes an
// attempt claimed, as remoteArchive's deadline grows with the archive.
func (c *Controller) claimDeadline(n int64) time.Duration {
	return c.transferIdle() + time.Duration(float64(n)/float64(max(claimMinRate, 1))*float64(time.Second))
}

// arm starts the deadline of a claim of n bytes: past it, while other
// collections wait for room, the stream is cut, its error counted as the
// attempt's try (as a stalled transfer's), and the claim given back.
func (s *streamReader) arm(n int64) {
	s.disarm()
	if s.bound == nil || n <= 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.schedule(s.gen, s.bound(n), n)
}

// schedule sets the deadline d of arm's gen (s.mu held).
func (s *streamReader) schedule(gen int, d time.Duration, n int64) {
	s.timer = time.AfterFunc(d, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if gen != s.gen {
			return // disarmed, or armed for another claim
		}
		if s.blocking != nil && !s.blocking() {
			s.schedule(gen, d, n)
			return
		}
		s.cut(fmt.Errorf("%w: %s within %s (transfer_idle, and a second for each %s) while other collections waited for room: the stream is cut and its room given back",
			errClaimDeadline, mib(n), d, mib(claimMinRate)))
	})
}

// disarm stops the deadline of the claim being sent, if any.
func (s *streamReader) disarm() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gen++
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
}

// read reads the stream r to its end. Its error is the stream's (it is not
// a tar archive); what is wrong with an entry fails the attempt it names.
func (s *streamReader) read(r io.Reader) error {
	defer s.disarm()
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil // s.last stays: a cut stream ends here too
		}
		if err != nil {
			return fmt.Errorf("read the collect stream: %w", err)
		}
		idx, rest, ok := strings.Cut(h.Name, "/")
		i, aerr := strconv.Atoi(idx)
		if !ok || aerr != nil || i < 0 || i >= len(s.items) || h.Typeflag != tar.TypeReg {
			continue // names no attempt asked for, or not a file: never written
		}
		it := s.items[i]
		switch {
		case i < s.last:
			it.fail(fmt.Errorf("the collect stream sent %q after the next attempt's files", h.Name))
			continue
		case i > s.last:
			s.movedPast(i)
		}
		if it.err == nil {
			it.fail(s.entry(it, rest, h, tr))
		}
		if it.err != nil || it.ended {
			s.disarm()
		}
	}
}

// movedPast moves the stream on to attempt i: an attempt before it gets
// no more files, and gives back what it claimed and did not write now,
// not when the whole stream ends (one without its end entry is not
// whole: see arrived).
func (s *streamReader) movedPast(i int) {
	for _, it := range s.items[s.last:i] {
		if it.room != nil {
			it.room.release()
		}
	}
	s.disarm()
	s.last = i
}

// fail fails the attempt with err (the first error stays), and gives
// back at once what it claimed and did not write, and what it wrote (its
// files are removed: a failed attempt's are never placed): its stream may
// go on for a while.
func (it *streamItem) fail(err error) {
	if it.err == nil {
		it.err = err
	}
	if it.err != nil && it.room != nil {
		it.room.release()
		it.discard()
	}
}

// discard removes the attempt's staging directory and, unless what it
// held was placed, gives back what it wrote there.
func (it *streamItem) discard() {
	if err := os.RemoveAll(it.tmp); err == nil && !it.placed && it.room != nil {
		it.room.discard()
	}
}

// entry takes one entry of attempt it; the error fails the attempt.
func (s *streamReader) entry(it *streamItem, name string, h *tar.Header, r io.Reader) error {
	switch {
	case it.ended:
		return fmt.Errorf("the collect stream sent %q after the attempt's end", h.Name)
	case name == wire.CollectHeadName:
		if err := it.readHead(h, r); err != nil {
			return err
		}
		n, err := it.claimRoom(s.maxBytes)
		if err == nil {
			s.arm(n)
		}
		return err
	case it.head == nil:
		return fmt.Errorf("the collect stream sent %q before the attempt's head", h.Name)
	case name == wire.CollectEndName:
		it.ended = true
		it.room.release()
		return it.readEnd(r)
	case name == wire.CollectErrorName:
		msg, _ := io.ReadAll(io.LimitReader(r, 1024))
		return fmt.Errorf("the node could not send the attempt's files: %s", wire.ClampMessage(string(msg)))
	case name == "task.log":
		if it.head.Log != wire.CollectSent || it.gotLog {
			return fmt.Errorf("the collect stream sent a task.log it did not announce")
		}
		it.gotLog = true
		_, _, err := writeLocal(filepath.Join(it.tmp, "task.log"), 0o644, r, s.maxBytes, it.room)
		if errors.Is(err, errRoomSpent) {
			return errNoRoomLog
		}
		return err
	case strings.HasPrefix(name, "output/"):
		return s.outputFile(it, strings.TrimPrefix(name, "output/"), h, r)
	}
	return fmt.Errorf("the collect stream sent an unexpected entry %q", h.Name)
}

// claimRoom claims what the head says follows: the attempt's files draw
// from the claim.
func (it *streamItem) claimRoom(maxBytes int64) (int64, error) {
	log, output := claimOf(it.head, it.output, min(maxBytes, it.asked))
	err := it.room.claim(log + output)
	switch {
	case !errors.Is(err, errRoomSpent):
		return log + output, err // nil, or errRoomBusy
	case log > it.room.remaining():
		return 0, errNoRoomLog
	}
	return 0, errNoRoomOutput
}

// claimOf is what an attempt whose head is h claims (output: its output/
// was asked for): what the head says follows, each part no more than
// limit, the most the request let the node send of it. A head of a few
// bytes holds no more room than its attempt may write.
func claimOf(h *wire.CollectHead, output bool, limit int64) (log, out int64) {
	if h.Log == wire.CollectSent {
		log = min(max(h.LogSize, 0), limit)
	}
	if output && h.Output == wire.CollectSent {
		out = min(max(h.Bytes, 0), limit)
	}
	return log, out
}

// readHead reads an attempt's head and checks its words.
func (it *streamItem) readHead(h *tar.Header, r io.Reader) error {
	if it.head != nil {
		return errors.New("the collect stream sent the attempt's head twice")
	}
	if h.Size > maxCollectHead {
		return fmt.Errorf("the attempt's head in the collect stream is larger than %d KiB", maxCollectHead>>10)
	}
	var head wire.CollectHead
	if err := json.NewDecoder(io.LimitReader(r, maxCollectHead)).Decode(&head); err != nil {
		return fmt.Errorf("the attempt's head in the collect stream: %w", err)
	}
	known := func(s string, empty bool) bool {
		switch s {
		case wire.CollectSent, wire.CollectMissing, wire.CollectNotFollowed, wire.CollectOverQuota, wire.CollectError:
			return true
		}
		return empty && s == ""
	}
	if head.Found && (!known(head.Log, false) || !known(head.Output, !it.output)) {
		return fmt.Errorf("the attempt's head in the collect stream says task.log %q, output/ %q", head.Log, head.Output)
	}
	if head.LogSize < 0 || head.Files < 0 || head.Bytes < 0 {
		return fmt.Errorf("the attempt's head in the collect stream says task.log of %d bytes, output/ of %d files, %d bytes: a count below zero", head.LogSize, head.Files, head.Bytes)
	}
	it.head = &head
	return nil
}

// outputFile takes the file rel of an attempt's output/.
func (s *streamReader) outputFile(it *streamItem, rel string, h *tar.Header, r io.Reader) error {
	if !it.output || it.head.Output != wire.CollectSent {
		return fmt.Errorf("the collect stream sent output/%s, which it did not announce", rel)
	}
	// The name it is written under, and recorded under: inside output/.
	name := strings.TrimPrefix(path.Clean("/"+rel), "/")
	if it.seen[name] {
		return fmt.Errorf("the collect stream names output/%s twice", rel)
	}
	it.seen[name] = true
	if len(it.seen) > s.maxFiles {
		return permanent(fmt.Errorf("output/ holds more than collect_max_files (%d) files: nothing of it collected", s.maxFiles))
	}
	dst, err := safeJoin(filepath.Join(it.tmp, "output"), rel)
	if err != nil {
		return err
	}
	sum, n, err := writeLocal(dst, fs.FileMode(h.Mode).Perm(), r, s.maxBytes-it.total, it.room)
	if errors.Is(err, errRoomSpent) {
		return errNoRoomOutput
	}
	if err != nil {
		return err
	}
	it.total += n
	it.manifest = append(it.manifest, store.File{Project: it.r.Project, Task: it.r.Task, Attempt: it.r.Attempt,
		Path: name, Size: n, SHA256: sum})
	return nil
}

// finishItem judges what the stream brought of one attempt, as collect
// judges what it fetched, and moves it into place; it returns what to
// record.
func (c *Controller) finishItem(ctx context.Context, n *nodeRuntime, it *streamItem) (txFunc, error) {
	if room := c.noRoomFor(it.r.Project, it.err); room != nil {
		return nil, room
	}
	if err := it.arrived(); err != nil {
		return nil, err
	}
	if !it.head.Found {
		return goneRecord(ctx, it.r), nil
	}
	if err := it.checkLog(c.config().Controller.CollectMaxBytes); err != nil {
		if room := c.noRoomFor(it.r.Project, err); room != nil {
			return nil, room
		}
		return nil, err
	}
	manifest, refused, err := c.judgeOutput(it)
	if err != nil {
		return nil, err
	}
	if it.git != nil && it.r.Status == domain.Completed {
		manifest, err = c.collectCommit(ctx, n, it.r, it.git.task, it.git.repo, it.tmp)
		var perm *permanentError
		switch {
		case errors.As(err, &perm):
			refused = err
		case err != nil:
			return nil, err
		}
	}
	crashpoint.At(crashpoint.MidCollect)
	dest := filepath.Join(home.RunsDir(c.opts.Home, it.r.Project), it.r.Task)
	it.placed = true // placed, even partly: what moved is no longer tmp's to give back
	if err := placeCollected(it.tmp, dest, filepath.Join(dest, "attempts", strconv.Itoa(it.r.Attempt)), it.current, it.git != nil); err != nil {
		return nil, err
	}
	rec, err := c.collectedRecord(ctx, it.r, it.current, manifest, refused)
	if it.end == nil {
		return rec, err
	}
	end := *it.end
	if refused != nil {
		end = wire.CollectEnd{} // output/ is not collected: what changed there is moot
	}
	lc := logChange{grew: it.end.LogGrew, shrank: it.end.LogShrank, path: it.nodeLog()}
	return withChangedWarning(ctx, it.r, end, lc, rec), err
}

// nodeLog is where the attempt's task.log is on its node.
func (it *streamItem) nodeLog() string {
	dir := it.dir
	if it.head != nil && it.head.Moved {
		dir = path.Join(dir, "attempts", strconv.Itoa(it.r.Attempt))
	}
	return path.Join(dir, "task.log")
}

// arrived is why what the stream brought of the attempt is not whole: an
// entry that was wrong, or no end entry (the stream was cut short).
func (it *streamItem) arrived() error {
	if it.err == nil && !it.ended {
		return errors.New("the collect stream ended before the attempt's end entry (cut short): it is collected again")
	}
	return it.err
}

// checkLog judges the task.log the head announced.
func (it *streamItem) checkLog(maxBytes int64) error {
	switch it.head.Log {
	case wire.CollectSent:
		if !it.gotLog {
			return errors.New("the collect stream announced a task.log it did not send")
		}
	case wire.CollectNotFollowed:
		return permanent(fmt.Errorf("task.log of the attempt: %w", nodes.ErrNotFollowed))
	case wire.CollectOverQuota:
		if it.head.LogSize <= min(maxBytes, it.asked) {
			return fmt.Errorf("the node kept back a task.log of %s, within the quota", mib(it.head.LogSize))
		}
		if it.asked < maxBytes {
			return it.noRoom(it.head.LogSize, errNoRoomLog)
		}
		return fmt.Errorf("task.log of %s: %w", mib(it.head.LogSize), errOverQuota)
	case wire.CollectError:
		return fmt.Errorf("task.log of the attempt could not be read on the node %s", it.head.Error)
	}
	return nil
}

// judgeOutput judges the output/ the head announced: the manifest of what
// came, or why it is refused (the task fails, its task.log collected) or
// must be tried again (err).
func (c *Controller) judgeOutput(it *streamItem) (manifest []store.File, refused, err error) {
	if !it.output {
		return nil, nil, nil
	}
	h := it.head
	switch h.Output {
	case wire.CollectNotFollowed:
		refused = permanent(fmt.Errorf("output/ is not a directory, and a symbolic link is never followed: nothing of it collected (%w)", nodes.ErrNotFollowed))
	case wire.CollectError:
		return nil, nil, fmt.Errorf("output/ of the attempt: %s", h.Error)
	case wire.CollectOverQuota, wire.CollectSent:
		refused = c.quotaError(h.Files, h.Bytes)
		if refused == nil && h.Bytes > it.asked {
			free, _ := it.room.view()
			full := roomShort(home.RunsDir(c.opts.Home, it.r.Project), "output/", h.Bytes, free, it.others.held)
			return nil, nil, it.noRoom(h.Bytes, full)
		}
		if refused == nil && h.Output == wire.CollectOverQuota {
			return nil, nil, fmt.Errorf("the node kept back an output/ of %d files, %s, within the quotas", h.Files, mib(h.Bytes))
		}
	}
	if refused == nil && h.Output == wire.CollectSent {
		if err := it.checkReceived(); err != nil {
			return nil, nil, err
		}
	}
	if refused == nil {
		return it.manifest, nil, nil
	}
	if err := os.RemoveAll(filepath.Join(it.tmp, "output")); err != nil {
		return nil, nil, err
	}
	it.room.freed(it.total)
	return nil, refused, os.Mkdir(filepath.Join(it.tmp, "output"), 0o755)
}

// noRoom is why the node kept back need bytes the request's room did not
// allow: full when they would not fit even without what other collections
// held then, else errRoomBusy.
func (it *streamItem) noRoom(need int64, full error) error {
	if decideRoom(need, it.asked, it.others.held) == roomBusy {
		w := it.others
		w.need = need
		return w.err()
	}
	return full
}

// readEnd reads an attempt's end entry: empty from a wrapper before it
// said what it sent, else a wire.CollectEnd.
func (it *streamItem) readEnd(r io.Reader) error {
	b, err := io.ReadAll(io.LimitReader(r, maxCollectHead+1))
	if err != nil || len(b) == 0 {
		return err
	}
	if len(b) > maxCollectHead {
		return fmt.Errorf("the collect stream's end entry is larger than %d bytes", maxCollectHead)
	}
	var end wire.CollectEnd
	if err := json.Unmarshal(b, &end); err != nil {
		return fmt.Errorf("the collect stream's end entry: %v", err)
	}
	it.end = &end
	return nil
}

// checkReceived compares the output/ that arrived with what the end entry
// says was sent (or, from an older wrapper, what the head announced): a
// stream cut between two files ends as a whole archive does, and only this
// tells a partial output/ from the attempt's. The head counts links, which
// are never sent, and sizes as the node walked them; the node sends each
// file as walked, up to that size.
func (it *streamItem) checkReceived() error {
	if it.end != nil {
		if len(it.manifest) != it.end.Files || it.total != it.end.Bytes {
			return fmt.Errorf("the collect stream brought %d files, %d bytes of output/; the node sent %d files, %d bytes: it is collected again",
				len(it.manifest), it.total, it.end.Files, it.end.Bytes)
		}
		return nil
	}
	if len(it.manifest) > it.head.Files || it.total != it.head.Bytes {
		return fmt.Errorf("the collect stream brought %d files, %d bytes of output/; the node announced %d files, %d bytes: it is collected again",
			len(it.manifest), it.total, it.head.Files, it.head.Bytes)
	}
	return nil
}
