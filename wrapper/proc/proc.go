package proc

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/taskfiles"
)

// drainTimeout bounds how long output is copied after the process group is
// gone: a process that escaped the group (setsid) could hold the pipe open
// for ever.
const drainTimeout = 2 * time.Second

// Proc is one child (setup or tool) running in its own process group, with
// its output copied into the task log. done is closed once it has been
// waited for and its output drained; state is valid then.
type Proc struct {
	cmd    *exec.Cmd
	Pgid   int
	Start  string        // ProcStart of the child
	Exited chan struct{} // closed after Wait, before the drain
	Done   chan struct{}
	state  *os.ProcessState
	err    error
}

// devNull is /dev/null, open for reading for the life of the process: the
// stdin of every child started without one (os/exec opens it afresh for
// each, with the runtime's poller's calls).
var devNull = sync.OnceValues(func() (*os.File, error) { return os.Open(os.DevNull) })

// StartProc starts cmd in a new process group with stdout and stderr on one
// pipe, so the log keeps the order in which the tool wrote. closers are
// closed once the child holds its own copies.
func StartProc(cmd *exec.Cmd, out io.Writer, closers ...io.Closer) (*Proc, error) {
	defer func() {
		for _, c := range closers {
			c.Close()
		}
	}()
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("create pipe: %w", err)
	}
	cmd.Stdout = w
	cmd.Stderr = w
	if cmd.Stdin == nil {
		// What os/exec would open for this child, opened once.
		if null, err := devNull(); err == nil {
			cmd.Stdin = null
		}
	}
	cmd.SysProcAttr = childAttr()
	// On Linux the child gets SIGKILL when the thread that started it ends
	// (PR_SET_PDEATHSIG follows the thread, golang/go#27505): start and wait
	// for it on one locked thread, so that only the supervisor's death
	// kills it.
	started := make(chan error, 1)
	waited := make(chan error, 1)
	var startTime string
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		// Read before Wait: until it is reaped the pid is the child's.
		startTime, _ = ProcStart(cmd.Process.Pid)
		started <- nil
		waited <- cmd.Wait()
	}()
	err = <-started
	w.Close()
	if err != nil {
		r.Close()
		return nil, err
	}
	p := &Proc{
		cmd:    cmd,
		Pgid:   cmd.Process.Pid,
		Start:  startTime,
		Exited: make(chan struct{}),
		Done:   make(chan struct{}),
	}
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		buf := make([]byte, 32<<10)
		for {
			n, err := r.Read(buf)
			if n > 0 {
				out.Write(buf[:n])
			}
			if err != nil {
				return
			}
		}
	}()
	go func() {
		p.err = <-waited
		p.state = cmd.ProcessState
		close(p.Exited)
		// Whatever the tool left behind in its group goes with it; it would
		// otherwise hold the pipe open and outlive the attempt. The leader is
		// reaped, so the group is signalled only while a member of it is
		// still in this session (its id cannot have been reused then).
		if sid, err := Getsid(0); err == nil {
			if in, _ := GroupInSession(p.Pgid, sid); in {
				syscall.Kill(-p.Pgid, syscall.SIGKILL)
			}
		}
		r.SetReadDeadline(time.Now().Add(drainTimeout))
		<-copied
		r.Close()
		close(p.Done)
	}()
	return p, nil
}

// ExitInfo returns the exit code (-1 when killed by a signal) and the
// signal, if any, that ended the process.
func (p *Proc) ExitInfo() (code int, sig syscall.Signal) {
	if p.state == nil {
		return -1, 0
	}
	ws, ok := p.state.Sys().(syscall.WaitStatus)
	if !ok {
		return p.state.ExitCode(), 0
	}
	if ws.Signaled() {
		return -1, ws.Signal()
	}
	return ws.ExitStatus(), 0
}

// ExitError describes how a process ended, for Status.Error.
func ExitError(code int, sig syscall.Signal) string {
	if sig != 0 {
		return "killed by " + SignalName(sig)
	}
	return fmt.Sprintf("exit status %d", code)
}

var signalNames = map[syscall.Signal]string{
	syscall.SIGABRT:   "SIGABRT",
	syscall.SIGALRM:   "SIGALRM",
	syscall.SIGBUS:    "SIGBUS",
	syscall.SIGCHLD:   "SIGCHLD",
	syscall.SIGCONT:   "SIGCONT",
	syscall.SIGFPE:    "SIGFPE",
	syscall.SIGHUP:    "SIGHUP",
	syscall.SIGILL:    "SIGILL",
	syscall.SIGINT:    "SIGINT",
	syscall.SIGIO:     "SIGIO",
	syscall.SIGKILL:   "SIGKILL",
	syscall.SIGPIPE:   "SIGPIPE",
	syscall.SIGPROF:   "SIGPROF",
	syscall.SIGQUIT:   "SIGQUIT",
	syscall.SIGSEGV:   "SIGSEGV",
	syscall.SIGSTOP:   "SIGSTOP",
	syscall.SIGSYS:    "SIGSYS",
	syscall.SIGTERM:   "SIGTERM",
	syscall.SIGTRAP:   "SIGTRAP",
	syscall.SIGTSTP:   "SIGTSTP",
	syscall.SIGTTIN:   "SIGTTIN",
	syscall.SIGTTOU:   "SIGTTOU",
	syscall.SIGURG:    "SIGURG",
	syscall.SIGUSR1:   "SIGUSR1",
	syscall.SIGUSR2:   "SIGUSR2",
	syscall.SIGVTALRM: "SIGVTALRM",
	syscall.SIGWINCH:  "SIGWINCH",
	syscall.SIGXCPU:   "SIGXCPU",
	syscall.SIGXFSZ:   "SIGXFSZ",
}

// SignalName gives the conventional name ("SIGKILL"); syscall's String
// gives a description ("killed") and numbers differ between systems.
func SignalName(sig syscall.Signal) string {
	if name, ok := signalNames[sig]; ok {
		return name
	}
	return "SIG" + strconv.Itoa(int(sig))
}

// BuildEnv is base, then TMPDIR (the attempt's tmp/), then the tool's
// settings from launch.json, then extra (the api_mode's), then the
// DISPATCH_* variables, a later value replacing an earlier one of the same
// name; maps are applied in key order, for a stable environment. PWD is set
// to dir, the tool's working directory, because the inherited one names
// wherever the wrapper was started.
func BuildEnv(base []string, extra map[string]string, l wire.Launch, taskDir, dir string) []string {
	env := make([]string, 0, len(base)+len(extra)+4)
	index := make(map[string]int)
	set := func(kv string) {
		k, _, _ := strings.Cut(kv, "=")
		if i, ok := index[k]; ok {
			env[i] = kv
			return
		}
		index[k] = len(env)
		env = append(env, kv)
	}
	for _, kv := range base {
		set(kv)
	}
	set("TMPDIR=" + filepath.Join(taskDir, taskfiles.DirTmp))
	for _, m := range []map[string]string{l.Env, extra} {
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			set(k + "=" + m[k])
		}
	}
	set("DISPATCH_PROJECT=" + l.Project)
	set("DISPATCH_TASK=" + l.Task)
	set("DISPATCH_ATTEMPT=" + strconv.Itoa(l.Attempt))
	set("DISPATCH_NODE=" + l.Node)
	if l.Inputs {
		set("DISPATCH_INPUTS=" + filepath.Join(taskDir, wire.InputsDir))
	}
	set("PWD=" + dir)
	return env
}

func LookupEnv(env []string, key string) string {
	v := ""
	for _, kv := range env {
		if k, val, ok := strings.Cut(kv, "="); ok && k == key {
			v = val
		}
	}
	return v
}

// LookPath finds name the way exec.LookPath does, but in the PATH of the
// tool's environment, which the stdin map may have changed. Relative PATH
// entries are skipped for the reason exec.ErrDot exists. A name with a slash
// is taken relative to dir, the tool's working directory.
func LookPath(name, path, dir string) (string, error) {
	if strings.Contains(name, "/") {
		if !filepath.IsAbs(name) {
			name = filepath.Join(dir, name)
		}
		if err := checkExecutable(name); err != nil {
			return "", fmt.Errorf("%s: %w", name, err)
		}
		return name, nil
	}
	for _, d := range filepath.SplitList(path) {
		if !filepath.IsAbs(d) {
			continue
		}
		p := filepath.Join(d, name)
		if checkExecutable(p) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: %w", name, exec.ErrNotFound)
}

func checkExecutable(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if fi.IsDir() || fi.Mode()&0o111 == 0 {
		return errors.New("not an executable file")
	}
	return nil
}
