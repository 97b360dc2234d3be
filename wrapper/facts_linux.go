package wrapper

import (
	"bytes"
	"context"
	"os"
	"runtime"
	"strconv"
	"strings"
)

// readFacts reads memory and load from /proc, which costs no process start.
// Facts are best effort: a value that cannot be read stays zero.
func readFacts(_ context.Context, root string) Facts {
	f := Facts{OS: runtime.GOOS, Arch: runtime.GOARCH, DiskFreeBytes: diskFree(root)}
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

// groupAlive reports whether process group pgid has a member that is not a
// zombie. kill(-pgid, 0) alone would count zombies, which linger where init
// does not reap (containers), and call a killed group alive.
func groupAlive(pgid int) bool {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return false
	}
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		data, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// The command name, in parentheses, may hold spaces; fields follow
		// the last ')': state ppid pgrp ...
		i := bytes.LastIndexByte(data, ')')
		if i < 0 {
			continue
		}
		fields := strings.Fields(string(data[i+1:]))
		if len(fields) < 3 || fields[0] == "Z" || fields[0] == "X" {
			continue
		}
		if pg, err := strconv.Atoi(fields[2]); err == nil && pg == pgid {
			return true
		}
	}
	return false
}
