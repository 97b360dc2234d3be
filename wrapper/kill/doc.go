// Package kill owns stopping one attempt on a node from outside its
// supervisor (`wrapper kill`, Task): a live supervisor is left a Request in
// the private .ctl directory and signalled, then waited for; an orphan's
// tool group, vouched for by the process record only, is killed and its
// killed status written; another node's attempt is refused. The final
// status it returns carries the session of the private record.
//
// The subcommand and its flags are package wrapper's (killcmd.go); the
// supervisor reads the Request (killRequested). It imports wire and the
// wrapper packages agentlog, errkind, nodestatus, proc and taskfiles.
package kill
