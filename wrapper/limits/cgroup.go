package limits

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/dispatch-tool/dispatch/wire"
)

// Cgroups (issue 20): where the node user can write a cgroup, an attempt
// with limits runs in cgroups of its own, made by the supervisor and
// joined by limit-exec before it executes the child (so the whole tree,
// bwrap included, is in them). What this file holds is pure: parsing
// /proc/self/cgroup and /proc/self/mountinfo, choosing the hierarchies,
// the files written; cgroup_linux.go does the I/O.
//
// Handled:
//   - cgroup v2, when the wrapper's own cgroup (under the cgroup2 mount) is
//     writable by the node user (delegated: `systemd-run --user --scope -p
//     Delegate=yes`, a container's own cgroup, root) and offers memory,
//     pids or cpu in cgroup.controllers. The "no internal processes" rule
//     forbids enabling controllers for the children of a cgroup that has
//     processes, so the supervisor first moves itself into a leaf,
//     <own>/dispatch-wrapper, then enables the controllers in
//     <own>/cgroup.subtree_control and makes the attempts' cgroups beside
//     the leaf. A supervisor started inside that leaf uses its parent. If
//     another process stays in <own> (a shell that ran the wrapper), the
//     enabling fails (EBUSY) and the wrapper falls back to the watchdog,
//     saying so in wrapper.log. The root cgroup needs no leaf.
//   - cgroup v1, each of the cpu, memory and pids hierarchies where the
//     wrapper's own cgroup directory is writable (root, or a directory
//     chowned to the node user); the others stay with the watchdog.
//
// Not handled: a v2 cgroup not delegated to the node user (the usual ssh
// session scope, session-N.scope, is root's): the wrapper does not start
// itself through systemd-run; threaded v2 cgroups; a cgroup mount whose
// root is not an ancestor of the process's cgroup (another cgroup
// namespace). There, the watchdog enforces memory and pids, and cpu is not
// enforced.

// Controllers the limits use.
const (
	CtrlCPU    = "cpu"
	CtrlMemory = "memory"
	CtrlPids   = "pids"
)

// limitControllers are the controllers the limits use, in the order they
// are reported.
var limitControllers = []string{CtrlCPU, CtrlMemory, CtrlPids}

// cgroupLeaf is the v2 leaf the supervisor moves itself into, so that its
// own cgroup can enable controllers for the attempts' cgroups.
const cgroupLeaf = "dispatch-wrapper"

// cgroupPrefix starts the name of every attempt's cgroup.
const cgroupPrefix = "dispatch_"

// cpuPeriodMicros is the CFS period of a cpu limit: 100 ms, the kernel's
// default.
const cpuPeriodMicros = 100000

// procCgroup is one line of /proc/<pid>/cgroup: "ID:CONTROLLERS:PATH"; v2
// is "0::PATH".
type procCgroup struct {
	id          string
	controllers []string
	path        string
}

// parseProcCgroup parses /proc/<pid>/cgroup; lines it cannot read are
// skipped.
func parseProcCgroup(data string) []procCgroup {
	var out []procCgroup
	for line := range strings.SplitSeq(data, "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 || !strings.HasPrefix(f[2], "/") {
			continue
		}
		var ctrls []string
		if f[1] != "" {
			ctrls = strings.Split(f[1], ",")
		}
		out = append(out, procCgroup{id: f[0], controllers: ctrls, path: f[2]})
	}
	return out
}

// cgroupMount is one cgroup or cgroup2 mount of /proc/<pid>/mountinfo.
type cgroupMount struct {
	root, point string
	v2          bool
	rw          bool
	// options are the super options; a v1 mount's name its controllers
	// ("rw,cpu,cpuacct").
	options []string
}

// parseMountinfo picks the cgroup mounts out of /proc/<pid>/mountinfo:
// "ID PARENT MAJ:MIN ROOT POINT OPTIONS [OPTIONAL...] - TYPE SOURCE SUPER".
func parseMountinfo(data string) []cgroupMount {
	var out []cgroupMount
	for line := range strings.SplitSeq(data, "\n") {
		f := strings.Fields(line)
		sep := slices.Index(f, "-")
		if sep < 6 || len(f) < sep+4 {
			continue
		}
		typ := f[sep+1]
		if typ != "cgroup" && typ != "cgroup2" {
			continue
		}
		out = append(out, cgroupMount{
			root:    unescapeMount(f[3]),
			point:   unescapeMount(f[4]),
			v2:      typ == "cgroup2",
			rw:      slices.Contains(strings.Split(f[5], ","), "rw"),
			options: strings.Split(f[sep+3], ","),
		})
	}
	return out
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// mountDir is the directory of cgroup path p under mount m, or "" when p
// is not under the mount's root.
func mountDir(m cgroupMount, p string) string {
	rel := p
	if m.root != "/" {
		if p != m.root && !strings.HasPrefix(p, m.root+"/") {
			return ""
		}
		rel = strings.TrimPrefix(p, m.root)
	}
	return path.Join(m.point, rel)
}

// cgroupDirInfo is what the planner learns of a cgroup directory.
type cgroupDirInfo struct {
	// writable: the node user can make a child there and move processes
	// (the directory, cgroup.procs and, on v2, cgroup.subtree_control).
	writable bool
	// Controllers is v2's cgroup.controllers, subtree its
	// cgroup.subtree_control.
	controllers, subtree []string
	// root: v2's root cgroup (it has no cgroup.type), exempt from the "no
	// internal processes" rule.
	root bool
}

// cgroupHier is one hierarchy an attempt's cgroup is made in: the
// directory (base) its cgroup is a child of, and the limit controllers it
// enforces there.
type cgroupHier struct {
	Base        string
	Controllers []string
}

// CgroupPlan is how this wrapper puts an attempt in cgroups: version 0
// when it does not (why says why), else the hierarchies (one on v2).
type CgroupPlan struct {
	version int
	Hiers   []cgroupHier
	// leaf, on v2, is where the supervisor moves itself before enabling
	// the controllers in base's cgroup.subtree_control ("": no move).
	leaf string
	Why  string
}

// Has reports whether the plan enforces controller c.
func (p *CgroupPlan) Has(c string) bool {
	if p == nil {
		return false
	}
	for _, h := range p.Hiers {
		if slices.Contains(h.Controllers, c) {
			return true
		}
	}
	return false
}

// Controllers lists the limit controllers the plan enforces, in
// limitControllers' order.
func (p *CgroupPlan) controllers() []string {
	var out []string
	for _, c := range limitControllers {
		if p.Has(c) {
			out = append(out, c)
		}
	}
	return out
}

// Enforcement is the plan for wire.SandboxReply.Limits: "cgroup v2
// (cpu,memory,pids) at DIR", "cgroup v1 (memory,pids)", or
// EnforceRlimits.
func (p *CgroupPlan) Enforcement() string {
	if p == nil || p.version == 0 {
		return wire.EnforceRlimits
	}
	s := fmt.Sprintf("cgroup v%d (%s)", p.version, strings.Join(p.controllers(), ","))
	if p.version == 2 {
		s += " at " + p.Hiers[0].Base
	}
	return s
}

// planCgroups chooses how to put attempts in cgroups, from the process's
// /proc/self/cgroup, the cgroup mounts and what info tells of a
// directory: v2 when its cgroup offers a limit controller and is
// writable, else v1 with each writable limit hierarchy, else none.
func planCgroups(own []procCgroup, mounts []cgroupMount, info func(dir string, v2 bool) cgroupDirInfo) CgroupPlan {
	why := "no cgroup mount"
	for _, l := range own {
		if l.id != "0" || len(l.controllers) != 0 {
			continue
		}
		for _, m := range mounts {
			if !m.v2 {
				continue
			}
			dir := mountDir(m, l.path)
			if dir == "" {
				why = "cgroup v2: the process's cgroup is outside the mount"
				continue
			}
			p, reason := planV2(dir, info)
			if p != nil {
				return *p
			}
			why = reason
			break
		}
	}
	var hiers []cgroupHier
	for _, m := range mounts {
		if m.v2 {
			continue
		}
		var ctrls []string
		for _, c := range limitControllers {
			if slices.Contains(m.options, c) {
				ctrls = append(ctrls, c)
			}
		}
		if len(ctrls) == 0 {
			continue
		}
		var dir string
		for _, l := range own {
			if l.id != "0" && slices.Contains(l.controllers, ctrls[0]) {
				dir = mountDir(m, l.path)
			}
		}
		if dir == "" || !m.rw || !info(dir, false).writable {
			continue
		}
		for _, h := range hiers {
			ctrls = slices.DeleteFunc(ctrls, func(c string) bool { return slices.Contains(h.Controllers, c) })
		}
		if len(ctrls) > 0 {
			hiers = append(hiers, cgroupHier{Base: dir, Controllers: ctrls})
		}
	}
	if len(hiers) > 0 {
		return CgroupPlan{version: 1, Hiers: hiers}
	}
	if why == "no cgroup mount" && len(mounts) > 0 {
		why = "no cgroup the node user can write"
	}
	return CgroupPlan{Why: why}
}

// planV2 plans cgroup v2 in the process's cgroup dir, or says why not.
func planV2(dir string, info func(string, bool) cgroupDirInfo) (*CgroupPlan, string) {
	if path.Base(dir) == cgroupLeaf {
		// A supervisor started by one that made the leaf: the parent's
		// controllers are enabled already.
		parent := path.Dir(dir)
		pi := info(parent, true)
		if ctrls := wanted(pi.subtree); pi.writable && len(ctrls) > 0 {
			return &CgroupPlan{version: 2, Hiers: []cgroupHier{{Base: parent, Controllers: ctrls}}}, ""
		}
	}
	di := info(dir, true)
	ctrls := wanted(di.controllers)
	switch {
	case len(ctrls) == 0:
		return nil, "cgroup v2: no cpu, memory or pids controller in " + dir
	case !di.writable:
		return nil, "cgroup v2: " + dir + " is not delegated to the node user"
	}
	p := &CgroupPlan{version: 2, Hiers: []cgroupHier{{Base: dir, Controllers: ctrls}}}
	if !di.root {
		p.leaf = path.Join(dir, cgroupLeaf)
	}
	return p, ""
}

// wanted keeps the limit controllers of list, in limitControllers' order.
func wanted(list []string) []string {
	var out []string
	for _, c := range limitControllers {
		if slices.Contains(list, c) {
			out = append(out, c)
		}
	}
	return out
}

// cgroupFile is one value written into an attempt's cgroup, in order.
type cgroupFile struct {
	name, value string
}

// cgroupFiles lists the files to write for limits l in a cgroup of the
// given version enforcing ctrls; exists tells whether an optional file
// (swap) is there.
func cgroupFiles(version int, ctrls []string, l *wire.Limits, exists func(name string) bool) []cgroupFile {
	var out []cgroupFile
	if l == nil {
		return nil
	}
	if l.CPU > 0 && slices.Contains(ctrls, CtrlCPU) {
		quota := int64(math.Round(l.CPU * cpuPeriodMicros))
		quota = max(quota, 1000) // the kernel's minimum is 1 ms
		if version == 2 {
			out = append(out, cgroupFile{"cpu.max", fmt.Sprintf("%d %d", quota, cpuPeriodMicros)})
		} else {
			out = append(out, cgroupFile{"cpu.cfs_period_us", strconv.Itoa(cpuPeriodMicros)},
				cgroupFile{"cpu.cfs_quota_us", strconv.FormatInt(quota, 10)})
		}
	}
	if l.MemoryBytes > 0 && slices.Contains(ctrls, CtrlMemory) {
		b := strconv.FormatInt(l.MemoryBytes, 10)
		if version == 2 {
			out = append(out, cgroupFile{"memory.max", b})
			if exists("memory.swap.max") {
				out = append(out, cgroupFile{"memory.swap.max", "0"})
			}
			if exists("memory.oom.group") {
				// The OOM killer takes the whole attempt, as the watchdog does.
				out = append(out, cgroupFile{"memory.oom.group", "1"})
			}
		} else {
			// memsw (memory plus swap) must stay at or above the limit:
			// written after it.
			out = append(out, cgroupFile{"memory.limit_in_bytes", b})
			if exists("memory.memsw.limit_in_bytes") {
				out = append(out, cgroupFile{"memory.memsw.limit_in_bytes", b})
			}
		}
	}
	if l.Pids > 0 && slices.Contains(ctrls, CtrlPids) {
		out = append(out, cgroupFile{"pids.max", strconv.Itoa(l.Pids)})
	}
	return out
}

// CgroupStem starts the names of a task's cgroups: project and task for
// the reader, and a hash of the task directory, which names the task on
// the node whatever the sanitizing made of the words. A stale cgroup of
// the task (a supervisor that crashed) is found by it.
func CgroupStem(project, task, dir string) string {
	h := sha256.Sum256([]byte(path.Clean(dir)))
	return cgroupPrefix + cgroupWord(project) + "_" + cgroupWord(task) + "_" + hex.EncodeToString(h[:4]) + "_"
}

// CgroupName names attempt's cgroup, made by the supervisor pid.
func CgroupName(stem string, attempt, pid int) string {
	return stem + "a" + strconv.Itoa(attempt) + "_" + strconv.Itoa(pid)
}

// cgroupWord keeps letters, digits, '.' and '-' of s (others become '-'),
// at most 40 of them: '_' separates the words of a name.
func cgroupWord(s string) string {
	b := []byte(s)
	if len(b) > 40 {
		b = b[:40]
	}
	for i, c := range b {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-':
		case c == '.' && i > 0:
		default:
			b[i] = '-'
		}
	}
	if len(b) == 0 {
		return "-"
	}
	return string(b)
}

// ParseKeyed reads the value of key in a flat keyed file ("oom_kill 3"
// lines: memory.events, memory.oom_control, pids.events); -1 when it is
// not there.
func ParseKeyed(data, key string) int64 {
	for line := range strings.SplitSeq(data, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), " ")
		if ok && k == key {
			if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
				return n
			}
		}
	}
	return -1
}
