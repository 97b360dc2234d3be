package domain

import (
	"strconv"
	"strings"
	"time"
)

// maxQuiet bounds the quiet time read from a heartbeat: it is a node's
// text.
const maxQuiet = 366 * 24 * time.Hour

// HeartbeatQuiet reads how long the tool had been quiet (written nothing
// to task.log or its transcript) when the wrapper wrote heartbeat — its
// third field, in nanoseconds; false when the heartbeat has none (no stall
// watch, an older wrapper) or it does not parse.
func HeartbeatQuiet(heartbeat string) (time.Duration, bool) {
	f := strings.Fields(heartbeat)
	if len(f) != 3 {
		return 0, false
	}
	n, err := strconv.ParseInt(f[2], 10, 64)
	if err != nil || n < 0 {
		return 0, false
	}
	return min(time.Duration(n), maxQuiet), true
}
