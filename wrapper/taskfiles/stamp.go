package taskfiles

import "time"

// Timestamp formats t as RFC 3339 UTC with milliseconds, as status.json wants.
func Timestamp(t time.Time) string {
	return t.UTC().Format("2006-01-02T15:04:05.000Z")
}

// ReadyTimeout bounds the wait for a new supervisor; it covers killing a
// leftover tool group and moving an attempt aside, both quick.
const ReadyTimeout = time.Minute
