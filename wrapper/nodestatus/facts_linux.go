package nodestatus

import (
	"context"
	"os"
	"runtime"
	"strconv"
	"strings"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/taskfiles"
)

// readFacts reads memory and load from /proc, which costs no process start.
// Facts are best effort: a value that cannot be read stays zero.
func readFacts(_ context.Context, root string) wire.Facts {
	f := wire.Facts{OS: runtime.GOOS, Arch: runtime.GOARCH, DiskFreeBytes: taskfiles.DiskFree(root)}
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			fields := strings.Fields(line)
			if len(fields) >= 2 && fields[0] == "MemAvailable:" {
				if kb, err := strconv.ParseInt(fields[1], 10, 64); err == nil {
					f.MemAvailableBytes = kb * 1024
				}
				break
			}
		}
	}
	if data, err := os.ReadFile("/proc/loadavg"); err == nil {
		if fields := strings.Fields(string(data)); len(fields) > 0 {
			f.Load1, _ = strconv.ParseFloat(fields[0], 64)
		}
	}
	return f
}
