//go:build !linux

package wrapper

import (
	"fmt"
	"os/exec"
	"runtime"
)

// limited refuses an attempt with a memory, pids or file_size limit: none
// can be enforced here, and an attempt must not run as if it were (cpu,
// enforced only by Linux cgroups, is accepted everywhere).
func (s *supervisor) limited(cmd *exec.Cmd) (*exec.Cmd, error) {
	if l := s.launch.Limits; l == nil || (l.MemoryBytes <= 0 && l.Pids <= 0 && l.FileSizeBytes <= 0) {
		return cmd, nil
	}
	return nil, fmt.Errorf("limits: not enforced on %s (Linux only); remove the task's limits or run it on a Linux node", runtime.GOOS)
}
