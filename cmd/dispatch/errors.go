package main

import (
	"errors"
	"fmt"

	"github.com/dispatch-tool/dispatch/home"
	"github.com/dispatch-tool/dispatch/internal/badinput"
	"github.com/dispatch-tool/dispatch/store"
)

// usageError is a mistake on the command line: exit 2 with a hint.
type usageError struct {
	err  error
	hint string
}

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

func usagef(hint, format string, args ...any) error {
	return &usageError{err: fmt.Errorf(format, args...), hint: hint}
}

// workFailed means the command ran but the work it drove did not succeed:
// exit 1.
type workFailed struct{ msg string }

func (e *workFailed) Error() string { return e.msg }

// isConfigError reports errors in nodes.yaml, the specs or the home's state
// that the operator must fix before anything can run: exit 2. Each kind of
// bad input says so itself (badinput.Error); the home's state adds a lock
// held by another controller, a missing database or project, and a
// database that is not whole (a start that never finished making it, an
// older dispatch's).
func isConfigError(err error) bool {
	return badinput.Is(err) ||
		errors.Is(err, home.ErrLocked) || errors.Is(err, store.ErrNoDatabase) || errors.Is(err, store.ErrNotFound) ||
		errors.Is(err, store.ErrNotReady)
}
