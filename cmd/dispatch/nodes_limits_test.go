package main

import "testing"

func TestLimitsText(t *testing.T) {
	tests := []struct {
		enforcement, setting, want string
	}{
		{"cgroup v1 (cpu,memory,pids)", "memory 4GiB", "cgroup v1 (cpu,memory,pids) (memory and pids: the cgroup; cpu: the cgroup's quota; file_size: RLIMIT_FSIZE); node default: memory 4GiB"},
		{"cgroup v2 (memory,pids) at /sys/fs/cgroup/user.slice/x.scope", "",
			"cgroup v2 (memory,pids) at /sys/fs/cgroup/user.slice/x.scope (memory and pids: the cgroup; file_size: RLIMIT_FSIZE; cpu is not enforced: no cpu controller the node user can write)"},
		{"cgroup v1 (cpu,memory)", "", "cgroup v1 (cpu,memory) (memory: the cgroup; pids: the wrapper's watchdog; cpu: the cgroup's quota; file_size: RLIMIT_FSIZE)"},
		{"rlimits+watchdog", "", "rlimits+watchdog (memory and pids: the wrapper's watchdog; file_size: RLIMIT_FSIZE; cpu is not enforced: it needs cgroups)"},
		{"none", "", "none (not Linux: a task with memory, pids or file_size limits fails to start there)"},
		{"", "", "unknown (the wrapper does not say)"},
		{"cgroup v9 \x1b[31m(cpu)", "", "cgroup v9 \\x1b[31m(cpu) (memory and pids: the wrapper's watchdog; cpu: the cgroup's quota; file_size: RLIMIT_FSIZE)"},
	}
	for _, tc := range tests {
		t.Run(tc.enforcement, func(t *testing.T) {
			if got := limitsText(tc.enforcement, tc.setting); got != tc.want {
				t.Errorf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
}
