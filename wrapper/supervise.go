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
	"github.com/dispatch-tool/dispatch/wrapper/agentlog"
	"github.com/dispatch-tool/dispatch/wrapper/attempt"
	"github.com/dispatch-tool/dispatch/wrapper/egress"
	"github.com/dispatch-tool/dispatch/wrapper/errkind"
	"github.com/dispatch-tool/dispatch/wrapper/gate"
	"github.com/dispatch-tool/dispatch/wrapper/gitresult"
	"github.com/dispatch-tool/dispatch/wrapper/kill"
	"github.com/dispatch-tool/dispatch/wrapper/launchfile"
	"github.com/dispatch-tool/dispatch/wrapper/limits"
	"github.com/dispatch-tool/dispatch/wrapper/nodestatus"
	"github.com/dispatch-tool/dispatch/wrapper/proc"
	"github.com/dispatch-tool/dispatch/wrapper/sandbox"
	"github.com/dispatch-tool/dispatch/wrapper/taskfiles"
	"github.com/dispatch-tool/dispatch/wrapper/tree"
)

// lockWait is how long a new supervisor retries D/lock before deciding that
// another supervisor holds it; it only has to outlast a `status` probe.
const lockWait = 500 * time.Millisecond

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

	rec proc.ProcRecord // this attempt's process record; written by prepare and setTool only

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
// stdin: its task directory and its environment (secrets: kept in memory
// only).
type superviseItem struct {
	Dir string            `json:"dir"`
	Env map[string]string `json:"env"`
}

// maxSuperviseDoc caps the document a supervisor reads on stdin.
const maxSuperviseDoc = maxLaunchBatch

// supervise is the hidden subcommand `run` and `launch` start in a new
// session: one process supervises every attempt of one launch, so that a
// batch of attempts costs one process start on the node, not one each. It
// reads the attempts (directory and secret environment) from stdin, takes
// each task's lock, prepares each directory, reports every attempt's start
// on the ready pipe at once, and then runs the attempts side by side, each
// to its end, releasing each task's lock as its attempt ends.
//
// Signals: SIGUSR1 asks it to look for kill requests (`kill` writes one
// per attempt in the private .ctl directory, then signals), so that one
// attempt is stopped without its neighbours; SIGTERM and SIGINT stop every
// attempt; SIGHUP is ignored.
func supervise(args []string, stdin io.Reader, stderr io.Writer) int {
	logger := slog.New(slog.NewTextHandler(stderr, nil)).With(taskfiles.LogKeyPID, os.Getpid())
	fs := newFlagSet(superviseCommand)
	readyFD := fs.Int("ready-fd", 3, "pipe to report readiness on")
	if err := parseFlags(fs, args); err != nil {
		logger.Error("supervise", taskfiles.LogKeyErr, err)
		return 1
	}
	// Caught from the start, so that a `kill` arriving before the attempts
	// are under way stops them instead of killing the supervisor outright.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGUSR1)
	// The tools must not inherit the ready pipe: `run` reads it to EOF.
	syscall.CloseOnExec(*readyFD)
	ready := os.NewFile(uintptr(*readyFD), "ready")
	report := func(v any) {
		// `run` may be gone (its SSH session dropped); the attempts go on.
		json.NewEncoder(ready).Encode(v)
		ready.Close()
	}

	items, err := readSuperviseItems(stdin)
	if err != nil {
		logger.Error("supervisor not started", taskfiles.LogKeyErr, err)
		report(wire.ErrorReply{Error: err.Error(), Kind: errkind.Of(err)})
		return 1
	}
	results := make([]wire.LaunchResult, len(items))
	started := make([]*supervisor, len(items))
	var wg sync.WaitGroup
	for i, item := range items {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := startAttempt(item)
			results[i] = wire.LaunchResult{Dir: item.Dir}
			if err != nil {
				logger.Error("attempt not started", taskfiles.LogKeyDir, item.Dir, taskfiles.LogKeyErr, err)
				results[i].Error, results[i].Kind = err.Error(), errkind.Of(err)
				return
			}
			started[i] = s
			results[i].Run = &wire.RunReply{Task: s.launch.Task, Attempt: s.launch.Attempt, PID: os.Getpid(), Status: wire.StatusRunning}
		}()
	}
	wg.Wait()
	var attempts []*supervisor
	for _, s := range started {
		if s != nil {
			attempts = append(attempts, s)
		}
	}
	report(results)
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
		dir, err := taskDirFlag(superviseCommand, item.Dir)
		if err != nil {
			return nil, err
		}
		if seen[dir] {
			return nil, errkind.Usagef("%s: task directory %s given twice", superviseCommand, dir)
		}
		seen[dir] = true
		if err := checkEnvMap(item.Env); err != nil {
			return nil, err
		}
		items[i].Dir = dir
	}
	return items, nil
}

// startAttempt takes the task's lock, reads launch.json and prepares the
// directory of one attempt. The attempt logs to its own wrapper.log.
func startAttempt(item superviseItem) (*supervisor, error) {
	dir := item.Dir
	lock, ok, err := taskfiles.LockTask(dir, lockWait)
	if err != nil {
		return nil, errkind.IO(err)
	}
	if !ok {
		return nil, &errkind.Error{Kind: wire.KindAlreadyRunning, Err: fmt.Errorf("a supervisor is already running in %s", dir)}
	}
	fail := func(err error) (*supervisor, error) {
		lock.Close()
		return nil, err
	}
	launch, err := launchfile.Read(dir)
	if err != nil {
		return fail(err)
	}
	logf, err := openWrapperLog(filepath.Join(dir, taskfiles.FileWrapper))
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
		s.release()
		return nil, errkind.IO(err)
	}
	s.logger.Info("attempt started", "sandbox", s.st.Sandbox)
	s.background(s.removeOldTmps)
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

// readEnvMap reads the JSON object of environment variables `run` gets on
// stdin. Values are secrets: they are kept in memory only and never quoted
// in errors.
func readEnvMap(r io.Reader) (map[string]string, error) {
	const max = 1 << 20
	data, err := io.ReadAll(io.LimitReader(r, max+1))
	if err != nil {
		return nil, errkind.IO(fmt.Errorf("read environment from stdin: %w", err))
	}
	if len(data) > max {
		return nil, errkind.Usagef("environment on stdin is larger than %d bytes", max)
	}
	env := map[string]string{}
	if len(strings.TrimSpace(string(data))) == 0 {
		return env, nil
	}
	if err := json.Unmarshal(data, &env); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) {
			return nil, errkind.Usagef("environment on stdin: want a JSON object of strings")
		}
		return nil, errkind.Usagef("environment on stdin: invalid JSON")
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
			return errkind.Usagef("environment: invalid variable name %q or NUL in its value", k)
		}
	}
	return nil
}

// prepare readies the task directory for this attempt. It runs under the
// lock, so no other supervisor can be moving the same files.
func (s *supervisor) prepare() error {
	if path, err := proc.KillRequestPath(s.dir); err != nil {
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
	if err := os.MkdirAll(filepath.Join(s.dir, taskfiles.DirOutput), 0o755); err != nil {
		return fmt.Errorf("create %s: %w", taskfiles.DirOutput, err)
	}
	pid := []byte(strconv.Itoa(os.Getpid()) + "\n")
	if err := taskfiles.WriteFileAtomic(filepath.Join(s.dir, taskfiles.FilePID), pid, 0o644); err != nil {
		return err
	}
	tlog, err := taskfiles.CreateTaskLog(filepath.Join(s.dir, taskfiles.FileLog), s.launch.LogLimitBytes)
	if err != nil {
		return err
	}
	s.tlog = tlog
	tlog.Watch = &taskfiles.LineWatcher{On: s.onLine}
	// The tool's temporary files stay in the attempt, private: the CLIs
	// write error reports (with the prompt) and caches under TMPDIR.
	// The old one is renamed aside (instant, whatever it holds) and
	// removed once the attempt is under way: a million files left there
	// must not hold up the start.
	tmp := filepath.Join(s.dir, taskfiles.DirTmp)
	if _, err := os.Lstat(tmp); err == nil {
		if err := os.Rename(tmp, tmp+taskfiles.OldTmpSuffix+strconv.Itoa(os.Getpid())); err != nil {
			return fmt.Errorf("move the old %s aside: %w", taskfiles.DirTmp, err)
		}
	}
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return fmt.Errorf("create %s: %w", taskfiles.DirTmp, err)
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
		StartedAt:      taskfiles.Timestamp(s.begun),
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
	if old, err := taskfiles.ReadStatus(s.dir); err == nil {
		n = old.Attempt
	}
	// The pids come from the process record, which the task cannot write,
	// never from status.json, which it can.
	switch rec, err := proc.ReadRecord(s.dir); {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		s.logger.Warn("no usable process record of the earlier attempt; signalling nothing", taskfiles.LogKeyErr, err)
	default:
		err := rec.KillToolGroup(syscall.SIGKILL)
		switch {
		case errors.Is(err, proc.ErrNoGroup):
		case err != nil:
			s.logger.Warn("not killing the recorded tool group of an earlier attempt", taskfiles.LogKeyPGID, rec.ToolPGID, taskfiles.LogKeyOldAttempt, rec.Attempt, taskfiles.LogKeyErr, err)
		default:
			s.logger.Warn("killed the tool group of an earlier attempt", taskfiles.LogKeyPGID, rec.ToolPGID, taskfiles.LogKeyOldAttempt, rec.Attempt)
			deadline := time.Now().Add(time.Second)
			for proc.GroupAlive(rec.ToolPGID) && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
		}
	}
	found, err := attemptFiles(s.dir)
	if err != nil {
		return err
	}
	_, err = os.Lstat(filepath.Join(s.dir, taskfiles.DirOutput))
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
		found = append(found, taskfiles.DirOutput)
	}
	// attempts/ is the wrapper's, but the task can replace it: a link (or
	// anything but a directory) is removed, never followed out of the task
	// directory.
	attempts := filepath.Join(s.dir, taskfiles.DirAttempts)
	if fi, err := os.Lstat(attempts); err == nil && !fi.IsDir() {
		s.logger.Warn("removing an attempts/ that is not a directory", taskfiles.LogKeyPath, attempts)
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
	s.logger.Info("moved earlier attempt aside", taskfiles.LogKeyTo, target)
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
	own := []string{taskfiles.FileStatus, taskfiles.FileLog, taskfiles.FileHeartbeat, taskfiles.FilePID}
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
		s.logger.Warn("base: skipped an entry that is not a file, directory or link", taskfiles.LogKeyPath, path)
	}
	if err := tree.CopyTree(src, out, s.stopping, skipped); err != nil {
		if errors.Is(err, tree.ErrStopped) {
			return err
		}
		return fmt.Errorf("copy base %q into %s: %w", s.launch.Base, taskfiles.DirOutput, err)
	}
	return nil
}

// run runs the attempt to its end and writes the final status.
func (s *supervisor) run() {
	timeout := seconds(s.launch.TimeoutSeconds)
	timer := time.AfterFunc(timeout-time.Since(s.begun), func() {
		s.stop(attempt.ReasonTimeout, seconds(s.launch.GraceSeconds))
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

// attempt runs one attempt's steps in order, each a function of its own:
// prepare the workspace (prepareWorkspace), the sandbox's network
// (startNet; the sandbox plan itself was decided by startAttempt), setup
// (runSetup), the tool under its limits (runTool), then what is collected
// of its result (collect: the git result, the gate). The final status is
// finish's, from the outcome returned here.
func (s *supervisor) attempt() outcome {
	out := filepath.Join(s.dir, taskfiles.DirOutput)
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
	res, ran := s.runTool(out)
	if ran {
		s.collect(&res, out)
	}
	return res
}

// runTool starts the tool in out under the attempt's limits and waits for
// it; ran is false when it never ran (res says why).
func (s *supervisor) runTool(out string) (res outcome, ran bool) {
	cmd, closers, err := s.toolCmd(out)
	if err != nil {
		var pe permanentError
		o := outcome{code: -1, startErr: err.Error(), permanent: errors.As(err, &pe)}
		if errors.Is(err, exec.ErrNotFound) {
			o.toolMissing = true
			o.startErr = fmt.Sprintf("%s; fix: install it on node %s (in the PATH of the node user's non-interactive shell, or in the api_mode's PATH), or give the task or the node another tool", err, s.launch.Node)
		}
		return o, false
	}
	s.mu.Lock()
	s.toolStarted = true
	s.mu.Unlock()
	p, err := s.startChild(cmd, closers...)
	if errors.Is(err, tree.ErrStopped) {
		return outcome{code: -1}, false
	}
	if err != nil {
		return outcome{code: -1, startErr: fmt.Sprintf("start %s: %v", cmd.Args[0], err)}, false
	}
	s.background(func() { s.watchLimits(p) })
	s.setTool(p)
	s.logger.Info("tool started", taskfiles.LogKeyToolPID, p.Pgid)
	<-p.Exited
	s.mu.Lock()
	s.finishing = true
	s.mu.Unlock()
	<-p.Done
	code, sig := p.ExitInfo()
	return outcome{code: code, sig: sig, confined: s.sandbox != nil}, true
}

// toolEnd is how the tool ended, for attempt.Collect.
func (s *supervisor) toolEnd(res outcome) attempt.ToolEnd {
	return attempt.ToolEnd{Code: res.code, Sig: res.sig, Stopping: s.stopping(), Repo: s.launch.Repo != nil, Gate: s.launch.Gate != nil}
}

// collect records what attempt.Collect says of the tool's end: the git
// result, then the gate on it.
func (s *supervisor) collect(res *outcome, out string) {
	if snap, _ := attempt.Collect(s.toolEnd(*res), false); snap {
		res.commit, res.resultErr = s.snapshot(s.launch.Repo, out)
	}
	if _, runGate := attempt.Collect(s.toolEnd(*res), res.resultErr == ""); !runGate {
		return
	}
	// The gate has its own timeout, and a kill stops it as it would
	// the tool.
	s.deadline.Stop()
	s.mu.Lock()
	s.finishing, s.gating = false, true
	s.mu.Unlock()
	if err := s.updateStatus(func(st *wire.Status) bool { st.Gating = true; return true }); err != nil {
		s.logger.Warn("write status", taskfiles.LogKeyErr, err)
	}
	res.gate = s.runGate(out, res.commit)
	s.mu.Lock()
	s.finishing, s.gating = true, false
	s.mu.Unlock()
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
		if errors.Is(err, tree.ErrStopped) {
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
	gitDir, err := gitresult.SnapshotDir(s.dir)
	spare := false
	if err == nil {
		spare, err = gitresult.PrepareRepoWorkspace(context.Background(), r.Dir, r.Base, r.Branch, out, gitDir, r.Spares > 0)
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
	if errors.Is(err, tree.ErrStopped) {
		return outcome{code: -1}, false
	}
	if err != nil {
		return outcome{code: -1, startErr: fmt.Sprintf("setup failed: %v", err)}, false
	}
	s.background(func() { s.watchLimits(p) })
	s.setTool(p)
	<-p.Done
	code, sig := p.ExitInfo()
	if s.stopping() {
		return outcome{code: code, sig: sig}, false
	}
	if code != 0 || sig != 0 {
		msg := "setup failed: " + proc.ExitError(code, sig)
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
		s.logger.Warn("no spare checkout", taskfiles.LogKeyErr, err)
		return
	}
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		s.logger.Warn("no spare checkout", taskfiles.LogKeyErr, err)
		return
	}
	defer null.Close()
	cmd := &exec.Cmd{Path: exe, Args: []string{exe, "git-spare", "--repo", r.Dir, "--base", r.Base, "--max", strconv.Itoa(r.Spares)},
		Dir: "/", Stdin: null, Stdout: null, Stderr: null, Env: gitresult.GitEnv(),
		SysProcAttr: &syscall.SysProcAttr{Setsid: true}}
	if err := cmd.Start(); err != nil {
		s.logger.Warn("no spare checkout", taskfiles.LogKeyErr, err)
		return
	}
	go cmd.Wait() // reaped while this supervisor lives; adopted by init after
}

// snapshot records a git-native task's workspace as one commit (see
// gitresult.SnapshotWorkspace) in the wrapper's private git directory of the task.
func (s *supervisor) snapshot(r *wire.LaunchRepo, out string) (string, string) {
	gitDir, err := gitresult.SnapshotDir(s.dir)
	if err == nil {
		msg := r.Message
		if msg == "" {
			msg = fmt.Sprintf("%s (attempt %d)", s.launch.Task, s.launch.Attempt)
		}
		var commit string
		commit, err = gitresult.SnapshotWorkspace(context.Background(), r.Dir, gitDir, out, r.Base, r.Branch, "dispatch "+s.launch.Task, msg)
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
	spec := filepath.Join(s.dir, taskfiles.FileSpec)
	command, env := s.toolArgvEnv()
	args := make([]string, len(command))
	for i, a := range command {
		args[i] = strings.ReplaceAll(a, "{spec}", spec)
	}
	path, err := proc.LookPath(args[0], proc.LookupEnv(env, "PATH"), out)
	if err != nil {
		return nil, nil, fmt.Errorf("start tool: %w", err)
	}
	cmd := &exec.Cmd{Path: path, Args: args, Env: env, Dir: out}
	if s.sandbox != nil {
		if err := s.sandbox.ExposeTool(path, s.launch.WorkDir); err != nil {
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
func (s *supervisor) startChild(cmd *exec.Cmd, closers ...io.Closer) (*proc.Proc, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopReason != "" {
		for _, c := range closers {
			c.Close()
		}
		return nil, tree.ErrStopped
	}
	p, err := proc.StartProc(cmd, s.tlog, closers...)
	if err != nil {
		return nil, err
	}
	s.cur = p
	return p, nil
}

// startChildTo is startChild with the child's output to out instead of
// the task log.
func (s *supervisor) startChildTo(cmd *exec.Cmd, out io.Writer) (*proc.Proc, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopReason != "" {
		return nil, tree.ErrStopped
	}
	p, err := proc.StartProc(cmd, out)
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
	s.logger.Info("stopping attempt", taskfiles.LogKeyReason, reason, taskfiles.LogKeyGrace, grace)
	p := s.cur
	if p == nil {
		return
	}
	select {
	case <-p.Exited:
		return
	default:
	}
	if s.sandbox != nil {
		limits.TermSandboxed(p.Pgid)
	} else {
		syscall.Kill(-p.Pgid, syscall.SIGTERM)
	}
	go func() {
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-p.Exited:
		case <-t.C:
			s.logger.Info("grace over, killing tool group", taskfiles.LogKeyPGID, p.Pgid)
			syscall.Kill(-p.Pgid, syscall.SIGKILL)
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
	s.logger.Info("stopping attempt", taskfiles.LogKeyReason, reason, taskfiles.LogKeyError, msg)
	return true
}

// removeOldTmps removes the earlier attempts' tmp/ directories moved aside
// by prepare (and any a killed supervisor left). RemoveAll never follows a
// link: a task that put one there loses only the link.
func (s *supervisor) removeOldTmps() {
	old, err := filepath.Glob(filepath.Join(s.dir, taskfiles.DirTmp+taskfiles.OldTmpSuffix+"*"))
	if err != nil {
		return
	}
	for _, name := range []string{taskfiles.DirHome, taskfiles.DirGateHome, taskfiles.DirGateTmp} {
		more, _ := filepath.Glob(filepath.Join(s.dir, name+taskfiles.OldTmpSuffix+"*"))
		old = append(old, more...)
	}
	for _, p := range old {
		if err := os.RemoveAll(p); err != nil {
			s.logger.Warn("remove an old tmp", taskfiles.LogKeyPath, p, taskfiles.LogKeyErr, err)
		}
	}
}

// onLine stops the tool when a line of its output announces a retry that
// dispatch handles better than the tool (see agentlog.RetryNotice).
func (s *supervisor) onLine(prev, line []byte) {
	if id := agentlog.SessionID(line); id != "" {
		s.mu.Lock()
		// The tool's own first init line, not one printed by setup.
		if s.session == "" && s.toolStarted {
			s.session = id
		}
		s.mu.Unlock()
	}
	now := time.Now()
	n, ok := agentlog.RetryNotice(s.launch.Agent, prev, line, now)
	if !ok || !n.Stops() {
		return
	}
	s.mu.Lock()
	if s.stopReason == "" && !s.finishing {
		s.notice, s.noticeAt = n, now
	}
	s.mu.Unlock()
	s.stop(attempt.ReasonNotice, seconds(s.launch.GraceSeconds))
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
					s.stop(attempt.ReasonKill, grace)
				}
			}
		default:
			for _, s := range attempts {
				grace, ok := s.killRequested()
				if !ok {
					grace = seconds(s.launch.GraceSeconds)
				}
				s.stop(attempt.ReasonKill, grace)
			}
		}
	}
}

// killRequested reports whether `kill` asked to stop this attempt, with the
// grace it gave, and takes the request. The request lives in the private
// .ctl directory, out of the tasks' reach, and names the attempt, so that
// a request left over from an earlier attempt stops nothing.
func (s *supervisor) killRequested() (time.Duration, bool) {
	path, err := proc.KillRequestPath(s.dir)
	if err != nil {
		return 0, false
	}
	data, err := taskfiles.ReadControlFile(path)
	if err != nil {
		return 0, false
	}
	var req kill.Request
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
				s.logger.Warn("heartbeat", taskfiles.LogKeyErr, err)
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
				s.logger.Warn("update status", taskfiles.LogKeyErr, err)
			}
		}
	}
}

// beat rewrites the heartbeat file; the sequence number makes every beat's
// content differ even if the clock does not move.
func (s *supervisor) beat() error {
	s.hbSeq++
	data := heartbeatLine(s.hbSeq, time.Now(), s.activeAt.Load())
	return taskfiles.WriteFileAtomic(filepath.Join(s.dir, taskfiles.FileHeartbeat), []byte(data), 0o644)
}

// writeOwnRecord records this supervisor in the process record, with no
// tool yet; without a record, nothing could ever signal this attempt.
func (s *supervisor) writeOwnRecord() error {
	pid := os.Getpid()
	start, err := proc.ProcStart(pid)
	if err != nil {
		return fmt.Errorf("read own start time: %w", err)
	}
	sid, err := proc.Getsid(0)
	if err != nil {
		return fmt.Errorf("read own session: %w", err)
	}
	s.rec = proc.ProcRecord{Dir: filepath.Clean(s.dir), Attempt: s.launch.Attempt, SupervisorPID: pid, SupervisorStart: start, SID: sid,
		Agent: s.launch.Agent, Node: s.launch.Node}
	return proc.WriteRecord(&s.rec)
}

// setTool records the running child (setup or tool) in the process record
// and, for display, in status.json.
func (s *supervisor) setTool(p *proc.Proc) {
	s.rec.ToolPGID, s.rec.ToolStart = p.Pgid, p.Start
	if err := proc.WriteRecord(&s.rec); err != nil {
		s.logger.Error("process record", taskfiles.LogKeyErr, err)
	}
	pid := p.Pgid
	err := s.updateStatus(func(st *wire.Status) bool {
		st.ToolPID = pid
		return true
	})
	if err != nil {
		s.logger.Warn("update status", taskfiles.LogKeyErr, err)
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
		return taskfiles.WriteStatusDurable(s.dir, &s.st)
	}
	return taskfiles.WriteJSONAtomic(filepath.Join(s.dir, taskfiles.FileStatus), s.st)
}

// ending is what the final status depends on (attempt.Decide), read once
// the attempt has ended.
func (s *supervisor) ending(res outcome, reason, limitMsg string, ended time.Time) attempt.Ending {
	e := attempt.Ending{Reason: reason, LimitMsg: limitMsg, Code: res.code, Sig: res.sig,
		StartErr: res.startErr, Permanent: res.permanent, ToolMissing: res.toolMissing,
		ResultErr: res.resultErr, Commit: res.commit, Gate: res.gate, GateDecides: s.launch.Gate != nil && s.launch.Gate.Decides,
		Agent: s.launch.Agent, Stall: seconds(s.launch.StallSeconds), Timeout: seconds(s.launch.TimeoutSeconds), Ended: ended}
	s.mu.Lock()
	e.Notice, e.NoticeAt = s.notice, s.noticeAt
	s.mu.Unlock()
	if s.nprocRefused(res) {
		e.NprocRefused, e.NprocMsg = true, limits.NprocMessage(s.launch.Limits, s.nproc-s.launch.Limits.Pids)
	}
	if res.code != 0 && res.sig == 0 {
		e.LogTail = s.tlog.Tail()
	}
	return e
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
		if err := proc.WriteRecord(&s.rec); err != nil {
			s.logger.Error("process record", taskfiles.LogKeyErr, err)
		}
	}
	ended := time.Now()
	if err := s.tlog.Err(); err != nil {
		s.logger.Error("task log incomplete", taskfiles.LogKeyErr, err)
	}
	// Read back from the file, which holds far more than the in-memory
	// tail; the tool and setup are gone, so it no longer changes. It is
	// the file the log wrote, whatever the task put at its path.
	tail, err := s.tlog.ReadTail(agentlog.UsageTail)
	if err != nil {
		s.logger.Warn("read task log for usage", taskfiles.LogKeyErr, err)
	}
	tokensIn, tokensOut, cost := agentlog.ParseUsage(s.launch.Agent, tail)
	message := agentlog.FinalMessage(s.launch.Agent, tail)
	f := attempt.Decide(s.ending(res, reason, limitMsg, ended))
	var final wire.Status
	err = s.updateStatus(func(st *wire.Status) bool {
		defer func() { final = *st }()
		st.CompletedAt = taskfiles.Timestamp(ended)
		st.ExitCode = res.code
		st.LogBytes = s.tlog.Total()
		st.TokensIn, st.TokensOut, st.CostUSD = tokensIn, tokensOut, cost
		st.FinalMessage = message
		st.SessionID, st.Gate, st.Gating = session, gate.ForStatus(res.gate), false
		defer st.Clamp()
		if res.sig != 0 {
			st.Signal = proc.SignalName(res.sig)
		}
		st.Status, st.ErrorClass, st.Error = f.Status, f.Class, f.Error
		if f.Commit != "" {
			st.Commit = f.Commit
		}
		if f.Class == wire.ClassStart || f.Class == wire.ClassStartPermanent {
			st.ToolMissing = f.ToolMissing
		}
		if f.RetryAfterSeconds != 0 {
			st.RetryAfterSeconds = f.RetryAfterSeconds
		}
		st.Error += s.failureNote(st, res)
		return true
	})
	if err != nil {
		s.logger.Error("write final status", taskfiles.LogKeyErr, err)
		return
	}
	// Out of the live index only now: until the final status is on disk
	// the attempt must be reported, and a supervisor killed before this
	// line leaves its marker for the controller to find.
	nodestatus.UnmarkLive(s.dir, s.launch.Attempt)
	s.logger.Info("attempt finished", taskfiles.LogKeyStatus, final.Status, taskfiles.LogKeyErrorClass, final.ErrorClass, taskfiles.LogKeyError, final.Error)
}
