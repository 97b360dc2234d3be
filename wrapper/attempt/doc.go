// Package attempt holds the decisions of one attempt on a node, pure and
// table-tested without processes, as the controller's decide* functions
// are: the sandbox plan (DecideSandbox), which stop reason wins, what is
// collected once the tool has ended
// (the git result, the gate), and the final status an ending makes
// (Decide: status, error class, message, retry-after). The supervisor
// (package wrapper) reads what happened once, asks these functions, and
// acts: it writes status.json, the record, the log.
//
// It reads nothing and starts nothing. It imports wire, wrapper/agentlog,
X
package attempt
