package taskfiles

// Log keys of the supervisor's wrapper.log (log/slog text), shared by every
// package that writes to it.
const (
	LogKeyDir        = "dir"
	LogKeyPID        = "pid"
	LogKeyTask       = "task"
	LogKeyAttempt    = "attempt"
	LogKeyToolPID    = "tool_pid"
	LogKeyOldAttempt = "old_attempt"
	LogKeyTo         = "to"
	LogKeyReason     = "reason"
	LogKeyGrace      = "grace"
	LogKeyPGID       = "pgid"
	LogKeyStatus     = "status"
	LogKeyErrorClass = "error_class"
	LogKeyError      = "error"
	LogKeyErr        = "err"
	LogKeyPath       = "path"
)
