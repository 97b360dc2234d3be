package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/home"
	"github.com/dispatch-tool/dispatch/internal/sshdtest"
	"github.com/dispatch-tool/dispatch/store"
)

// ---- statistics -------------------------------------------------------

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func minOf(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	return slices.Min(xs)
}

func maxOf(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	return slices.Max(xs)
}

// fmtS prints seconds with a precision that suits their size.
func fmtS(s float64) string {
	switch {
	case math.IsNaN(s):
		return "–"
	case s >= 9.95:
		return fmt.Sprintf("%.1f s", s)
	case s >= 0.9995: // 0.9996 s reads 1.00 s, not 1000 ms
		return fmt.Sprintf("%.2f s", s)
	default:
		return fmt.Sprintf("%.0f ms", s*1000)
	}
}

func fmtMS(s float64) string {
	if math.IsNaN(s) {
		return "–"
	}
	if s*1000 >= 100 {
		return fmt.Sprintf("%.0f ms", s*1000)
	}
	return fmt.Sprintf("%.1f ms", s*1000)
}

// fmtUS says a short duration in microseconds.
func fmtUS(d time.Duration) string {
	return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond))
}

func fmtRatio(r float64) string {
	if math.IsNaN(r) || math.IsInf(r, 0) {
		return "–"
	}
	return fmt.Sprintf("%.2f×", r)
}

func verdict(ok bool) string {
	if ok {
		return "**met**"
	}
	return "**not met**"
}

// spread renders "median (min–max, n runs)".
func spread(xs []float64, f func(float64) string) string {
	if len(xs) == 1 {
		return f(xs[0]) + " (1 run)"
	}
	return fmt.Sprintf("%s (%s–%s, %d runs)", f(median(xs)), f(minOf(xs)), f(maxOf(xs)), len(xs))
}

// ---- tables ------------------------------------------------------------

type table struct {
	head []string
	rows [][]string
}

func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

func (t *table) markdown() string {
	var b strings.Builder
	b.WriteString("| " + strings.Join(t.head, " | ") + " |\n")
	seps := make([]string, len(t.head))
	for i := range seps {
		seps[i] = "---"
	}
	b.WriteString("|" + strings.Join(seps, "|") + "|\n")
	for _, r := range t.rows {
		b.WriteString("| " + strings.Join(r, " | ") + " |\n")
	}
	return b.String()
}

// ---- the machine ---------------------------------------------------------

type machine struct {
	CPU, Cores, Kernel, Memory, Go, SSHD, SSH, Parallel, Dispatch, Date, Load, Files string
}

// describeFiles says where the bench makes its homes and work_dirs
// (root, whose spreadDirs gave spread) and what creating a file costs
// there and beside it, in root's parent, where the machine's other work
// and earlier benches made and removed their files.
func describeFiles(root string, spread error) string {
	where := "each home and work_dir in an ext4 block group of its own (chattr +T on the bench's root)"
	if spread != nil {
		where = fmt.Sprintf("homes and work_dirs in %s (%v)", filepath.Dir(root), spread)
	}
	here, err := createCost(root)
	if err != nil {
		return where
	}
	beside, err := createCost(filepath.Dir(root))
	if err != nil {
		return where
	}
	return fmt.Sprintf("%s; creating a file: %s of CPU there, %s in %s", where, fmtUS(here), fmtUS(beside), filepath.Dir(root))
}

func describeMachine(dispatchBin string) machine {
	m := machine{Cores: strconv.Itoa(runtime.NumCPU()), Go: runtime.Version(), Date: time.Now().UTC().Format("2006-01-02 15:04 UTC")}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	if m.CPU == "" {
		m.CPU = runtime.GOARCH
	}
	m.Kernel = firstLine(exec.Command("uname", "-srm").Output())
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "MemTotal:") {
				f := strings.Fields(line)
				if len(f) >= 2 {
					kb, _ := strconv.ParseFloat(f[1], 64)
					m.Memory = fmt.Sprintf("%.1f GiB", kb/1024/1024)
				}
			}
		}
	}
	if sshd, err := findSSHD(); err == nil {
		out, _ := exec.Command(sshd, "-V").CombinedOutput()
		m.SSHD = grepLine(string(out), "OpenSSH")
	}
	out, _ := exec.Command("ssh", "-V").CombinedOutput()
	m.SSH = strings.TrimSpace(string(out))
	m.Parallel = firstLine(exec.Command("parallel", "--version").Output())
	m.Dispatch = firstLine(exec.Command("git", "describe", "--always", "--dirty").Output())
	if dispatchBin != "" {
		if fi, err := os.Stat(dispatchBin); err == nil {
			m.Dispatch += fmt.Sprintf(" (%s, built %s)", dispatchBin, fi.ModTime().UTC().Format("15:04 UTC"))
		}
	}
	return m
}

// loadAvg returns the 1-minute load average: other work on the machine
// skews every figure.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return "?"
	}
	return f[0]
}

func firstLine(b []byte, err error) string {
	if err != nil && len(b) == 0 {
		return "unknown (" + err.Error() + ")"
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	return strings.TrimSpace(line)
}

func grepLine(s, sub string) string {
	for _, line := range strings.Split(s, "\n") {
		if strings.Contains(line, sub) {
			return strings.TrimSpace(line)
		}
	}
	return strings.TrimSpace(s)
}

func findSSHD() (string, error) {
	if p, err := exec.LookPath("sshd"); err == nil {
		return p, nil
	}
	if _, err := os.Stat("/usr/sbin/sshd"); err == nil {
		return "/usr/sbin/sshd", nil
	}
	return "", fmt.Errorf("sshd not found")
}

// ensureParallel installs GNU parallel from the system packages when it is
// missing, saying so.
func ensureParallel() error {
	if _, err := exec.LookPath("parallel"); err == nil {
		return nil
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("GNU parallel is missing: install it (Debian/Ubuntu: sudo apt-get install -y parallel)")
	}
	if _, err := exec.LookPath("apt-get"); err != nil {
		return fmt.Errorf("GNU parallel is missing and there is no apt-get to install it")
	}
	fmt.Println("bench: GNU parallel not found; running: DEBIAN_FRONTEND=noninteractive apt-get install -y parallel")
	run := func(args ...string) error {
		cmd := exec.Command("apt-get", args...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("apt-get %s: %v\n%s", strings.Join(args, " "), err, lastLines(string(out), 15))
		}
		return nil
	}
	if err := run("install", "-y", "parallel"); err != nil {
		fmt.Println("bench: running: apt-get update")
		if err := run("update"); err != nil {
			return err
		}
		if err := run("install", "-y", "parallel"); err != nil {
			return err
		}
	}
	if _, err := exec.LookPath("parallel"); err != nil {
		return fmt.Errorf("parallel still missing after apt-get install")
	}
	return nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// ---- nodes ---------------------------------------------------------------

// startServers starts n sshd nodes named prefix1..prefixN, trusted by c.
func startServers(t *tb, c *sshdtest.Client, prefix string, n int, extra ...string) []*sshdtest.Server {
	out := make([]*sshdtest.Server, n)
	for i := range out {
		out[i] = c.StartServerWith(t, fmt.Sprintf("%s%d", prefix, i+1), extra...)
		c.Trust(t, out[i])
	}
	return out
}

type nodeDef struct {
	name    string
	server  *sshdtest.Server
	slots   int
	workDir string // server.WorkDir when ""
	sandbox string // the node's sandbox: setting; "" leaves it out
}

// nodesYAML renders nodes.yaml; controller holds the indented lines of the
// controller: block ("" for none, that is every default).
func nodesYAML(c *sshdtest.Client, controller string, defs []nodeDef) string {
	var b strings.Builder
	if controller != "" {
		b.WriteString("controller:\n" + controller)
	}
	b.WriteString("nodes:\n")
	for _, d := range defs {
		wd := d.workDir
		if wd == "" {
			wd = d.server.WorkDir
		}
		fmt.Fprintf(&b, "  - name: %s\n    ssh: %s@127.0.0.1:%d\n    slots: %d\n    work_dir: %s\n",
			d.name, c.User, d.server.Port, d.slots, wd)
		if d.sandbox != "" {
			fmt.Fprintf(&b, "    sandbox: %s\n", d.sandbox)
		}
	}
	return b.String()
}

// writeProject writes specs/<name>/ with a shell project.yaml (no
// integration phase) and n specs S<i> whose body is body(i).
func writeProject(homeDir, name string, n int, body func(i int) string) error {
	dir := filepath.Join(home.SpecsDir(homeDir), name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "project.yaml"), []byte("tool: shell\nintegration: false\n"), 0o644); err != nil {
		return err
	}
	width := len(strconv.Itoa(n))
	if width < 2 {
		width = 2
	}
	for i := 1; i <= n; i++ {
		id := fmt.Sprintf("S%0*d", width+1, i) // one digit more: never S99, the integration task
		if err := os.WriteFile(filepath.Join(dir, id+"-task.md"), []byte(body(i)), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// dispatchEnv is the environment of a dispatch process: the client's home
// (so ~/.ssh holds the test key, known_hosts and config) and no ssh-agent.
func dispatchEnv(c *sshdtest.Client) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "HOME", "SSH_AUTH_SOCK", "DISPATCH_HOME", "NO_COLOR":
			continue
		}
		env = append(env, kv)
	}
	return append(env, "HOME="+c.Home, "NO_COLOR=1")
}

// taskCounts reads the tasks of a project from a database read-only.
func taskCounts(ctx context.Context, dbPath, project string) (map[domain.Status]int, error) {
	st, err := store.OpenReadOnly(ctx, dbPath)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	tasks, err := st.Tasks(ctx, project)
	if err != nil {
		return nil, err
	}
	out := map[domain.Status]int{}
	for _, t := range tasks {
		out[t.Status]++
	}
	return out, nil
}

// ---- processes -----------------------------------------------------------

// procMem returns VmRSS and VmHWM of pid in bytes.
func procMem(pid int) (rss, hwm int64, err error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		for _, k := range []string{"VmRSS:", "VmHWM:"} {
			if strings.HasPrefix(line, k) {
				f := strings.Fields(line)
				if len(f) >= 2 {
					kb, _ := strconv.ParseInt(f[1], 10, 64)
					if k == "VmRSS:" {
						rss = kb * 1024
					} else {
						hwm = kb * 1024
					}
				}
			}
		}
	}
	return rss, hwm, sc.Err()
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// killTasks kills, with SIGKILL, the supervisors and tool process groups
// of every task of project under workDir: processes this bench launched
// through dispatch. It returns how many supervisors it signalled.
func killTasks(workDir, project string) int {
	dirs, _ := filepath.Glob(filepath.Join(workDir, project, "tasks", "*"))
	n := 0
	for _, d := range dirs {
		var st struct {
			PID     int    `json:"pid"`
			ToolPID int    `json:"tool_pid"`
			Status  string `json:"status"`
		}
		b, err := os.ReadFile(filepath.Join(d, "status.json"))
		if err != nil || json.Unmarshal(b, &st) != nil || st.Status != "running" {
			continue
		}
		if st.PID > 1 && syscall.Kill(st.PID, syscall.SIGKILL) == nil {
			n++
		}
		if st.ToolPID > 1 {
			_ = syscall.Kill(-st.ToolPID, syscall.SIGKILL)
		}
	}
	return n
}

// waitFor polls cond every step until it holds or timeout passes; an
// interrupt of the bench (SIGINT, SIGTERM) ends it too.
func waitFor(timeout, step time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) || interrupted.Load() {
			return false
		}
		time.Sleep(step)
	}
}

// interrupted is set when the bench is interrupted (Ctrl-C, SIGTERM).
var interrupted atomic.Bool

// nodeHome is an empty directory given to every session on the bench's
// nodes as $HOME (sshd_config SetEnv): the shell sshd starts for each
// command then reads no ~/.bashrc. On this kind of machine root's
// ~/.bashrc runs `pyenv init`, which adds about 0.2 s to every remote
// command of either tool; measureRemoteCommand shows it.
var nodeHome string

func nodeHomeSetting(t *tb) string {
	if nodeHome == "" {
		nodeHome = filepath.Join(t.root, "nodehome")
		if err := os.MkdirAll(nodeHome, 0o755); err != nil {
			t.Fatalf("%v", err)
		}
	}
	return "SetEnv HOME=" + nodeHome
}
