// Package controller is dispatch's scheduler: it pulls every node's status,
// applies it to the database in one transaction per tick, detects dead
// attempts, retries with backoff, assigns runnable tasks to free slots,
// launches, reads and kills them through each node's executor (package
// controller/executor; the wrapper's over the node transport for SSH and
// local nodes), collects their outputs and writes the report.
//
// The controller is the only writer of the database; a file lock next to the
// database (see home.Lock) makes sure of it.
package controller
