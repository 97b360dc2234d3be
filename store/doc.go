// Package store owns dispatch's SQLite database: the projects, tasks, attempts (one
// row per attempt), nodes, the append-only event log and the manifest of
// collected output files.
//
// The controller is the only writer. Every change of a task's status goes
// through Tx.Transition, which checks the transition against the state machine
// and appends its event in the same transaction, so the event log is a
// complete history of every task.
package store
