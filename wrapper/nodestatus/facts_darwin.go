package nodestatus

import (
	"context"
	"encoding/binary"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/taskfiles"
)

// readFacts reads load with sysctl(3) and memory from vm_stat(1), macOS
// having no /proc. Facts are best effort: a value that cannot be read stays
// zero.
func readFacts(ctx context.Context, root string) wire.Facts {
	f := wire.Facts{OS: runtime.GOOS, Arch: runtime.GOARCH, DiskFreeBytes: taskfiles.DiskFree(root)}
	f.Load1 = load1()
	f.MemAvailableBytes = memAvailable(ctx)
	return f
}

// load1 decodes struct loadavg { fixpt_t ldavg[3]; long fscale; } (24 bytes
// on 64-bit macOS, little endian); syscall.Sysctl drops one trailing NUL,
// which the padding restores.
func load1() float64 {
	s, err := syscall.Sysctl("vm.loadavg")
	if err != nil {
		return 0
	}
	b := make([]byte, 24)
	copy(b, s)
	fscale := binary.LittleEndian.Uint64(b[16:24])
	if fscale == 0 {
		return 0
	}
	return float64(binary.LittleEndian.Uint32(b[0:4])) / float64(fscale)
}

// memAvailable approximates Linux's MemAvailable as free + inactive +
// speculative pages, the memory macOS hands out without swapping.
func memAvailable(ctx context.Context) int64 {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "/usr/bin/vm_stat").Output()
	if err != nil {
		return 0
	}
	var pageSize, pages int64
	for _, line := range strings.Split(string(out), "\n") {
		if i := strings.Index(line, "page size of "); i >= 0 {
			fields := strings.Fields(line[i+len("page size of "):])
			if len(fields) > 0 {
				pageSize, _ = strconv.ParseInt(fields[0], 10, 64)
			}
			continue
		}
		name, value, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch strings.TrimSpace(name) {
		case "Pages free", "Pages inactive", "Pages speculative":
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(value), "."), 10, 64)
			if err == nil {
				pages += n
			}
		}
	}
	return pages * pageSize
}
