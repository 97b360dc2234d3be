package limits

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/dispatch-tool/dispatch/wire"
)

// hybridCgroup and hybridMounts are a hybrid node's /proc/self/cgroup and
// mountinfo (the v1 controllers, and a v2 mount without any), as on the
// machine these tests were written on.
const hybridCgroup = `9:name=systemd:/
8:pids:/
4:memory:/process_api/b346
2:cpuacct:/
1:cpu:/
0::/
`

const hybridMounts = `31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
`

// scopeCgroup is a process of `systemd-run --user --scope -p Delegate=yes`.
const scopeCgroup = "0::/user.slice/user-1000.slice/user@1000.service/app.slice/run-r1.scope\n"

const v2Mounts = "25 21 0:22 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot\n"

func TestCgroupParse(t *testing.T) {
	got := parseProcCgroup(hybridCgroup + "garbage\n")
	want := []procCgroup{
		{"9", []string{"name=systemd"}, "/"}, {"8", []string{"pids"}, "/"},
		{"4", []string{"memory"}, "/process_api/b346"}, {"2", []string{"cpuacct"}, "/"},
		{"1", []string{"cpu"}, "/"}, {"0", nil, "/"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("parseProcCgroup: %+v, want %+v", got, want)
	}
	mounts := parseMountinfo(hybridMounts + `50 31 0:40 /docker/abc /mnt/with\040space ro,relatime shared:9 master:2 - cgroup cgroup rw,cpu,cpuacct` + "\n")
	if len(mounts) != 7 {
		t.Fatalf("parseMountinfo: %d mounts, want 7 (not the tmpfs): %+v", len(mounts), mounts)
	}
	last := mounts[6]
	if last.root != "/docker/abc" || last.point != "/mnt/with space" || last.v2 || last.rw || !slices.Equal(last.options, []string{"rw", "cpu", "cpuacct"}) {
		t.Errorf("the mount with optional fields and an escaped space: %+v", last)
	}
	if m := mounts[5]; !m.v2 || m.point != "/sys/fs/cgroup/unified" || !m.rw {
		t.Errorf("the v2 mount: %+v", m)
	}
}

func TestCgroupPlan(t *testing.T) {
	const userSvc = "/sys/fs/cgroup/user.slice/user-1000.slice/user@1000.service/app.slice"
	all := []string{"cpuset", "cpu", "io", "memory", "pids"}
	tests := []struct {
		name           string
		cgroup, mounts string
		dirs           map[string]cgroupDirInfo // by directory; absent: not writable, nothing
		want           CgroupPlan
		enforcement    string
	}{
		{
			name: "hybrid: v1 where writable, not the v2 mount without controllers", cgroup: hybridCgroup, mounts: hybridMounts,
			dirs: map[string]cgroupDirInfo{
				"/sys/fs/cgroup/cpu": {writable: true}, "/sys/fs/cgroup/memory/process_api/b346": {writable: true},
				"/sys/fs/cgroup/pids": {writable: true}, "/sys/fs/cgroup/unified": {writable: true},
			},
			want: CgroupPlan{version: 1, Hiers: []cgroupHier{
				{"/sys/fs/cgroup/cpu", []string{"cpu"}}, {"/sys/fs/cgroup/memory/process_api/b346", []string{"memory"}},
				{"/sys/fs/cgroup/pids", []string{"pids"}},
			}},
			enforcement: "cgroup v1 (cpu,memory,pids)",
		},
		{
			name: "v1: only the writable hierarchies", cgroup: hybridCgroup, mounts: hybridMounts,
			dirs:        map[string]cgroupDirInfo{"/sys/fs/cgroup/memory/process_api/b346": {writable: true}},
			want:        CgroupPlan{version: 1, Hiers: []cgroupHier{{"/sys/fs/cgroup/memory/process_api/b346", []string{"memory"}}}},
			enforcement: "cgroup v1 (memory)",
		},
		{
			name: "v1: cpu,cpuacct mounted together", cgroup: "3:cpu,cpuacct:/a\n", mounts: "1 0 0:1 / /cg/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n",
			dirs:        map[string]cgroupDirInfo{"/cg/cpu,cpuacct/a": {writable: true}},
			want:        CgroupPlan{version: 1, Hiers: []cgroupHier{{"/cg/cpu,cpuacct/a", []string{"cpu"}}}},
			enforcement: "cgroup v1 (cpu)",
		},
		{
			name: "v1 not writable: none", cgroup: hybridCgroup, mounts: hybridMounts,
			want:        CgroupPlan{Why: "cgroup v2: no cpu, memory or pids controller in /sys/fs/cgroup/unified"},
			enforcement: wire.EnforceRlimits,
		},
		{
			name: "v2 delegated scope: a leaf for the wrapper", cgroup: scopeCgroup, mounts: v2Mounts,
			dirs: map[string]cgroupDirInfo{userSvc + "/run-r1.scope": {writable: true, controllers: all}},
			want: CgroupPlan{version: 2, Hiers: []cgroupHier{{userSvc + "/run-r1.scope", []string{"cpu", "memory", "pids"}}},
				leaf: userSvc + "/run-r1.scope/dispatch-wrapper"},
			enforcement: "cgroup v2 (cpu,memory,pids) at " + userSvc + "/run-r1.scope",
		},
		{
			name: "v2 delegated without cpu (user@.service delegates memory and pids only)", cgroup: scopeCgroup, mounts: v2Mounts,
			dirs: map[string]cgroupDirInfo{userSvc + "/run-r1.scope": {writable: true, controllers: []string{"memory", "pids"}}},
			want: CgroupPlan{version: 2, Hiers: []cgroupHier{{userSvc + "/run-r1.scope", []string{"memory", "pids"}}},
				leaf: userSvc + "/run-r1.scope/dispatch-wrapper"},
			enforcement: "cgroup v2 (memory,pids) at " + userSvc + "/run-r1.scope",
		},
		{
			name: "v2 in the wrapper's leaf: its parent", cgroup: "0::/user.slice/user-1000.slice/user@1000.service/app.slice/run-r1.scope/dispatch-wrapper\n", mounts: v2Mounts,
			dirs: map[string]cgroupDirInfo{
				userSvc + "/run-r1.scope":                  {writable: true, controllers: all, subtree: []string{"memory", "pids", "cpu"}},
				userSvc + "/run-r1.scope/dispatch-wrapper": {writable: true},
			},
			want:        CgroupPlan{version: 2, Hiers: []cgroupHier{{userSvc + "/run-r1.scope", []string{"cpu", "memory", "pids"}}}},
			enforcement: "cgroup v2 (cpu,memory,pids) at " + userSvc + "/run-r1.scope",
		},
		{
			name: "v2 root: no leaf", cgroup: "0::/\n", mounts: v2Mounts,
			dirs:        map[string]cgroupDirInfo{"/sys/fs/cgroup": {writable: true, controllers: all, root: true}},
			want:        CgroupPlan{version: 2, Hiers: []cgroupHier{{"/sys/fs/cgroup", []string{"cpu", "memory", "pids"}}}},
			enforcement: "cgroup v2 (cpu,memory,pids) at /sys/fs/cgroup",
		},
		{
			name: "v2 ssh session scope, not delegated: none", cgroup: "0::/user.slice/user-1000.slice/session-4.scope\n", mounts: v2Mounts,
			dirs:        map[string]cgroupDirInfo{"/sys/fs/cgroup/user.slice/user-1000.slice/session-4.scope": {controllers: all}},
			want:        CgroupPlan{Why: "cgroup v2: /sys/fs/cgroup/user.slice/user-1000.slice/session-4.scope is not delegated to the node user"},
			enforcement: wire.EnforceRlimits,
		},
		{
			name: "v2 mount of another cgroup namespace: none", cgroup: "0::/elsewhere\n", mounts: "1 0 0:1 /docker/abc /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
			want:        CgroupPlan{Why: "cgroup v2: the process's cgroup is outside the mount"},
			enforcement: wire.EnforceRlimits,
		},
		{
			name: "v2 mount root under a prefix", cgroup: "0::/docker/abc/sub\n", mounts: "1 0 0:1 /docker/abc /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
			dirs:        map[string]cgroupDirInfo{"/sys/fs/cgroup/sub": {writable: true, controllers: []string{"pids"}}},
			want:        CgroupPlan{version: 2, Hiers: []cgroupHier{{"/sys/fs/cgroup/sub", []string{"pids"}}}, leaf: "/sys/fs/cgroup/sub/dispatch-wrapper"},
			enforcement: "cgroup v2 (pids) at /sys/fs/cgroup/sub",
		},
		{
			name: "no cgroup mount", cgroup: "0::/\n", mounts: "",
			want:        CgroupPlan{Why: "no cgroup mount"},
			enforcement: wire.EnforceRlimits,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			info := func(dir string, v2 bool) cgroupDirInfo { return tc.dirs[dir] }
			got := planCgroups(parseProcCgroup(tc.cgroup), parseMountinfo(tc.mounts), info)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("plan:\n got %+v\nwant %+v", got, tc.want)
			}
			if e := got.Enforcement(); e != tc.enforcement {
				t.Errorf("enforcement %q, want %q", e, tc.enforcement)
			}
			if c := wire.EnforcementControllers(got.Enforcement()); !slices.Equal(c, got.controllers()) {
				t.Errorf("EnforcementControllers(%q) = %v, want %v", got.Enforcement(), c, got.controllers())
			}
		})
	}
}

func TestCgroupFiles(t *testing.T) {
	all := []string{"cpu", "memory", "pids"}
	l := &wire.Limits{CPU: 1.5, MemoryBytes: 64 << 20, Pids: 64, FileSizeBytes: 1 << 20}
	yes := func(string) bool { return true }
	no := func(string) bool { return false }
	tests := []struct {
		name    string
		version int
		ctrls   []string
		l       *wire.Limits
		exists  func(string) bool
		want    []cgroupFile
	}{
		{"v2 all", 2, all, l, yes, []cgroupFile{
			{"cpu.max", "150000 100000"}, {"memory.max", "67108864"}, {"memory.swap.max", "0"},
			{"memory.oom.group", "1"}, {"pids.max", "64"},
		}},
		{"v2 no swap accounting", 2, all, &wire.Limits{MemoryBytes: 1 << 30}, no, []cgroupFile{{"memory.max", "1073741824"}}},
		{"v1 all, memsw after the limit", 1, all, l, yes, []cgroupFile{
			{"cpu.cfs_period_us", "100000"}, {"cpu.cfs_quota_us", "150000"},
			{"memory.limit_in_bytes", "67108864"}, {"memory.memsw.limit_in_bytes", "67108864"}, {"pids.max", "64"},
		}},
		{"v1 memory hierarchy only", 1, []string{"memory"}, l, no, []cgroupFile{{"memory.limit_in_bytes", "67108864"}}},
		{"a tiny cpu is the kernel's 1 ms minimum", 2, all, &wire.Limits{CPU: 0.001}, yes, []cgroupFile{{"cpu.max", "1000 100000"}}},
		{"a fifth of a core", 1, all, &wire.Limits{CPU: 0.2}, yes, []cgroupFile{{"cpu.cfs_period_us", "100000"}, {"cpu.cfs_quota_us", "20000"}}},
		{"file_size only: nothing", 2, all, &wire.Limits{FileSizeBytes: 1 << 20}, yes, nil},
		{"no limits", 2, all, nil, yes, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := cgroupFiles(tc.version, tc.ctrls, tc.l, tc.exists); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestCgroupNames(t *testing.T) {
	stem := CgroupStem("my proj", "S01/../x_y", "/w/my proj/tasks/S01")
	if !strings.HasPrefix(stem, "dispatch_my-proj_S01-..-x-y_") || !strings.HasSuffix(stem, "_") || len(stem) != len("dispatch_my-proj_S01-..-x-y_")+9 {
		t.Errorf("stem %q", stem)
	}
	if other := CgroupStem("my", "proj_S01/../x_y", "/w/my/tasks/proj_S01"); other == stem {
		t.Errorf("two tasks share the stem %q", stem)
	}
	if w := cgroupWord(".hidden/" + strings.Repeat("x", 60)); w != "-hidden-"+strings.Repeat("x", 32) {
		t.Errorf("cgroupWord: %q", w)
	}
	if w := cgroupWord(""); w != "-" {
		t.Errorf("cgroupWord of nothing: %q", w)
	}
	if n := CgroupName(stem, 3, 4242); n != stem+"a3_4242" || strings.ContainsAny(n, "/ ") {
		t.Errorf("name %q", n)
	}
}

func TestCgroupCounters(t *testing.T) {
	tests := []struct {
		data, key string
		want      int64
	}{
		{"low 0\nhigh 0\nmax 12\noom 2\noom_kill 1\noom_group_kill 0\n", "oom_kill", 1},
		{"oom_kill_disable 0\nunder_oom 0\noom_kill 3\n", "oom_kill", 3},
		{"oom_kill_disable 0\nunder_oom 0\n", "oom_kill", -1},
		{"max 0\n", "max", 0},
		{"max 7", "max", 7},
	}
	for _, tc := range tests {
		if got := ParseKeyed(tc.data, tc.key); got != tc.want {
			t.Errorf("parseKeyed(%q, %q) = %d, want %d", tc.data, tc.key, got, tc.want)
		}
	}
}
