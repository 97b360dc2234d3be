// Package store owns dispatch's SQLite database: the projects, tasks,
// attempts (one row per attempt of a task), nodes, the append-only event log
// and the manifest of collected output files. Its rows are domain's types
// (domain.Project, domain.Task, domain.Attempt); what is storage alone stays
// here: the patches, tied to columns, the event rows, nodes and files, the
// queries and the numbered runs' archive.
//
// The controller is the only writer. Every change of a task's status goes
// through Tx.Transition, which checks the transition against domain.Legal
// and appends its event in the same transaction, so the event log is a
// complete history of every task.
//
// The schema is migrations/, applied in order to a database made by an
// older dispatch; a new database is made in one step from schema.sql, the
// migrations' result written out (`go test ./store -run
// TestSchemaSnapshot -update` writes it after a new migration).
package store
