package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"
)

// scaleSlots is the slots of the scale scenario's one local node.
const scaleSlots = 32

// scaleRun is one `dispatch start` of the scale scenario.
type scaleRun struct {
	tasks int
	wall  float64
	// total is the CPU of dispatch and of the wrapper calls it waited
	// for (its rusage); own is the dispatch process's alone (utime +
	// stime in /proc/<pid>/stat, read until it exits).
	total, own float64
}

// benchScale runs N no-op tasks through `dispatch start` on one local
// node with 32 slots (sandbox off) for growing N, and puts the CPU against
// issue 24's targets: linear in N (4,000 ≤ 2.2× the CPU of 2,000, 10,000
// ≤ 2.6× of 4,000) and ≤ 3 ms of controller-side CPU per task.
// scaleRounds is how many times each size runs (see benchScale).
const scaleRounds = 3

func benchScale(ctx context.Context, o *options, t *tb) (*section, error) {
	sizes := []int{1000, 2000, 4000, 10000}
	if o.quick {
		sizes = []int{500, 1000, 2000}
	}
	// Each size runs scaleRounds times, the sizes in turn, and keeps its
	// run of least CPU: this machine's CPU time for the same work varies
	// by a third from one minute to the next (shared cores), which a
	// single run per size would read as a ratio.
	rounds := scaleRounds
	if o.quick {
		rounds = 1
	}
	runs := make([]scaleRun, len(sizes))
	for round := range rounds {
		for i, n := range sizes {
			r, err := scaleStart(ctx, o, t, n)
			if err != nil {
				return nil, err
			}
			fmt.Printf("bench scale: %d tasks (round %d): wall %.1fs, cpu %.1fs (dispatch alone %.1fs)\n", n, round+1, r.wall, r.total, r.own)
			if round == 0 || r.total < runs[i].total {
				runs[i] = r
			}
		}
	}
	sec := &section{title: "Scale: no-op tasks on one local node × 32 slots"}
	tbl := &table{head: []string{"tasks", "wall", "CPU (dispatch + the wrapper calls it waits for)", "dispatch alone", "alone per task", "CPU vs the size before"}}
	for i, r := range runs {
		ratio := "–"
		if i > 0 {
			ratio = fmt.Sprintf("%.2f× for %.1f× the tasks", r.total/runs[i-1].total, float64(r.tasks)/float64(runs[i-1].tasks))
		}
		tbl.add(strconv.Itoa(r.tasks), fmtS(r.wall), fmtS(r.total), fmtS(r.own), fmtMS(r.own/float64(r.tasks)), ratio)
	}
	find := func(n int) *scaleRun {
		for i := range runs {
			if runs[i].tasks == n {
				return &runs[i]
			}
		}
		return nil
	}
	for _, pair := range [][3]float64{{2000, 4000, 2.2}, {4000, 10000, 2.6}} {
		a, b := find(int(pair[0])), find(int(pair[1]))
		if a == nil || b == nil {
			continue
		}
		ratio := b.total / a.total
		goal := ""
		if a.tasks == 2000 && b.tasks == 4000 {
			goal = goalLinear
		}
		sec.targets = append(sec.targets, target{name: "scale", goal: goal,
			want: fmt.Sprintf("CPU linear: %d tasks ≤ %.1f× the CPU of %d", b.tasks, pair[2], a.tasks),
			got:  fmt.Sprintf("%s vs %s = %.2f×", fmtS(b.total), fmtS(a.total), ratio), met: ratio <= pair[2]})
	}
	last := runs[len(runs)-1]
	perTask := last.own / float64(last.tasks)
	sec.targets = append(sec.targets, target{name: "scale", want: "≤ 3 ms of controller-side CPU per no-op task",
		got: fmt.Sprintf("%s over %d tasks = %s", fmtS(last.own), last.tasks, fmtMS(perTask)), met: perTask <= 0.003})
	var b strings.Builder
	fmt.Fprintf(&b, "Each run: `dispatch start` of N tasks whose script is `true` on one local node (`ssh: null`, slots: %d, "+
		"sandbox: off, every other setting the default), a fresh home each; `integration: false`. CPU is the process's "+
		"rusage at exit, which counts the `wrapper` calls it runs and waits for (status, launch, collection) but not the "+
		"detached supervisors and tools; \"dispatch alone\" is the controller process's own utime + stime, read from "+
		"/proc until it exits. Each size ran %d times, the sizes in turn; the table shows each size's run of least CPU.\n\n", scaleSlots, rounds)
	b.WriteString(tbl.markdown())
	sec.body = b.String()
	return sec, nil
}

// scaleStart runs one `dispatch start` of n no-op tasks and measures it.
func scaleStart(ctx context.Context, o *options, t *tb, n int) (scaleRun, error) {
	homeDir := t.TempDir()
	yaml := fmt.Sprintf("nodes:\n  - name: local\n    ssh: null\n    slots: %d\n    sandbox: off\n    work_dir: %s/work\n", scaleSlots, homeDir)
	if err := writeHome(homeDir, yaml, "scale", n, func(int) string { return "true\n" }); err != nil {
		return scaleRun{}, err
	}
	cctx, cancel := context.WithTimeout(ctx, 20*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(cctx, o.dispatch, "--home", homeDir, "start", "scale")
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	began := time.Now()
	if err := cmd.Start(); err != nil {
		return scaleRun{}, err
	}
	var mu sync.Mutex
	var own float64
	done := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tk := time.NewTicker(50 * time.Millisecond)
		defer tk.Stop()
		for {
			if s, ok := procCPU(cmd.Process.Pid); ok {
				mu.Lock()
				own = s
				mu.Unlock()
			}
			select {
			case <-done:
				return
			case <-tk.C:
			}
		}
	}()
	err := cmd.Wait()
	close(done)
	<-sampled
	wall := time.Since(began)
	if err != nil {
		return scaleRun{}, fmt.Errorf("dispatch start of %d tasks: %v\n%s", n, err, lastLines(out.String(), 20))
	}
	// Wait4's rusage counts the descendants the process waited for.
	total := cmd.ProcessState.UserTime().Seconds() + cmd.ProcessState.SystemTime().Seconds()
	mu.Lock()
	defer mu.Unlock()
	return scaleRun{tasks: n, wall: wall.Seconds(), total: total, own: own}, nil
}

// procCPU is a live process's own CPU time (utime + stime), in seconds.
func procCPU(pid int) (float64, bool) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	// The fields after the command (in parentheses, which may hold
	// spaces): state is field 3, utime 14, stime 15.
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, false
	}
	ut, err1 := strconv.ParseFloat(f[11], 64)
	st, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return (ut + st) / clockTicks, true
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's times (100 on
// Linux, whatever the kernel's HZ).
const clockTicks = 100
