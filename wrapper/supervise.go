package wrapper

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/dispatch-tool/dispatch/internal/netallow"
	"github.com/dispatch-tool/dispatch/wire"
)

// Why an attempt is being stopped by the supervisor.
const (
	reasonKill    = "kill"
	reasonTimeout = "timeout"
	// reasonNotice: the tool announced a retry of a rate limit or of a
	// refused key (see retryNotice).
	reasonNotice = "notice"
	// reasonStall: the tool wrote nothing for stall_seconds.
	reasonStall = "stall"
	// reasonOOM and reasonPids: the watchdog found the attempt's processes
	// over their memory or pids limit (see limits.go).
	reasonOOM  = "oom"
	reasonPids = "pids"
)

// Log keys of the supervisor's wrapper.log.
const (
	logKeyDir        = "dir"
	logKeyPID        = "pid"
	logKeyTask       = "task"
	logKeyAttempt    = "attempt"
	logKeyToolPID    = "tool_pid"
	logKeyOldAttempt = "old_attempt"
	logKeyTo         = "to"
	logKeyReason     = "reason"
	logKeyGrace      = "grace"
	logKeyPGID       = "pgid"
	logKeyStatus     = "status"
	logKeyErrorClass = "error_class"
	logKeyError      = "error"
	logKeyErr        = "err"
	logKeyPath       = "path"
)

// lockWait is how long a new supervisor retries D/lock before deciding that
// another supervisor holds it; it only has to outlast a `status` probe.
const lockWait = 500 * time.Millisecond

// errStopped is returned by startChild once a stop has been asked for, so
// that nothing new starts after a kill or a timeout.
var errStopped = errors.New("attempt is stopping")

// supervisor runs one attempt of a task: setup, then the tool, under the
// timeout, writing heartbeat and status.json until the final status.
type supervisor struct {
	dir    string
	launch wire.Launch
	env    []string
	logger *slog.Logger
	tlog   *taskLog
	begun  time.Time
	hbSeq  int
	// activeAt is when the stall watch last saw the tool write (unix
	// nanoseconds; 0 while no stall watch runs): the heartbeat says how
	// long ago, for the dashboard's stall countdown.
	activeAt atomic.Int64

	mu         sync.Mutex // guards cur, stopReason, limitMsg, finishing, notice, noticeAt
	cur        *proc
	stopReason string
	limitMsg   string // why the watchdog stopped the attempt
	finishing  bool   // the tool has exited: a stop asked now is too late
	// deadline stops the attempt at its timeout; a gate stops it, having
	// its own. gating is set while the gate runs (no stall then).
	deadline *time.Timer
	gating   bool
	notice   notice
	noticeAt time.Time
	session  string // the tool's session id, as its output named it
	// toolStarted is set once the tool (not setup) runs: only its output
	// may name the session.
	toolStarted bool

	// bg counts the attempt's goroutines that touch its directory or log
	// in the background (removeOldTmps, watchStall, watchLimits): release
	// waits for them before it lets go of the lock.
	bg sync.WaitGroup

	// keptOutput is set when a resumed attempt kept the earlier output/.
	keptOutput bool

	// sandbox, when set, is the bwrap sandbox setup and the tool run in;
	// sandboxErr says why an attempt that must be sandboxed cannot be.
	sandbox    *sandboxSpec
	sandboxErr string
	// sandboxPermanent is set with sandboxErr when the launch itself is at
	// fault (no retry mends it); unset when the node's sandbox is
	// unavailable (another node's may work).
	sandboxPermanent bool
	// allow is the network allow list (launch.json's network "allow"),
	// served by proxy while the attempt runs.
	allow netallow.List
	proxy *netProxy
	// netRefused are the destinations the proxy refused (stopNet).
	netRefused []string
	// agentSrc is where the sandboxed agent CLI's files are copied from
	// (agentSrcDir: its directory variable's; see agentSource), or
	// agentSrcErr why not.
	agentSrc    string
	agentSrcDir bool
	agentSrcErr error

	rec procRecord // this attempt's process record; written by prepare and setTool only

	// cg is the attempt's cgroups (nil: none), made with its first limited
	// child (cgTried: once tried), before the watchdog of that child starts;
	// removed by endCgroup once attempt has returned.
	cg      *attemptCgroup
	cgTried bool
	// nproc is the RLIMIT_NPROC set on the last limited child (0: none),
	// the pids limit's backstop without a pids cgroup; written by limited,
	// read by finish, both in run's goroutine.
	nproc int

	lock    *os.File // the task's lock, held until the attempt has ended
	logFile *os.File // the attempt's wrapper.log

	statusMu sync.Mutex // serialises status.json writes; guards st, final
	st       wire.Status
	final    bool
}

// outcome is how the attempt ended, before the stop reason is applied.
type outcome struct {
	code     int
	sig      syscall.Signal
	startErr string // set when the tool never ran (class start)
	// confined is set when setup or the tool ran under bwrap: its
	// failure may be a write the sandbox refused (sandboxFailureNote).
	confined bool
	// toolMissing is set when the tool's executable is not in its PATH:
	// no retry can help, wherever it runs on this node.
	toolMissing bool
	// permanent is set when no retry can mend startErr (class
	// start_permanent): a tool the sandbox cannot run, a bad launch.
	permanent bool
	// commit is a git-native task's result; resultErr says why recording
	// it failed after the tool ended well.
	commit, resultErr string
	// gate is launch.json's gate's result, when it ran.
	gate *wire.GateResult
}

// superviseItem is one attempt of the document a supervisor reads on
// stdin: its task directory, its environment (secrets: kept in memory
// only), the attempt `run` recorded there and the descriptor of the task's
// lock, which `run` took and the supervisor inherits.
type superviseItem struct {
	Dir     string            `json:"dir"`
	Env     map[string]string `json:"env"`
	Task    string            `json:"task"`
	Attempt int               `json:"attempt"`
	LockFD  int               `json:"lock_fd"`
}

// firstLockFD is the descriptor of the first attempt's lock in the
// supervisor (after stdin, stdout and stderr), the next one's is the next.
const firstLockFD = 3

// maxSuperviseDoc caps the document a supervisor reads on stdin.
const maxSuperviseDoc = maxLaunchBatch

// supervise is the hidden subcommand `run` and `launch` start in a new
// session: one process supervises every attempt of one launch, so that a
// batch of attempts costs one process start on the node, not one each. It
// reads the attempts (directory, secret environment, the descriptor of
// each task's lock, which it inherits) from stdin, prepares each
// directory, and then runs the attempts side by side, each to its end,
// releasing each task's lock as its attempt ends. `run` has replied by
// then: an attempt that cannot start gets a failed status.json (class
// start) instead.
//
// Signals: SIGUSR1 asks it to look for kill requests (`kill` writes one
// per attempt in the private .ctl directory, then signals), so that one
// attempt is stopped without its neighbours; SIGTERM and SIGINT stop every
// attempt; SIGHUP is ignored.
func supervise(args []string, stdin io.Reader, stderr io.Writer) int {
	logger := slog.New(slog.NewTextHandler(stderr, nil)).With(logKeyPID, os.Getpid())
	fs := newFlagSet(superviseCommand)
	if err := parseFlags(fs, args); err != nil {
		logger.Error("supervise", logKeyErr, err)
		return 1
	}
	// Caught from the start, so that a `kill` arriving before the attempts
	// are under way stops them instead of killing the supervisor outright.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGUSR1)

	items, err := readSuperviseItems(stdin)
	if err != nil {
		// The locks close with this process: `status` sees no supervisor
		// and no status of the attempts, as after a crash.
		logger.Error("supervisor not started", logKeyErr, err)
		return 1
	}
	started := make([]*supervisor, len(items))
	var wg sync.WaitGroup
	for i, item := range items {
		// The tools must not inherit the lock: it is what says that the
		// supervisor lives.
		syscall.CloseOnExec(item.LockFD)
		lock := os.NewFile(uintptr(item.LockFD), fileLock)
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := startAttempt(item, lock)
			if err != nil {
				logger.Error("attempt not started", logKeyDir, item.Dir, logKeyErr, err)
				return
			}
			started[i] = s
		}()
	}
	wg.Wait()
	var attempts []*supervisor
	for _, s := range started {
		if s != nil {
			attempts = append(attempts, s)
		}
	}
	if len(attempts) == 0 {
		return 1
	}
	go handleSignals(sigs, attempts)
	for _, s := range attempts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.run()
			s.release()
		}()
	}
	wg.Wait()
	return 0
}

// readSuperviseItems reads and checks the supervisor's stdin document.
func readSuperviseItems(r io.Reader) ([]superviseItem, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxSuperviseDoc+1))
	if err != nil {
		return nil, ioError(fmt.Errorf("read the attempts from stdin: %w", err))
	}
	if len(data) > maxSuperviseDoc {
		return nil, usageErrorf("%s: the document on stdin is larger than %d bytes", superviseCommand, maxSuperviseDoc)
	}
	var items []superviseItem
	if err := json.Unmarshal(data, &items); err != nil {
		// Never quoted: the document holds secrets.
		return nil, usageErrorf("%s: stdin: want a JSON array of attempts", superviseCommand)
	}
	if len(items) == 0 {
		return nil, usageErrorf("%s: no attempts on stdin", superviseCommand)
	}
	seen := map[string]bool{}
	for i, item := range items {
		dir, err := taskDirFlag(superviseCommand, item.Dir)
		if err != nil {
			return nil, err
		}
		if seen[dir] {
			return nil, usageErrorf("%s: task directory %s given twice", superviseCommand, dir)
		}
		seen[dir] = true
		if err := checkEnvMap(item.Env); err != nil {
			return nil, err
		}
		if item.LockFD != firstLockFD+i {
			return nil, usageErrorf("%s: attempt %d: lock_fd %d, want %d", superviseCommand, i, item.LockFD, firstLockFD+i)
		}
		items[i].Dir = dir
	}
	return items, nil
}

// startAttempt reads launch.json and prepares the directory of one
// attempt, whose lock it is handed. The attempt logs to its own
// wrapper.log. An attempt that cannot start gets a failed status (see
// failStart) and its lock is released.
func startAttempt(item superviseItem, lock *os.File) (*supervisor, error) {
	dir := item.Dir
	fail := func(err error) (*supervisor, error) {
		failStart(item, err)
		lock.Close()
		return nil, err
	}
	launch, err := readLaunch(dir)
	if err != nil {
		return fail(err)
	}
	if launch.Attempt != item.Attempt || launch.Task != item.Task {
		return fail(fmt.Errorf("launch.json names %s attempt %d, not the %s attempt %d launched: replaced meanwhile", launch.Task, launch.Attempt, item.Task, item.Attempt))
	}
	logf, err := openWrapperLog(filepath.Join(dir, fileWrapper))
	if err != nil {
		return fail(ioError(fmt.Errorf("open %s: %w", fileWrapper, err)))
	}
	s := &supervisor{
		dir:     dir,
		launch:  launch,
		env:     buildEnv(os.Environ(), item.Env, launch, dir, filepath.Join(dir, dirOutput)),
		logger:  slog.New(slog.NewTextHandler(logf, nil)).With(logKeyDir, dir, logKeyPID, os.Getpid(), logKeyTask, launch.Task, logKeyAttempt, launch.Attempt),
		begun:   time.Now(),
		lock:    lock,
		logFile: logf,
	}
	s.decideSandbox(sandboxProbe)
	if err := s.prepare(); err != nil {
		s.logger.Error("attempt not started", logKeyErr, err)
		failStart(item, ioError(err))
		s.release()
		return nil, ioError(err)
	}
	s.logger.Info("attempt started", "sandbox", s.st.Sandbox)
	s.background(s.removeOldTmps)
	return s, nil
}

// failStart writes the failed status of an attempt that `run` handed over
// but that could not start (class start: another try may work), and takes
// it out of the live index, as the end of an attempt does. The status
// replaces whatever status.json holds: the attempt is the task's current
// one, and the controller has the earlier one's already.
func failStart(item superviseItem, err error) {
	now := timestamp(time.Now())
	st := wire.Status{Task: item.Task, Attempt: item.Attempt, Status: wire.StatusFailed, PID: os.Getpid(),
		StartedAt: now, CompletedAt: now, ExitCode: -1, ErrorClass: wire.ClassStart,
		Error: "the attempt did not start on the node: " + err.Error(), WrapperVersion: Version}
	st.Clamp()
	if werr := writeStatusDurable(item.Dir, &st); werr != nil {
		logWrapper(item.Dir, "attempt %d not started (%v), and its status not written: %v", item.Attempt, err, werr)
		return
	}
	unmarkLive(item.Dir, item.Attempt)
}

// release lets go of what the attempt holds: its task log, its log file
// and, last, the task's lock, which tells `kill` and the next `run` that
// the attempt is over.
func (s *supervisor) release() {
	s.bg.Wait()
	if s.tlog != nil {
		s.tlog.Close()
	}
	s.logFile.Close()
	s.lock.Close()
}

// background runs fn in a goroutine that release waits for.
func (s *supervisor) background(fn func()) {
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		fn()
	}()
}

// readEnvMap reads the JSON object of environment variables `run` gets on
// stdin. Values are secrets: they are kept in memory only and never quoted
// in errors.
func readEnvMap(r io.Reader) (map[string]string, error) {
	const max = 1 << 20
	data, err := io.ReadAll(io.LimitReader(r, max+1))
	if err != nil {
		return nil, ioError(fmt.Errorf("read environment from stdin: %w", err))
	}
	if len(data) > max {
		return nil, usageErrorf("environment on stdin is larger than %d bytes", max)
	}
	env := map[string]string{}
	if len(strings.TrimSpace(string(data))) == 0 {
		return env, nil
	}
	if err := json.Unmarshal(data, &env); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) {
			return nil, usageErrorf("environment on stdin: want a JSON object of strings")
		}
		return nil, usageErrorf("environment on stdin: invalid JSON")
	}
	if err := checkEnvMap(env); err != nil {
		return nil, err
	}
	return env, nil
}

// checkEnvMap refuses a variable name that is empty or holds '=' or NUL, and
// a value with NUL. Values are secrets and never quoted.
func checkEnvMap(env map[string]string) error {
	for k, v := range env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			return usageErrorf("environment: invalid variable name %q or NUL in its value", k)
		}
	}
	return nil
}

// prepare readies the task directory for this attempt. It runs under the
// lock, so no other supervisor can be moving the same files.
func (s *supervisor) prepare() error {
	if path, err := killRequestPath(s.dir); err != nil {
		return err
	} else if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove a stale kill request: %w", err)
	}
	if err := s.moveAside(); err != nil {
		return err
	}
	if err := s.writeOwnRecord(); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(s.dir, dirOutput), 0o755); err != nil {
		return fmt.Errorf("create %s: %w", dirOutput, err)
	}
	pid := []byte(strconv.Itoa(os.Getpid()) + "\n")
	if err := WriteFileAtomic(filepath.Join(s.dir, filePID), pid, 0o644); err != nil {
		return err
	}
	tlog, err := createTaskLog(filepath.Join(s.dir, fileLog), s.launch.LogLimitBytes)
	if err != nil {
		return err
	}
	s.tlog = tlog
	tlog.watch = &lineWatcher{on: s.onLine}
	// The tool's temporary files stay in the attempt, private: the CLIs
	// write error reports (with the prompt) and caches under TMPDIR.
	// The old one is renamed aside (instant, whatever it holds) and
	// removed once the attempt is under way: a million files left there
	// must not hold up the start.
	tmp := filepath.Join(s.dir, dirTmp)
	if _, err := os.Lstat(tmp); err == nil {
		if err := os.Rename(tmp, tmp+oldTmpSuffix+strconv.Itoa(os.Getpid())); err != nil {
			return fmt.Errorf("move the old %s aside: %w", dirTmp, err)
		}
	}
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return fmt.Errorf("create %s: %w", dirTmp, err)
	}
	if s.sandbox != nil {
		if err := s.prepareHome(); err != nil {
			return err
		}
	}
	if err := s.beat(); err != nil {
		return err
	}
	s.st = wire.Status{
		Task:           s.launch.Task,
		Attempt:        s.launch.Attempt,
		Status:         wire.StatusRunning,
		PID:            os.Getpid(),
		StartedAt:      timestamp(s.begun),
		WrapperVersion: Version,
		Sandbox:        s.sandboxName(),
	}
	return s.updateStatus(func(*wire.Status) bool { return true })
}

// moveAside moves an earlier attempt's files to attempts/<n>/, first killing
// its tool group if its supervisor died and left it running. n comes from
// the old status.json (0 when it is unreadable); a taken attempts/<n> gets a
// suffix rather than being overwritten.
func (s *supervisor) moveAside() error {
	n := 0
	if old, err := readStatus(s.dir); err == nil {
		n = old.Attempt
	}
	// The pids come from the process record, which the task cannot write,
	// never from status.json, which it can.
	switch rec, err := readRecord(s.dir); {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		s.logger.Warn("no usable process record of the earlier attempt; signalling nothing", logKeyErr, err)
	default:
		err := rec.killToolGroup(syscall.SIGKILL)
		switch {
		case errors.Is(err, errNoGroup):
		case err != nil:
			s.logger.Warn("not killing the recorded tool group of an earlier attempt", logKeyPGID, rec.ToolPGID, logKeyOldAttempt, rec.Attempt, logKeyErr, err)
		default:
			s.logger.Warn("killed the tool group of an earlier attempt", logKeyPGID, rec.ToolPGID, logKeyOldAttempt, rec.Attempt)
			deadline := time.Now().Add(time.Second)
			for groupAlive(rec.ToolPGID) && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
		}
	}
	found, err := attemptFiles(s.dir)
	if err != nil {
		return err
	}
	_, err = os.Lstat(filepath.Join(s.dir, dirOutput))
	haveOutput := err == nil
	if len(found) == 0 && (!haveOutput || (s.launch.Base == "" && s.launch.Repo == nil)) {
		// First attempt; an output/ the controller may have seeded stays,
		// unless a base tree or a git workspace is to be made afresh.
		return nil
	}
	if haveOutput && s.launch.Resume {
		// The resumed session works on where the earlier attempt left.
		s.keptOutput = true
	} else if haveOutput {
		found = append(found, dirOutput)
	}
	// attempts/ is the wrapper's, but the task can replace it: a link (or
	// anything but a directory) is removed, never followed out of the task
	// directory.
	attempts := filepath.Join(s.dir, dirAttempts)
	if fi, err := os.Lstat(attempts); err == nil && !fi.IsDir() {
		s.logger.Warn("removing an attempts/ that is not a directory", logKeyPath, attempts)
		if err := os.Remove(attempts); err != nil {
			return fmt.Errorf("remove %s: %w", attempts, err)
		}
	}
	base := filepath.Join(attempts, strconv.Itoa(n))
	target := base
	for i := 2; ; i++ {
		if _, err := os.Lstat(target); errors.Is(err, os.ErrNotExist) {
			break
		}
		target = base + "." + strconv.Itoa(i)
	}
	if err := os.MkdirAll(target, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", target, err)
	}
	for _, name := range found {
		if err := os.Rename(filepath.Join(s.dir, name), filepath.Join(target, name)); err != nil {
			return fmt.Errorf("move %s aside: %w", name, err)
		}
	}
	s.logger.Info("moved earlier attempt aside", logKeyTo, target)
	return nil
}

// attemptFiles lists the files of an earlier attempt in dir, output/
// aside: the protocol's files and the temporary files a crash in the middle
// of WriteFileAtomic may have left behind. spec.md, launch.json, lock,
// wrapper.log and the base tree are the task's, not an attempt's, and stay.
func attemptFiles(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", dir, err)
	}
	own := []string{fileStatus, fileLog, fileHeartbeat, filePID}
	var found []string
	for _, e := range entries {
		for _, name := range own {
			if e.Name() == name || strings.HasPrefix(e.Name(), "."+name+".tmp") {
				found = append(found, e.Name())
				break
			}
		}
	}
	return found, nil
}

// copyBase copies launch.json's base tree into output/. A missing or
// unreadable base fails the attempt with class start; a kill or the
// timeout interrupts the copy.
func (s *supervisor) copyBase(out string) error {
	src := filepath.Join(s.dir, s.launch.Base)
	skipped := func(path string) {
		s.logger.Warn("base: skipped an entry that is not a file, directory or link", logKeyPath, path)
	}
	if err := copyTree(src, out, s.stopping, skipped); err != nil {
		if errors.Is(err, errStopped) {
			return err
		}
		return fmt.Errorf("copy base %q into %s: %w", s.launch.Base, dirOutput, err)
	}
	return nil
}

// run runs the attempt to its end and writes the final status.
func (s *supervisor) run() {
	timeout := seconds(s.launch.TimeoutSeconds)
	timer := time.AfterFunc(timeout-time.Since(s.begun), func() {
		s.stop(reasonTimeout, seconds(s.launch.GraceSeconds))
	})
	s.deadline = timer
	hbStop, hbDone := make(chan struct{}), make(chan struct{})
	go s.heartbeats(hbStop, hbDone)
	s.background(func() { s.watchStall(hbStop) })

	res := s.attempt()
	s.stopNet()
	s.removeAgentLogins()
	s.endCgroup(res)

	timer.Stop()
	close(hbStop)
	<-hbDone
	s.finish(res)
}

func (s *supervisor) attempt() outcome {
	out := filepath.Join(s.dir, dirOutput)
	if s.sandboxErr != "" {
		return outcome{code: -1, startErr: s.sandboxErr, permanent: s.sandboxPermanent}
	}
	if res, ok := s.prepareWorkspace(out); !ok {
		return res
	}
	if err := s.startNet(); err != nil {
		return outcome{code: -1, startErr: err.Error()}
	}
	if res, ok := s.runSetup(out); !ok {
		return res
	}
	cmd, closers, err := s.toolCmd(out)
	if err != nil {
		var pe permanentError
		o := outcome{code: -1, startErr: err.Error(), permanent: errors.As(err, &pe)}
		if errors.Is(err, exec.ErrNotFound) {
			o.toolMissing = true
			o.startErr = fmt.Sprintf("%s; fix: install it on node %s (in the PATH of the node user's non-interactive shell, or in the api_mode's PATH), or give the task or the node another tool", err, s.launch.Node)
		}
		return o
	}
	s.mu.Lock()
	s.toolStarted = true
	s.mu.Unlock()
	p, err := s.startChild(cmd, closers...)
	if errors.Is(err, errStopped) {
		return outcome{code: -1}
	}
	if err != nil {
		return outcome{code: -1, startErr: fmt.Sprintf("start %s: %v", cmd.Args[0], err)}
	}
	s.background(func() { s.watchLimits(p) })
	s.setTool(p)
	s.logger.Info("tool started", logKeyToolPID, p.pgid)
	<-p.exited
	s.mu.Lock()
	s.finishing = true
	s.mu.Unlock()
	<-p.done
	code, sig := p.exitInfo()
	res := outcome{code: code, sig: sig, confined: s.sandbox != nil}
	if r := s.launch.Repo; r != nil && code == 0 && sig == 0 && !s.stopping() {
		res.commit, res.resultErr = s.snapshot(r, out)
	}
	if s.launch.Gate != nil && code == 0 && sig == 0 && res.resultErr == "" && !s.stopping() {
		// The gate has its own timeout, and a kill stops it as it would
		// the tool.
		s.deadline.Stop()
		s.mu.Lock()
		s.finishing, s.gating = false, true
		s.mu.Unlock()
		if err := s.updateStatus(func(st *wire.Status) bool { st.Gating = true; return true }); err != nil {
			s.logger.Warn("write status", logKeyErr, err)
		}
		res.gate = s.runGate(out, res.commit)
		s.mu.Lock()
		s.finishing, s.gating = true, false
		s.mu.Unlock()
	}
	return res
}

// prepareWorkspace fills output/ (out) for a new attempt: the base tree's
// copy, or a git-native task's checkout; a resumed attempt keeps its own.
// false means the attempt ends with res.
func (s *supervisor) prepareWorkspace(out string) (res outcome, ok bool) {
	if s.launch.Resume && s.keptOutput {
		return outcome{}, true
	}
	if s.launch.Base != "" {
		err := s.copyBase(out)
		if errors.Is(err, errStopped) {
			return outcome{code: -1}, false
		}
		if err != nil {
			return outcome{code: -1, startErr: err.Error()}, false
		}
	}
	r := s.launch.Repo
	if r == nil {
		return outcome{}, true
	}
	if s.stopping() {
		return outcome{code: -1}, false
	}
	gitDir, err := snapshotDir(s.dir)
	spare := false
	if err == nil {
		spare, err = prepareRepoWorkspace(context.Background(), r.Dir, r.Base, r.Branch, out, gitDir, r.Spares > 0)
	}
	if err != nil {
		return outcome{code: -1, startErr: fmt.Sprintf("prepare the git workspace: %v", err)}, false
	}
	if r.Spares > 0 {
		s.logger.Info("git workspace ready", "from_spare", spare)
		s.startSpare(r)
	}
	return outcome{}, true
}

// runSetup runs launch.json's setup in out, as the tool will run: in the
// sandbox and under the limits. false means the attempt ends with res.
func (s *supervisor) runSetup(out string) (res outcome, ok bool) {
	if s.launch.Setup == "" {
		return outcome{}, true
	}
	cmd := &exec.Cmd{Path: "/bin/sh", Args: []string{"/bin/sh", "-c", s.launch.Setup}, Env: s.env, Dir: out}
	if s.sandbox != nil {
		cmd = s.sandboxed(cmd)
	}
	cmd, err := s.limited(cmd)
	if err != nil {
		return outcome{code: -1, startErr: "setup failed: " + err.Error()}, false
	}
	p, err := s.startChild(cmd)
	if errors.Is(err, errStopped) {
		return outcome{code: -1}, false
	}
	if err != nil {
		return outcome{code: -1, startErr: fmt.Sprintf("setup failed: %v", err)}, false
	}
	s.background(func() { s.watchLimits(p) })
	s.setTool(p)
	<-p.done
	code, sig := p.exitInfo()
	if s.stopping() {
		return outcome{code: code, sig: sig}, false
	}
	if code != 0 || sig != 0 {
		msg := "setup failed: " + exitError(code, sig)
		if line := s.tlog.LastLine(); line != "" {
			msg += ": " + line
		}
		return outcome{code: -1, startErr: msg, confined: s.sandbox != nil}, false
	}
	return outcome{}, true
}

// startSpare starts `git-spare` in the background, in a session of its
// own, for the next launch of the project on this node to find a ready
// checkout of r's base. It outlives the attempt; its failure costs only
// a slower next launch (wrapper.log says why it could not start).
func (s *supervisor) startSpare(r *wire.LaunchRepo) {
	exe, err := os.Executable()
	if err != nil {
		s.logger.Warn("no spare checkout", logKeyErr, err)
		return
	}
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		s.logger.Warn("no spare checkout", logKeyErr, err)
		return
	}
	defer null.Close()
	cmd := &exec.Cmd{Path: exe, Args: []string{exe, "git-spare", "--repo", r.Dir, "--base", r.Base, "--max", strconv.Itoa(r.Spares)},
		Dir: "/", Stdin: null, Stdout: null, Stderr: null, Env: gitEnv(),
		SysProcAttr: &syscall.SysProcAttr{Setsid: true}}
	if err := cmd.Start(); err != nil {
		s.logger.Warn("no spare checkout", logKeyErr, err)
		return
	}
	go cmd.Wait() // reaped while this supervisor lives; adopted by init after
}

// snapshot records a git-native task's workspace as one commit (see
// snapshotWorkspace) in the wrapper's private git directory of the task.
func (s *supervisor) snapshot(r *wire.LaunchRepo, out string) (string, string) {
	gitDir, err := snapshotDir(s.dir)
	if err == nil {
		msg := r.Message
		if msg == "" {
			msg = fmt.Sprintf("%s (attempt %d)", s.launch.Task, s.launch.Attempt)
		}
		var commit string
		commit, err = snapshotWorkspace(context.Background(), r.Dir, gitDir, out, r.Base, r.Branch, "dispatch "+s.launch.Task, msg)
		if err == nil {
			s.logger.Info("result recorded", "commit", commit)
			return commit, ""
		}
	}
	return "", "recording the workspace as a commit failed: " + err.Error()
}

// toolCmd builds the tool's command from launch.json. Files in the returned
// closers are the parent's copies, to close once the tool has started.
// permanentError marks a start error that no retry mends (class
// start_permanent).
type permanentError struct{ error }

func (e permanentError) Unwrap() error { return e.error }

func (s *supervisor) toolCmd(out string) (*exec.Cmd, []io.Closer, error) {
	spec := filepath.Join(s.dir, fileSpec)
	command, env := s.toolArgvEnv()
	args := make([]string, len(command))
	for i, a := range command {
		args[i] = strings.ReplaceAll(a, "{spec}", spec)
	}
	path, err := lookPath(args[0], lookupEnv(env, "PATH"), out)
	if err != nil {
		return nil, nil, fmt.Errorf("start tool: %w", err)
	}
	cmd := &exec.Cmd{Path: path, Args: args, Env: env, Dir: out}
	if s.sandbox != nil {
		if err := s.sandbox.exposeTool(path, s.launch.WorkDir); err != nil {
			return nil, nil, permanentError{fmt.Errorf("start tool in the sandbox: %w", err)}
		}
		cmd = s.sandboxed(cmd)
	}
	cmd, err = s.limited(cmd)
	if err != nil {
		return nil, nil, err
	}
	var closers []io.Closer
	if s.launch.Stdin == "resume" {
		r, w, err := os.Pipe()
		if err != nil {
			return nil, nil, fmt.Errorf("tool stdin: %w", err)
		}
		// A short text: it fits the pipe, the write does not block.
		go func() {
			io.WriteString(w, s.launch.ResumePrompt)
			w.Close()
		}()
		cmd.Stdin = r
		closers = append(closers, r)
	} else if s.launch.Stdin == "spec" {
		f, err := os.Open(spec)
		if err != nil {
			return nil, nil, fmt.Errorf("open tool stdin: %w", err)
		}
		cmd.Stdin = f
		closers = append(closers, f)
	}
	return cmd, closers, nil
}

// startChild starts cmd unless a stop has been asked for. Checking and
// starting under one lock means a kill either finds the child to signal or
// prevents it from starting; it cannot slip in between.
func (s *supervisor) startChild(cmd *exec.Cmd, closers ...io.Closer) (*proc, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopReason != "" {
		for _, c := range closers {
			c.Close()
		}
		return nil, errStopped
	}
	p, err := startProc(cmd, s.tlog, closers...)
	if err != nil {
		return nil, err
	}
	s.cur = p
	return p, nil
}

// startChildTo is startChild with the child's output to out instead of
// the task log.
func (s *supervisor) startChildTo(cmd *exec.Cmd, out io.Writer) (*proc, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopReason != "" {
		return nil, errStopped
	}
	p, err := startProc(cmd, out)
	if err != nil {
		return nil, err
	}
	s.cur = p
	return p, nil
}

func (s *supervisor) stopping() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopReason != ""
}

// stop asks the running child's group to end: SIGTERM now, SIGKILL after
// grace if the child is still there. Only the first reason counts.
func (s *supervisor) stop(reason string, grace time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopReason != "" || s.finishing {
		return
	}
	s.stopReason = reason
	s.logger.Info("stopping attempt", logKeyReason, reason, logKeyGrace, grace)
	p := s.cur
	if p == nil {
		return
	}
	select {
	case <-p.exited:
		return
	default:
	}
	if s.sandbox != nil {
		termSandboxed(p.pgid)
	} else {
		syscall.Kill(-p.pgid, syscall.SIGTERM)
	}
	go func() {
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-p.exited:
		case <-t.C:
			s.logger.Info("grace over, killing tool group", logKeyPGID, p.pgid)
			syscall.Kill(-p.pgid, syscall.SIGKILL)
		}
	}()
}

// limitStop marks the attempt as stopped by the watchdog for reason, with
// msg for its status, unless a stop was asked already or the tool has
// ended. It reports whether the watchdog is to kill the processes.
func (s *supervisor) limitStop(reason, msg string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopReason != "" || s.finishing {
		return false
	}
	s.stopReason, s.limitMsg = reason, msg
	s.logger.Info("stopping attempt", logKeyReason, reason, logKeyError, msg)
	return true
}

// oldTmpSuffix names an earlier attempt's tmp/ moved aside for removal.
const oldTmpSuffix = ".old."

// removeOldTmps removes the earlier attempts' tmp/ directories moved aside
// by prepare (and any a killed supervisor left). RemoveAll never follows a
// link: a task that put one there loses only the link.
func (s *supervisor) removeOldTmps() {
	old, err := filepath.Glob(filepath.Join(s.dir, dirTmp+oldTmpSuffix+"*"))
	if err != nil {
		return
	}
	for _, name := range []string{dirHome, dirGateHome, dirGateTmp} {
		more, _ := filepath.Glob(filepath.Join(s.dir, name+oldTmpSuffix+"*"))
		old = append(old, more...)
	}
	for _, p := range old {
		if err := os.RemoveAll(p); err != nil {
			s.logger.Warn("remove an old tmp", logKeyPath, p, logKeyErr, err)
		}
	}
}

// onLine stops the tool when a line of its output announces a retry that
// dispatch handles better than the tool (see retryNotice).
func (s *supervisor) onLine(prev, line []byte) {
	if id := sessionID(line); id != "" {
		s.mu.Lock()
		// The tool's own first init line, not one printed by setup.
		if s.session == "" && s.toolStarted {
			s.session = id
		}
		s.mu.Unlock()
	}
	now := time.Now()
	n, ok := retryNotice(s.launch.Agent, prev, line, now)
	if !ok || !n.stops() {
		return
	}
	s.mu.Lock()
	if s.stopReason == "" && !s.finishing {
		s.notice, s.noticeAt = n, now
	}
	s.mu.Unlock()
	s.stop(reasonNotice, seconds(s.launch.GraceSeconds))
}

// handleSignals turns SIGTERM and SIGINT into a stop of every attempt, and
// SIGUSR1 into a stop of each attempt `kill` asked for. SIGHUP is ignored
// in case a session somewhere still thinks it owns us.
func handleSignals(sigs <-chan os.Signal, attempts []*supervisor) {
	for sig := range sigs {
		switch sig {
		case syscall.SIGHUP:
		case syscall.SIGUSR1:
			for _, s := range attempts {
				if grace, ok := s.killRequested(); ok {
					s.stop(reasonKill, grace)
				}
			}
		default:
			for _, s := range attempts {
				grace, ok := s.killRequested()
				if !ok {
					grace = seconds(s.launch.GraceSeconds)
				}
				s.stop(reasonKill, grace)
			}
		}
	}
}

// killRequested reports whether `kill` asked to stop this attempt, with the
// grace it gave, and takes the request. The request lives in the private
// .ctl directory, out of the tasks' reach, and names the attempt, so that
// a request left over from an earlier attempt stops nothing.
func (s *supervisor) killRequested() (time.Duration, bool) {
	path, err := killRequestPath(s.dir)
	if err != nil {
		return 0, false
	}
	data, err := readControlFile(path)
	if err != nil {
		return 0, false
	}
	var req killRequest
	if err := json.Unmarshal(data, &req); err != nil || req.Attempt != s.launch.Attempt {
		return 0, false
	}
	os.Remove(path)
	if req.GraceSeconds < 0 {
		return seconds(s.launch.GraceSeconds), true
	}
	return seconds(req.GraceSeconds), true
}

func (s *supervisor) heartbeats(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(seconds(s.launch.HeartbeatSeconds))
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			if err := s.beat(); err != nil {
				s.logger.Warn("heartbeat", logKeyErr, err)
			}
			total := s.tlog.Total()
			err := s.updateStatus(func(st *wire.Status) bool {
				changed := st.LogBytes != total
				st.LogBytes = total
				if changed && s.activeAt.Load() != 0 {
					// Output, seen at the beat's pace: the stall watch
					// looks less often.
					s.activeAt.Store(time.Now().UnixNano())
				}
				return changed
			})
			if err != nil {
				s.logger.Warn("update status", logKeyErr, err)
			}
		}
	}
}

// beat rewrites the heartbeat file; the sequence number makes every beat's
// content differ even if the clock does not move.
func (s *supervisor) beat() error {
	s.hbSeq++
	data := heartbeatLine(s.hbSeq, time.Now(), s.activeAt.Load())
	return WriteFileAtomic(filepath.Join(s.dir, fileHeartbeat), []byte(data), 0o644)
}

// writeOwnRecord records this supervisor in the process record, with no
// tool yet; without a record, nothing could ever signal this attempt.
func (s *supervisor) writeOwnRecord() error {
	pid := os.Getpid()
	start, err := procStart(pid)
	if err != nil {
		return fmt.Errorf("read own start time: %w", err)
	}
	sid, err := getsid(0)
	if err != nil {
		return fmt.Errorf("read own session: %w", err)
	}
	s.rec = procRecord{Dir: filepath.Clean(s.dir), Attempt: s.launch.Attempt, SupervisorPID: pid, SupervisorStart: start, SID: sid,
		Agent: s.launch.Agent, Node: s.launch.Node}
	return writeRecord(&s.rec)
}

// setTool records the running child (setup or tool) in the process record
// and, for display, in status.json.
func (s *supervisor) setTool(p *proc) {
	s.rec.ToolPGID, s.rec.ToolStart = p.pgid, p.start
	if err := writeRecord(&s.rec); err != nil {
		s.logger.Error("process record", logKeyErr, err)
	}
	pid := p.pgid
	err := s.updateStatus(func(st *wire.Status) bool {
		st.ToolPID = pid
		return true
	})
	if err != nil {
		s.logger.Warn("update status", logKeyErr, err)
	}
}

// updateStatus applies f to the status and writes it when f reports a
// change. Once a final status is written, it never changes again.
func (s *supervisor) updateStatus(f func(*wire.Status) bool) error {
	s.statusMu.Lock()
	defer s.statusMu.Unlock()
	if s.final {
		return nil
	}
	if !f(&s.st) {
		return nil
	}
	s.final = s.st.Final()
	if s.final {
		return writeStatusDurable(s.dir, &s.st)
	}
	return writeJSONAtomic(filepath.Join(s.dir, fileStatus), s.st)
}

// noticeFailure fills st for an attempt stopped on a notice of its tool's
// output (a refused credential, a rate limit being waited out).
func (s *supervisor) noticeFailure(st *wire.Status, ended time.Time) {
	st.Status, st.ErrorClass = wire.StatusFailed, s.notice.class
	if s.notice.class == wire.ClassAuth {
		st.Error = "stopped: the tool was retrying an API call the provider refused for its credentials"
		return
	}
	st.Error = "stopped: the tool was waiting out a rate limit"
	if s.notice.wait > 0 {
		st.RetryAfterSeconds = retrySeconds(until(s.noticeAt.Add(s.notice.wait), ended))
		st.Error += " (reset in " + s.notice.wait.Round(time.Second).String() + ")"
	}
}

// finish writes the final status of the attempt.
func (s *supervisor) finish(res outcome) {
	if res.startErr != "" {
		// The log the report points to says why nothing ran.
		fmt.Fprintf(s.tlog, "dispatch-wrapper: %s\n", res.startErr)
	}
	s.mu.Lock()
	reason, session, limitMsg := s.stopReason, s.session, s.limitMsg
	s.mu.Unlock()
	if session != "" || res.gate != nil {
		// The private record is where `status` takes the session and
		// the gate's result from.
		s.rec.SessionID, s.rec.Gate = session, res.gate
		if err := writeRecord(&s.rec); err != nil {
			s.logger.Error("process record", logKeyErr, err)
		}
	}
	ended := time.Now()
	if err := s.tlog.Err(); err != nil {
		s.logger.Error("task log incomplete", logKeyErr, err)
	}
	// Read back from the file, which holds far more than the in-memory
	// tail; the tool and setup are gone, so it no longer changes. It is
	// the file the log wrote, whatever the task put at its path.
	tail, err := s.tlog.readTail(usageTail)
	if err != nil {
		s.logger.Warn("read task log for usage", logKeyErr, err)
	}
	tokensIn, tokensOut, cost := ParseUsage(s.launch.Agent, tail)
	message := FinalMessage(s.launch.Agent, tail)
	var final wire.Status
	err = s.updateStatus(func(st *wire.Status) bool {
		defer func() { final = *st }()
		st.CompletedAt = timestamp(ended)
		st.ExitCode = res.code
		st.LogBytes = s.tlog.Total()
		st.TokensIn, st.TokensOut, st.CostUSD = tokensIn, tokensOut, cost
		st.FinalMessage = message
		st.SessionID, st.Gate, st.Gating = session, statusGate(res.gate), false
		defer st.Clamp()
		if res.sig != 0 {
			st.Signal = signalName(res.sig)
		}
		switch {
		case reason == reasonKill:
			st.Status, st.ErrorClass, st.Error = wire.StatusKilled, wire.ClassKilled, "killed on request"
		case reason == reasonNotice:
			s.noticeFailure(st, ended)
		case reason == reasonOOM:
			st.Status, st.ErrorClass, st.Error = wire.StatusFailed, wire.ClassOOM, limitMsg
		case reason == reasonPids:
			st.Status, st.ErrorClass, st.Error = wire.StatusFailed, wire.ClassPids, limitMsg
		case reason == reasonStall:
			st.Status, st.ErrorClass = wire.StatusFailed, wire.ClassStalled
			st.Error = "stalled: the tool wrote nothing for " + seconds(s.launch.StallSeconds).String()
		case reason == reasonTimeout:
			st.Status, st.ErrorClass = wire.StatusFailed, wire.ClassTimeout
			st.Error = "timed out after " + seconds(s.launch.TimeoutSeconds).String()
		case s.nprocRefused(res):
			st.Status, st.ErrorClass, st.Error = wire.StatusFailed, wire.ClassPids, nprocMessage(s.launch.Limits, s.nproc-s.launch.Limits.Pids)
		case res.startErr != "":
			st.Status, st.ErrorClass, st.Error = wire.StatusFailed, wire.ClassStart, res.startErr
			if res.permanent {
				st.ErrorClass = wire.ClassStartPermanent
			}
			st.ToolMissing = res.toolMissing
		case res.sig != 0:
			st.Status, st.ErrorClass, st.Error = wire.StatusFailed, wire.ClassCrash, exitError(res.code, res.sig)
		case res.resultErr != "":
			st.Status, st.ErrorClass, st.Error = wire.StatusFailed, wire.ClassCrash, res.resultErr
		case res.gate != nil && !res.gate.Passed && s.launch.Gate.Decides:
			st.Status, st.ErrorClass, st.Error = wire.StatusFailed, wire.ClassGate, "the task gate failed: "+res.gate.Error
			st.Commit = res.commit
		case res.code == 0:
			st.Status = wire.StatusCompleted
			st.Commit = res.commit
		default:
			logTail := s.tlog.Tail()
			st.Status, st.ErrorClass = wire.StatusFailed, exitClass(s.launch.Agent, res.code, logTail)
			st.Error = exitError(res.code, 0)
			if st.ErrorClass == wire.ClassRateLimit {
				st.RetryAfterSeconds = retrySeconds(AgentReset(s.launch.Agent, logTail, ended))
			}
		}
		st.Error += s.failureNote(st, res)
		return true
	})
	if err != nil {
		s.logger.Error("write final status", logKeyErr, err)
		return
	}
	// Out of the live index only now: until the final status is on disk
	// the attempt must be reported, and a supervisor killed before this
	// line leaves its marker for the controller to find.
	unmarkLive(s.dir, s.launch.Attempt)
	s.logger.Info("attempt finished", logKeyStatus, final.Status, logKeyErrorClass, final.ErrorClass, logKeyError, final.Error)
}
