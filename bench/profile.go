package main

import (
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"runtime/pprof"
	"sort"
	"strings"
	"time"
)

// cpuProfile profiles the bench process (and so the in-process
// controller) into path until the returned function is called.
func cpuProfile(path string) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

// funcRE matches the closure suffixes of a function name (".func1",
// ".func2.1"), merged into their function.
var funcRE = regexp.MustCompile(`(\.func\d+)+(\.\d+)*$|\.\(\*Store\)\.Update\.func\d+$`)

// sample is one stack of a CPU profile with its time.
type sample struct {
	value  time.Duration
	frames []string // leaf first
}

// readTraces reads a profile through `go tool pprof -traces`.
func readTraces(path string) ([]sample, error) {
	out, err := exec.Command("go", "tool", "pprof", "-traces", "-tagignore=bench=setup", path).Output()
	if err != nil {
		return nil, fmt.Errorf("go tool pprof -traces %s: %w", path, err)
	}
	var samples []sample
	for _, block := range strings.Split(string(out), "-----------+-------------------------------------------------------") {
		var s sample
		for _, line := range strings.Split(block, "\n") {
			line = strings.TrimSpace(line)
			if line == "" {
				continue
			}
			if s.value == 0 && len(s.frames) == 0 {
				f := strings.Fields(line)
				if len(f) < 2 {
					continue
				}
				d, err := time.ParseDuration(f[0])
				if err != nil {
					break // the header
				}
				s.value = d
				s.frames = append(s.frames, f[1])
				continue
			}
			if strings.HasPrefix(line, "bytes:") || strings.Contains(line, ":") && !strings.Contains(line, ".") {
				continue // labels
			}
			s.frames = append(s.frames, strings.Fields(line)[0])
		}
		if s.value > 0 {
			samples = append(samples, s)
		}
	}
	return samples, nil
}

func anyFrame(s sample, match func(string) bool) bool {
	for _, f := range s.frames {
		if match(f) {
			return true
		}
	}
	return false
}

func prefixed(prefixes ...string) func(string) bool {
	return func(f string) bool {
		for _, p := range prefixes {
			if strings.HasPrefix(f, p) {
				return true
			}
		}
		return false
	}
}

// category sorts CPU samples into what a reader of RESULTS.md cares about.
var categories = []struct {
	name  string
	match func(sample) bool
}{
	{catSQLite, func(s sample) bool {
		return anyFrame(s, prefixed("modernc.org/", "database/sql", "github.com/dispatch-tool/dispatch/store."))
	}},
	{"JSON decoding of the nodes' status replies", func(s sample) bool {
		return anyFrame(s, prefixed("encoding/json")) && anyFrame(s, prefixed("github.com/dispatch-tool/dispatch/controller.nodeStatus"))
	}},
	{"other JSON (launch.json, options)", func(s sample) bool { return anyFrame(s, prefixed("encoding/json")) }},
	{"SSH and SFTP (x/crypto/ssh, pkg/sftp, crypto)", func(s sample) bool {
		return anyFrame(s, prefixed("golang.org/x/crypto/", "github.com/pkg/sftp", "crypto/"))
	}},
	{"controller logic", func(s sample) bool { return anyFrame(s, prefixed("github.com/dispatch-tool/dispatch/controller.")) }},
	{"Go runtime: GC and scheduler", func(s sample) bool {
		return anyFrame(s, prefixed("runtime.gcBgMarkWorker", "runtime.bgsweep", "runtime.bgscavenge", "runtime.mcall", "runtime.morestack", "runtime.sysmon", "runtime.schedule", "runtime.findRunnable"))
	}},
	{"network and file syscalls", func(s sample) bool { return anyFrame(s, prefixed("syscall.", "internal/poll.", "net.", "os.")) }},
}

// tickPhases sorts the controller's samples by step of the tick.
var tickPhases = []struct{ name, fn string }{
	{"pull (status calls, JSON)", "controller.(*Controller).pullAll"},
	{"decide (one transaction: read, decide, record; statuses and claims)", "controller.(*Controller).decide"},
	{"launch", "controller.(*Controller).launchAll"},
	{"collect", "controller.(*Controller).collectAll"},
	{"finish/advance", "controller.(*Controller).finishProjects"},
	{"served projects", "controller.(*Controller).servedProjects"},
}

type share struct {
	name string
	d    time.Duration
}

// profStats is what a CPU profile says, sorted for RESULTS.md.
type profStats struct {
	samples []sample
	total   time.Duration
	cat     map[string]time.Duration
	fn      map[string]time.Duration // dispatch functions, inclusive, closures merged
}

const catSQLite = "SQLite (modernc.org/sqlite, database/sql) and row scanning"

func analyseProfile(path string) (*profStats, error) {
	samples, err := readTraces(path)
	if err != nil {
		return nil, err
	}
	ps := &profStats{samples: samples, cat: map[string]time.Duration{}, fn: map[string]time.Duration{}}
	for _, s := range samples {
		ps.total += s.value
		name := "other"
		for _, c := range categories {
			if c.match(s) {
				name = c.name
				break
			}
		}
		ps.cat[name] += s.value
		seen := map[string]bool{}
		for _, f := range s.frames {
			if !strings.HasPrefix(f, "github.com/dispatch-tool/dispatch/") {
				continue
			}
			f = strings.TrimPrefix(funcRE.ReplaceAllString(f, ""), "github.com/dispatch-tool/dispatch/")
			if seen[f] {
				continue
			}
			seen[f] = true
			ps.fn[f] += s.value
		}
	}
	return ps, nil
}

// share returns d as a fraction of the profile.
func (ps *profStats) share(d time.Duration) float64 {
	if ps == nil || ps.total == 0 {
		return 0
	}
	return float64(d) / float64(ps.total)
}

// profileSummary renders the categories, the tick steps and the top
// functions of a CPU profile as markdown.
func profileSummary(path string, perTick int) string {
	ps, err := analyseProfile(path)
	if err != nil {
		return "(profile analysis failed: " + err.Error() + ")\n"
	}
	samples, total, cat := ps.samples, ps.total, ps.cat
	if total == 0 {
		return "(empty profile)\n"
	}
	var b strings.Builder
	per := func(d time.Duration) string {
		if perTick <= 0 {
			return ""
		}
		return " | " + fmtMS((d / time.Duration(perTick)).Seconds())
	}
	head := "| where the CPU goes | CPU | share"
	if perTick > 0 {
		head += " | per tick"
	}
	b.WriteString(head + " |\n|---|---|---" + strings.Repeat("|---", btoi(perTick > 0)) + "|\n")
	var shares []share
	for k, v := range cat {
		shares = append(shares, share{k, v})
	}
	sort.Slice(shares, func(i, j int) bool { return shares[i].d > shares[j].d })
	for _, s := range shares {
		fmt.Fprintf(&b, "| %s | %s | %.0f%%%s |\n", s.name, fmtMS(s.d.Seconds()), 100*float64(s.d)/float64(total), per(s.d))
	}
	fmt.Fprintf(&b, "| **total** | %s | 100%%%s |\n\n", fmtMS(total.Seconds()), per(total))

	// By step of the tick (inclusive: a step's SQLite time counts in it).
	var steps []share
	var inTick time.Duration
	for _, p := range tickPhases {
		var d time.Duration
		for _, s := range samples {
			if anyFrame(s, func(f string) bool { return strings.Contains(f, p.fn) }) {
				d += s.value
			}
		}
		steps = append(steps, share{p.name, d})
		inTick += d
	}
	if inTick > 0 {
		b.WriteString("| step of the tick (inclusive) | CPU | share of profile")
		if perTick > 0 {
			b.WriteString(" | per tick")
		}
		b.WriteString(" |\n|---|---|---" + strings.Repeat("|---", btoi(perTick > 0)) + "|\n")
		for _, s := range steps {
			if s.d == 0 {
				continue
			}
			fmt.Fprintf(&b, "| %s | %s | %.0f%%%s |\n", s.name, fmtMS(s.d.Seconds()), 100*float64(s.d)/float64(total), per(s.d))
		}
		b.WriteString("\n")
	}

	// Heaviest controller/store functions, inclusive.
	cum := ps.fn
	var fns []share
	for k, v := range cum {
		fns = append(fns, share{k, v})
	}
	sort.Slice(fns, func(i, j int) bool { return fns[i].d > fns[j].d })
	if len(fns) > 14 {
		fns = fns[:14]
	}
	b.WriteString("| dispatch function (inclusive CPU) | CPU | share |\n|---|---|---|\n")
	for _, f := range fns {
		fmt.Fprintf(&b, "| `%s` | %s | %.0f%% |\n", f.name, fmtMS(f.d.Seconds()), 100*float64(f.d)/float64(total))
	}
	b.WriteString("\n")

	// Flat top, as pprof prints it.
	if out, err := exec.Command("go", "tool", "pprof", "-top", "-nodecount=12", "-tagignore=bench=setup", path).Output(); err == nil {
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		var keep []string
		for _, l := range lines {
			if strings.HasPrefix(l, "File:") || strings.HasPrefix(l, "Build ID:") || strings.HasPrefix(l, "Type:") || strings.HasPrefix(l, "Time:") {
				continue
			}
			keep = append(keep, l)
		}
		b.WriteString("```\n$ go tool pprof -top -nodecount=12 -tagignore=bench=setup " + rel(path) + "\n" + strings.Join(keep, "\n") + "\n```\n")
	}
	return b.String()
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
