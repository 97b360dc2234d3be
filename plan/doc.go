// Package plan is what `dispatch validate` and `dispatch start` do before
// the controller runs anything: it checks that every task of a project,
// the generated phase tasks included, can run on some node with a known
// tool (Plan), asks the nodes whether those tools are installed
// (NeededExecutables, ProbeExecutables, CheckExecutables), and records the
// project in the database (AddProject): a finished project begins its next
// numbered run, which reuses the result of every task whose inputs did not
// change and archives the run that ended.
package plan
