package taskfiles

import (
	"fmt"
	"os"
	"strings"
	"time"
)

// AttemptFiles picks, of the entries of a task directory, the files of an
// earlier attempt, output/ aside: the protocol's files and the temporary
// files a crash in the middle of WriteFileAtomic may have left behind.
// spec.md, launch.json, lock, wrapper.log and the base tree are the
// task's, not an attempt's, and stay.
func AttemptFiles(entries []os.DirEntry) []string {
	own := []string{FileStatus, FileLog, FileHeartbeat, FilePID}
	var found []string
	for _, e := range entries {
		for _, name := range own {
			if e.Name() == name || strings.HasPrefix(e.Name(), "."+name+".tmp") {
				found = append(found, e.Name())
				break
			}
		}
	}
	return found
}

// OldTmps picks, of the entries of a task directory, the earlier
// attempts' scratch directories moved aside for removal (tmp/, home/ and
// the gate's, each <name>.old.<…>).
func OldTmps(entries []os.DirEntry) []string {
	var old []string
	for _, e := range entries {
		for _, name := range []string{DirTmp, DirHome, DirGateHome, DirGateTmp} {
			if strings.HasPrefix(e.Name(), name+OldTmpSuffix) {
				old = append(old, e.Name())
				break
			}
		}
	}
	return old
}

// HeartbeatLine is the heartbeat file's content: the beat's sequence
// number (every beat differs even if the clock does not move), the time,
// and, while a stall watch runs (activeAt > 0), the nanoseconds since the
// tool last wrote: the controller compares no clocks, it reads how long
// the tool has been quiet (domain.HeartbeatQuiet reads it).
func HeartbeatLine(seq int, now time.Time, activeAt int64) string {
	if activeAt <= 0 {
		return fmt.Sprintf("%d %d\n", seq, now.UnixNano())
	}
	return fmt.Sprintf("%d %d %d\n", seq, now.UnixNano(), max(now.UnixNano()-activeAt, 0))
}
