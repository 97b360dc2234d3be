// Package controller is dispatch's scheduler: it pulls every node's status,
// applies it to the database in one transaction per tick, detects dead
// attempts, retries with backoff, assigns runnable tasks to free slots,
// launches them through the node transport, collects their outputs and
// writes the report.
//
// The controller is the only writer of the database; a file lock next to the
// database (see home.Lock) makes sure of it.
package controller
