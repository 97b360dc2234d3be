// Package domain is dispatch's vocabulary: the words every layer speaks
// and the rules that come with them. A Task and its Attempts; the task
// statuses and the state machine between them (Legal, Terminal); the
// phases of a project, the IDs of its phase tasks (S99, V01, F01) and its
// results; a Project and the options stored with it (ProjectOptions, with
// its budget rules).
//
// It holds values and pure rules only: no I/O, no database. store keeps
// them (its patches, queries and event log are storage, not vocabulary);
// controller, plan and readmodel decide and report in them.
package domain
