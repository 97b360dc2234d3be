package taskfiles

import "time"

// Timestamp formats t as RFC 3339 UTC with milliseconds, as status.json wants.
func Timestamp(t time.Time) string {
	return t.UTC().Format("2006-01-02T15:04:05.000Z")
}

// ReadyTimeout bounds how long `run` waits for a new supervisor to take
// the attempts off its stdin pipe (a document larger than the pipe's
// buffer); a live marker older than twice this with no supervisor behind
// it is a launch that never started.
const ReadyTimeout = time.Minute
