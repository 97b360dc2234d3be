// Package badinput names the one question the CLI asks of an error to pick
// its exit status: is it the operator's input that is wrong (nodes.yaml, a
// spec, a name, the home's state), to be fixed before anything can run
// (exit 2), or did the work fail (exit 1)?
package badinput

import "errors"

// Error is implemented by the errors that mean bad input.
type Error interface {
	error
	// BadInput reports whether the error is the operator's input.
	BadInput() bool
}

// Is reports whether err, or an error it wraps, is bad input.
func Is(err error) bool {
	var b Error
	return errors.As(err, &b) && b.BadInput()
}
