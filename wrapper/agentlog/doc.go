// Package agentlog reads what an agent CLI printed into task.log: why it
// ended (Classify, ExitClass: rate limit, auth, exit), when a rate limit
// resets (ParseRetryAfter, RetrySeconds), the tokens and cost it reports
// (ParseUsage), the notices it prints while it waits to retry
// (RetryNotice), its session id (SessionID) and its last message
// (FinalMessage). Everything here is pure over bytes, so that each tool's
// format is table-tested with recorded output (agentlogtest).
//
// It does not write task.log (taskfiles does) nor act on what it reads (the
// supervisor does). It imports wire, wrapper/proc and wrapper/taskfiles.
package agentlog
