// Package proc owns the processes of an attempt on a node: starting one in
// its own process group with its output copied (StartProc, Proc), how it
// ended (ExitError, SignalName), the tool's environment and PATH lookup
// (BuildEnv, LookPath), what /proc (or libproc) says of a pid (ProcStart,
// GroupInSession, GroupAlive), and the supervisor's private process record
// (ProcRecord) that is the only thing trusted before a pid is signalled:
// it is checked against the pid's start time and session, never <= 1.
// OthersTask and RecordNode say which node an attempt belongs to.
//
// It does not decide when to kill (the supervisor and `kill` do) and does
// not read the tool's output. It imports wire and wrapper/taskfiles.
package proc
