// Package wrapper is the node-side binary of dispatch (cmd/dispatch-wrapper)
// as a library: the subcommands the controller calls on a node (version, run,
// status, kill, tail) and the detached supervisor that runs one attempt of a
// task.
//
// The contract with the controller is docs/PROTOCOL.md, and the documents
// both sides read and write (launch.json, status.json, the replies) are the
// types of package wire. In short, a task directory D holds launch.json
// (pushed by the controller) and the files the wrapper writes: lock, pid,
// status.json, heartbeat, task.log, output/ and attempts/<n>/. `run`
// re-executes the binary as a hidden `supervise` subcommand in its own
// session, hands it the secret environment over a pipe (never a file or
// argv), and returns once the supervisor has taken D/lock and written a
// running status.json. The supervisor holds the lock for its whole
// life, so "alive" is decided by flock(2), which pid reuse cannot fool.
//
// When launch.json names a base directory in D, the supervisor copies its
// tree into a fresh output/ before setup and the tool. When the tool ends,
// the supervisor reads its token and cost figures from task.log (ParseUsage)
// and, for a rate limit, when the limit resets (ParseRetryAfter).
//
// Two files beyond the protocol's list live in D: wrapper.log, the
// supervisor's own stderr (diagnostics, never secrets), and kill.json, a
// short-lived note from `kill --grace` telling the supervisor which grace to
// use.
//
// The root package keeps the subcommands' glue and the supervisor; the
// concerns below it are packages of their own (taskfiles, errkind, proc,
// agentlog, egress, tree, gitresult, limits, launchfile, sandbox,
// nodestatus, kill, gate, attempt: docs/CODE.md maps them). Besides those
// and the standard library it uses only wire, internal/netallow and
// internal/filetree, and builds for linux and darwin.
package wrapper
