package wrapper

import (
	"encoding/json"
	"fmt"
	"github.com/dispatch-tool/dispatch/wrapper/subcmd"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/dispatch-tool/dispatch/internal/netallow"
	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/agentlog"
	"github.com/dispatch-tool/dispatch/wrapper/attempt"
	"github.com/dispatch-tool/dispatch/wrapper/egress"
	"github.com/dispatch-tool/dispatch/wrapper/errkind"
	"github.com/dispatch-tool/dispatch/wrapper/launchfile"
	"github.com/dispatch-tool/dispatch/wrapper/limits"
	"github.com/dispatch-tool/dispatch/wrapper/nodestatus"
	"github.com/dispatch-tool/dispatch/wrapper/proc"
	"github.com/dispatch-tool/dispatch/wrapper/sandbox"
	"github.com/dispatch-tool/dispatch/wrapper/taskfiles"
)

// supervisor runs one attempt of a task: setup, then the tool, under the
// timeout, writing heartbeat and status.json until the final status.
type supervisor struct {
	dir    string
	launch wire.Launch
	env    []string
	logger *slog.Logger
	tlog   *taskfiles.TaskLog
	begun  time.Time
	hbSeq  int
	// activeAt is when the stall watch last saw the tool write (unix
	// nanoseconds; 0 while no stall watch runs): the heartbeat says how
	// long ago, for the dashboard's stall countdown.
	activeAt atomic.Int64

	mu         sync.Mutex // guards cur, stopReason, limitMsg, finishing, notice, noticeAt
	cur        *proc.Proc
	stopReason string
	limitMsg   string // why the watchdog stopped the attempt
	finishing  bool   // the tool has exited: a stop asked now is too late
	// deadline stops the attempt at its timeout; a gate stops it, having
	// its own. gating is set while the gate runs (no stall then).
	deadline *time.Timer
	gating   bool
	notice   agentlog.Notice
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
	// oldTmps are the names in the task directory of the scratch that
	// removeOldTmps removes; written by prepare, before it runs.
	oldTmps []string

	// sandbox, when set, is the bwrap sandbox setup and the tool run in;
	// sandboxErr says why an attempt that must be sandboxed cannot be.
	sandbox    *sandbox.Spec
	sandboxErr string
	// sandboxPermanent is set with sandboxErr when the launch itself is at
	// fault (no retry mends it); unset when the node's sandbox is
	// unavailable (another node's may work).
	sandboxPermanent bool
	// allow is the network allow list (launch.json's network "allow"),
	// served by proxy while the attempt runs.
	allow netallow.List
	proxy *egress.NetProxy
	// netRefused are the destinations the proxy refused (stopNet).
	netRefused []string
	// agentSrc is where the sandboxed agent CLI's files are copied from
	// (agentSrcDir: its directory variable's; see sandbox.AgentSource), or
	// agentSrcErr why not.
	agentSrc    string
	agentSrcDir bool
	agentSrcErr error

	rec proc.ProcRecord // this attempt's process record; written by prepare, setTool and finish only
	// recorded is set once rec is written; run's goroutine only (and
	// prepare's, before it).
	recorded bool

	// cg is the attempt's cgroups (nil: none), made with its first limited
	// child (cgTried: once tried), before the watchdog of that child starts;
	// removed by endCgroup once attempt has returned.
	cg      *limits.AttemptCgroup
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
// only), its attempt and the descriptor of the lock `run` took for it (0
// when nobody did: a batch job's supervisor takes it itself).
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
// reads the attempts from stdin (it inherits their locks), prepares each
// directory and runs the attempts side by side, releasing each task's lock
// as its attempt ends. `run` has replied by then: an attempt that cannot
// start gets a failed status.json (class start).
//
// Signals: SIGUSR1 asks it to look for kill requests (`kill` writes one
// per attempt in the private .ctl directory, then signals), so that one
// attempt is stopped without its neighbours; SIGTERM and SIGINT stop every
// attempt; SIGHUP is ignored.
func supervise(args []string, stdin io.Reader, stderr io.Writer) int {
	logger := slog.New(slog.NewTextHandler(stderr, nil)).With(taskfiles.LogKeyPID, os.Getpid())
	fs := subcmd.FlagSet(superviseCommand)
	if err := subcmd.Parse(fs, args); err != nil {
		logger.Error("supervise", taskfiles.LogKeyErr, err)
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
		logger.Error("supervisor not started", taskfiles.LogKeyErr, err)
		return 1
	}
	// No child of any attempt (a probe, git) may inherit a lock: it is
	// what says that the supervisor lives. Before any attempt starts one.
	for _, item := range items {
		if item.LockFD != 0 {
			syscall.CloseOnExec(item.LockFD)
		}
	}
	// Each attempt runs as soon as it is prepared, not once every
	// attempt of the batch is: the first of 32 waited for the others'
	// directories (25–225 ms on this machine), and its process record,
	// written when a quick start's tool starts, with it.
	set := &attemptSet{}
	go handleSignals(sigs, set)
	var wg sync.WaitGroup
	var started atomic.Int64
	for _, item := range items {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lock, err := attemptLock(item)
			if err != nil {
				logger.Error("attempt not started", taskfiles.LogKeyDir, item.Dir, taskfiles.LogKeyErr, err)
				return
			}
			s, err := startAttempt(item, lock)
			if err != nil {
				logger.Error("attempt not started", taskfiles.LogKeyDir, item.Dir, taskfiles.LogKeyErr, err)
				return
			}
			started.Add(1)
			set.add(s)
			s.run()
			s.release()
		}()
	}
	wg.Wait()
	if started.Load() == 0 {
		return 1
	}
	return 0
}

// attemptSet is the attempts of a supervisor under way, for the signals
// to reach: an attempt joins it once prepared, and one that joins after
// a SIGTERM or a kill request for it is stopped as it joins.
type attemptSet struct {
	mu       sync.Mutex // guards list and stopping
	list     []*supervisor
	stopping bool // SIGTERM or SIGINT came: every attempt stops
}

// add makes s one of the set, stopping it when a SIGTERM came or `kill`
// asked for it before it joined (the request is written before the
// signal, so either the handler sees s or s sees the request).
func (a *attemptSet) add(s *supervisor) {
	a.mu.Lock()
	a.list = append(a.list, s)
	stopping := a.stopping
	a.mu.Unlock()
	grace, asked := s.killRequested()
	switch {
	case asked:
		s.stop(attempt.ReasonKill, grace)
	case stopping:
		s.stop(attempt.ReasonKill, seconds(s.launch.GraceSeconds))
	}
}

// attempts returns the set's attempts; all marks the set stopping first.
func (a *attemptSet) attempts(all bool) []*supervisor {
	a.mu.Lock()
	defer a.mu.Unlock()
	if all {
		a.stopping = true
	}
	return slices.Clone(a.list)
}

// attemptLock is the task's lock of item: the one `run` took and handed
// down, or, for a batch job's supervisor (lock_fd 0: nobody took it, see
// `wrapper prepare`), the one it takes now; a lock another supervisor
// holds (a second job of the attempt) starts nothing. Neither is
// inherited by a child (supervise set close-on-exec on those handed down).
func attemptLock(item superviseItem) (*os.File, error) {
	if item.LockFD == 0 {
		return takeTaskLock(item.Dir)
	}
	return os.NewFile(uintptr(item.LockFD), taskfiles.FileLock), nil
}

// readSuperviseItems reads and checks the supervisor's stdin document.
func readSuperviseItems(r io.Reader) ([]superviseItem, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxSuperviseDoc+1))
	if err != nil {
		return nil, errkind.IO(fmt.Errorf("read the attempts from stdin: %w", err))
	}
	if len(data) > maxSuperviseDoc {
		return nil, errkind.Usagef("%s: the document on stdin is larger than %d bytes", superviseCommand, maxSuperviseDoc)
	}
	var items []superviseItem
	if err := json.Unmarshal(data, &items); err != nil {
		// Never quoted: the document holds secrets.
		return nil, errkind.Usagef("%s: stdin: want a JSON array of attempts", superviseCommand)
	}
	if len(items) == 0 {
		return nil, errkind.Usagef("%s: no attempts on stdin", superviseCommand)
	}
	seen := map[string]bool{}
	for i, item := range items {
		dir, err := subcmd.DirFlag(superviseCommand, item.Dir)
		if err != nil {
			return nil, err
		}
		if seen[dir] {
			return nil, errkind.Usagef("%s: task directory %s given twice", superviseCommand, dir)
		}
		seen[dir] = true
		if err := launchfile.CheckEnv(item.Env); err != nil {
			return nil, err
		}
		if item.LockFD != firstLockFD+i && (item.LockFD != 0 || len(items) != 1) {
			return nil, errkind.Usagef("%s: attempt %d: lock_fd %d, want %d (or 0 for a batch job's one attempt)", superviseCommand, i, item.LockFD, firstLockFD+i)
		}
		items[i].Dir = dir
	}
	return items, nil
}

// startAttempt reads launch.json and prepares the directory of one
// attempt, whose lock it is handed; one that cannot start gets a failed
// status (nodestatus.FailStart) and its lock goes. It logs to its own wrapper.log.
func startAttempt(item superviseItem, lock *os.File) (*supervisor, error) {
	dir := item.Dir
	fail := func(err error) (*supervisor, error) {
		nodestatus.FailStart(item.Dir, item.Task, item.Attempt, Version, err)
		lock.Close()
		return nil, err
	}
	launch, err := launchfile.Read(dir)
	if err != nil {
		return fail(err)
	}
	if launch.Attempt != item.Attempt || launch.Task != item.Task {
		// Another attempt owns the directory now: its status.json (a final
		// one, maybe not yet collected) is not this attempt's to write.
		err := fmt.Errorf("launch.json names %s attempt %d, not the %s attempt %d launched: replaced meanwhile", launch.Task, launch.Attempt, item.Task, item.Attempt)
		taskfiles.LogWrapper(dir, "attempt %d not started: %v", item.Attempt, err)
		lock.Close()
		return nil, err
	}
	logf, err := taskfiles.OpenWrapperLog(filepath.Join(dir, taskfiles.FileWrapper))
	if err != nil {
		return fail(errkind.IO(fmt.Errorf("open %s: %w", taskfiles.FileWrapper, err)))
	}
	s := &supervisor{
		dir:     dir,
		launch:  launch,
		env:     proc.BuildEnv(os.Environ(), item.Env, launch, dir, filepath.Join(dir, taskfiles.DirOutput)),
		logger:  slog.New(slog.NewTextHandler(logf, nil)).With(taskfiles.LogKeyDir, dir, taskfiles.LogKeyPID, os.Getpid(), taskfiles.LogKeyTask, launch.Task, taskfiles.LogKeyAttempt, launch.Attempt),
		begun:   time.Now(),
		lock:    lock,
		logFile: logf,
	}
	s.decideSandbox(func() wire.SandboxReply { return sandbox.Probe(Version) })
	if err := s.prepare(); err != nil {
		s.logger.Error("attempt not started", taskfiles.LogKeyErr, err)
		nodestatus.FailStart(item.Dir, item.Task, item.Attempt, Version, errkind.IO(err))
		s.release()
		return nil, errkind.IO(err)
	}
	s.logger.Info("attempt started", "sandbox", s.st.Sandbox)
	if len(s.oldTmps) > 0 {
		s.background(s.removeOldTmps)
	}
	return s, nil
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
