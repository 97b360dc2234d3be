package errkind

import (
	"errors"
	"fmt"
	"os"

	"github.com/dispatch-tool/dispatch/wire"
)

// Error carries the wire.ErrorReply kind of a failed subcommand.
type Error struct {
	Kind string
	Err  error
}

func (e *Error) Error() string { return e.Err.Error() }

func (e *Error) Unwrap() error { return e.Err }

// Usagef is a usage error: bad arguments or configuration (exit 2 on the
// controller's side).
func Usagef(format string, args ...any) error {
	return &Error{wire.KindUsage, fmt.Errorf(format, args...)}
}

// IO is a file system or I/O error.
func IO(err error) error {
	return &Error{wire.KindIO, err}
}

// Of picks the wire.ErrorReply kind for err; untyped errors are io errors
// because nearly everything the wrapper does is file system work.
func Of(err error) string {
	var ce *Error
	if errors.As(err, &ce) {
		return ce.Kind
	}
	if errors.Is(err, os.ErrNotExist) {
		return wire.KindNotFound
	}
	return wire.KindIO
}
