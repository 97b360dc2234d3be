package proc

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/taskfiles"
)

// CtlDirName is the directory beside the wrapper executable holding the
// supervisors' process records, out of the reach of the tasks, which can
// write anything in their task directory and one level up.
const CtlDirName = ".ctl"

// ProcRecord is the authoritative record of the processes of one task
// directory's latest attempt, written by its supervisor. Every signal the
// wrapper sends to another process takes its pid from here, never from the
// task directory, and checks it against the live process first
// (CheckSupervisor, checkToolGroup). Start times are opaque strings from
// ProcStart.
type ProcRecord struct {
	Dir             string `json:"dir"`
	Attempt         int    `json:"attempt"`
	SupervisorPID   int    `json:"supervisor_pid"`
	SupervisorStart string `json:"supervisor_start"`
	// SID is the supervisor's session (it calls setsid, so SID is its pid).
	SID       int    `json:"sid"`
	ToolPGID  int    `json:"tool_pgid"`
	ToolStart string `json:"tool_start"`
	// SessionID is the tool's session as the tool itself named it (the
	// first init line of its output, not setup's), kept here, out of the
	// task's reach: status.json's copy is what the task may have forged,
	// and a later attempt passes the id back to the tool.
	SessionID string `json:"session_id,omitempty"`
	// Agent is launch.json's agent, for a kill that reads the usage of an
	// attempt whose supervisor is gone.
	Agent string `json:"agent,omitempty"`
	// Gate is the result of launch.json's gate, kept here for `status`
	// for the same reason as SessionID.
	Gate *wire.GateResult `json:"gate,omitempty"`
	// Node is launch.json's node: `kill --node` signals no attempt of
	// another node (see owner.go).
	Node string `json:"node,omitempty"`
}

// RecordPath is <dir of the wrapper executable>/.ctl/<sha256 of dir>.json.
// The directory is created 0700 and must be a directory of this user
// that nobody else can write.
func RecordPath(dir string) (string, error) {
	ctl, err := CtlDir()
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte(filepath.Clean(dir)))
	return filepath.Join(ctl, hex.EncodeToString(sum[:])+".json"), nil
}

// ctlDir is CtlDir's answer, checked once a process: an attempt looked
// it up four times (each a readlink, a mkdir and a stat), and `status`
// and `watch` once a final status read. Only this user can change it
// (it is beside the wrapper, out of the tasks' reach); WriteRecord looks
// again when it is gone.
var ctlDir struct {
	mu   sync.Mutex // guards path
	path string
}

// CtlDir is the private directory beside the wrapper executable, made
// 0700 when missing, and refused unless it is a directory of this user
// that nobody else can write.
func CtlDir() (string, error) {
	ctlDir.mu.Lock()
	defer ctlDir.mu.Unlock()
	if ctlDir.path != "" {
		return ctlDir.path, nil
	}
	path, err := checkCtlDir()
	if err == nil {
		ctlDir.path = path
	}
	return path, err
}

// forgetCtlDir makes the next CtlDir look again (and make it anew).
func forgetCtlDir() {
	ctlDir.mu.Lock()
	ctlDir.path = ""
	ctlDir.mu.Unlock()
}

// checkCtlDir makes and checks CtlDir's directory.
func checkCtlDir() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find own executable: %w", err)
	}
	ctl := filepath.Join(filepath.Dir(exe), CtlDirName)
	if err := os.Mkdir(ctl, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return "", fmt.Errorf("create %s: %w", ctl, err)
	}
	fi, err := os.Lstat(ctl)
	if err != nil {
		return "", fmt.Errorf("check %s: %w", ctl, err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || !ok || int(st.Uid) != os.Geteuid() || fi.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("%s must be a directory of uid %d with mode 0700 (remove it; the wrapper recreates it)", ctl, os.Geteuid())
	}
	return ctl, nil
}

// KillRequestPath is where `kill` asks the supervisor of dir to stop an
// attempt: <dir of the wrapper executable>/.ctl/<sha256 of dir>.kill.
func KillRequestPath(dir string) (string, error) {
	path, err := RecordPath(dir)
	if err != nil {
		return "", err
	}
	return strings.TrimSuffix(path, ".json") + ".kill", nil
}

// WriteRecord replaces the record of r.Dir atomically. A .ctl directory
// removed since CtlDir checked it is made again.
func WriteRecord(r *ProcRecord) error {
	data, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encode process record: %w", err)
	}
	for try := 0; ; try++ {
		path, err := RecordPath(r.Dir)
		if err != nil {
			return err
		}
		err = taskfiles.WriteFileAtomic(path, append(data, '\n'), 0o600)
		if err == nil {
			return nil
		}
		if try > 0 || !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("write process record: %w", err)
		}
		forgetCtlDir()
	}
}

// ReadRecord reads the process record of task directory dir. A missing
// record gives an error satisfying errors.Is(err, os.ErrNotExist).
func ReadRecord(dir string) (*ProcRecord, error) {
	path, err := RecordPath(dir)
	if err != nil {
		return nil, err
	}
	data, err := taskfiles.ReadControlFileMax(path, taskfiles.MaxRecordFile)
	if err != nil {
		return nil, fmt.Errorf("read process record of %s: %w", dir, err)
	}
	var r ProcRecord
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("parse process record %s: %w", path, err)
	}
	if r.Dir != filepath.Clean(dir) {
		return nil, fmt.Errorf("process record %s names %s, not %s", path, r.Dir, dir)
	}
	return &r, nil
}

// CheckSupervisor reports why the recorded supervisor must not be
// signalled, or nil: its pid must be above 1, the process with that pid must
// have started when the recorded one did, and lead the recorded session.
func (r *ProcRecord) CheckSupervisor() error {
	pid := r.SupervisorPID
	if pid <= 1 || r.SID <= 1 {
		return fmt.Errorf("recorded supervisor pid %d, session %d: not a process to signal", pid, r.SID)
	}
	start, err := ProcStart(pid)
	if err != nil {
		return fmt.Errorf("supervisor %d: %w", pid, err)
	}
	if start != r.SupervisorStart {
		return fmt.Errorf("pid %d started at %s, not at the recorded %s: it is not the supervisor", pid, start, r.SupervisorStart)
	}
	if sid, err := Getsid(pid); err != nil || sid != r.SID {
		return fmt.Errorf("pid %d is in session %d, not the recorded %d (%v)", pid, sid, r.SID, err)
	}
	return nil
}

// SupervisorGone reports whether the recorded supervisor is provably not
// running: no process has its pid, or the one that has it started at
// another time.
func (r *ProcRecord) SupervisorGone() bool {
	if r.SupervisorPID <= 1 {
		return false
	}
	start, err := ProcStart(r.SupervisorPID)
	if err != nil {
		return errors.Is(err, syscall.ESRCH)
	}
	return start != r.SupervisorStart
}

// ErrNoGroup means the recorded tool group has no member left: there is
// nothing to signal, and nothing wrong.
var ErrNoGroup = errors.New("the recorded tool group has no live member")

// checkToolGroup reports why the recorded tool group must not be
// signalled, or nil. The group's id must be above 1 and not the caller's own
// group; if its leader still lives it must have started when the recorded
// one did; and a live member of the group must be in the recorded session.
// The kernel reuses no pid while it names a live group or session, so a
// member found in both is one of this attempt's processes.
func (r *ProcRecord) checkToolGroup() error {
	pgid := r.ToolPGID
	if pgid <= 1 || r.SID <= 1 {
		return fmt.Errorf("recorded tool group %d, session %d: not a group to signal", pgid, r.SID)
	}
	if pgid == syscall.Getpgrp() {
		return fmt.Errorf("recorded tool group %d is the wrapper's own", pgid)
	}
	if start, err := ProcStart(pgid); err == nil && start != r.ToolStart {
		return fmt.Errorf("pid %d started at %s, not at the recorded %s: it is not the tool", pgid, start, r.ToolStart)
	}
	in, err := GroupInSession(pgid, r.SID)
	if err != nil {
		return fmt.Errorf("look for the members of group %d: %w", pgid, err)
	}
	if !in {
		if GroupAlive(pgid) {
			return fmt.Errorf("group %d has no member in the recorded session %d: it is not the tool's", pgid, r.SID)
		}
		return ErrNoGroup
	}
	return nil
}

// KillToolGroup sends sig to the recorded tool group after checkToolGroup.
// It returns ErrNoGroup when there was nothing to signal.
func (r *ProcRecord) KillToolGroup(sig syscall.Signal) error {
	if err := r.checkToolGroup(); err != nil {
		return err
	}
	if err := syscall.Kill(-r.ToolPGID, sig); err != nil {
		if err == syscall.ESRCH {
			return ErrNoGroup
		}
		return fmt.Errorf("signal group %d: %w", r.ToolPGID, err)
	}
	return nil
}

// SignalSupervisor sends sig to the recorded supervisor after
// CheckSupervisor.
func (r *ProcRecord) SignalSupervisor(sig syscall.Signal) error {
	if err := r.CheckSupervisor(); err != nil {
		return err
	}
	if err := syscall.Kill(r.SupervisorPID, sig); err != nil && err != syscall.ESRCH {
		return fmt.Errorf("signal supervisor %d: %w", r.SupervisorPID, err)
	}
	return nil
}
