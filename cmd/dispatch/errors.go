package main

import (
	"errors"
	"fmt"

	"github.com/dispatch-tool/dispatch/controller"
	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/spec"
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
// that the operator must fix before anything can run: exit 2.
func isConfigError(err error) bool {
	var (
		ce   *nodes.ConfigError
		ces  nodes.ConfigErrors
		se   *spec.Error
		ses  spec.Errors
		up   *spec.UnknownProjectError
		ne   *spec.NameError
		plan *controller.PlanError
		sock *controller.SocketError
	)
	return errors.As(err, &ce) || errors.As(err, &ces) || errors.As(err, &se) || errors.As(err, &ses) ||
		errors.As(err, &up) || errors.As(err, &ne) || errors.As(err, &plan) || errors.As(err, &sock) ||
		errors.Is(err, controller.ErrLocked) || errors.Is(err, store.ErrNoDatabase) || errors.Is(err, store.ErrNotFound)
}
