// Package attempt holds the decisions of one attempt on a node, pure and
// table-tested without processes, as the controller's decide* functions
// are: the sandbox plan (DecideSandbox), what is collected once the tool
// has ended (Collect: the git result, the gate), and the final status an
// ending makes (Decide: which stop reason wins, then status, error class,
// message, retry-after). The supervisor (package wrapper) reads what
// happened once, asks these functions, and acts: it writes status.json,
// the record, the log.
//
// It reads nothing and starts nothing. It imports wire, wrapper/agentlog,
// wrapper/limits (the watchdog's reasons), wrapper/proc (exit wording) and
// wrapper/sandbox (Under).
package attempt
