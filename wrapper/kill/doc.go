// Package kill owns stopping one attempt on a node from outside its
// supervisor (`wrapper kill`, Task): a live supervisor is left a Request in
// the private .ctl directory and signalled, then waited for; an orphan's
// tool group, vouched for by the process record only, is killed and its
// killed status written; another node's attempt is refused, and so is an
// attempt whose supervisor has not recorded itself yet (launch.json's
// attempt later than the record's: the recorded supervisor, of an earlier
// batch, is not the lock's holder). The final status it returns carries
// the session of the private record.
//
// The subcommand and its flags are package wrapper's (killcmd.go); the
// supervisor reads the Request (killRequested). It imports wire and the
// wrapper packages agentlog, errkind, launchfile, nodestatus, proc and
// taskfiles.
package kill
