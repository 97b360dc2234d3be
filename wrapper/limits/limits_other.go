//go:build !linux

package limits

import (
	"log/slog"
	"syscall"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/errkind"
	"github.com/dispatch-tool/dispatch/wrapper/proc"
)

// LimitEnforcement is how this node enforces limits: not at all.
func LimitEnforcement() string { return wire.EnforceNone }

func CmdLimitExec([]string) error {
	return errkind.Usagef("%s: limits are enforced on Linux only", LimitExecCommand)
}

// Watchdog watches nothing: no limit is enforced here.
func Watchdog(*wire.Limits, *AttemptCgroup, *proc.Proc, func(reason, msg string) bool, *slog.Logger) {
}

// TermSandboxed asks a sandboxed child's group to end (no sandbox here).
func TermSandboxed(root int) { syscall.Kill(-root, syscall.SIGTERM) }
