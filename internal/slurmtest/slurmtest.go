package slurmtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Package is the Debian package that provides the cluster, named in skip
// and failure messages.
const Package = "slurm-wlm"

// Partition is the one partition of a test cluster; it is the default.
const Partition = "debug"

// daemons are the programs Start runs; clients are what a test (and
// dispatch) calls. All must be on PATH or in /usr/sbin.
var (
	daemons = []string{"munged", "slurmctld", "slurmd"}
	clients = []string{"sbatch", "squeue", "scancel", "scontrol", "sinfo"}
)

// Cluster is one running one-host Slurm cluster.
type Cluster struct {
	// Dir holds everything the cluster writes: slurm.conf, state, spool,
	// logs and the munge key and socket.
	Dir string
	// Conf is the path of slurm.conf; SLURM_CONF names it to the clients.
	Conf string
	// Node is the name of the cluster's one node (this host's name).
	Node string

	t     testing.TB
	bins  map[string]string
	ctld  *exec.Cmd
	procs []*exec.Cmd
}

// Start starts a cluster and waits until its node is idle. It skips the
// test when the cluster cannot run here, or fails it under CI=true.
func Start(t testing.TB) *Cluster {
	t.Helper()
	bins, err := find(os.Geteuid(), exec.LookPath, "/usr/sbin")
	switch {
	case err == nil:
	case errors.Is(err, errNotRoot):
		// No package install mends this, so CI=true skips too.
		t.Skipf("slurmtest: %v; skipping: run the tests as root", err)
	case isCI(os.Getenv("CI")):
		t.Fatalf("slurmtest: %v; CI=true, so this fails instead of skipping: run the tests as root with Debian's %s installed (.ci/test-deps does it)", err, Package)
	default:
		t.Skipf("slurmtest: %v; skipping: run the tests as root with Debian's %s installed", err, Package)
	}
	c := &Cluster{t: t, bins: bins, Dir: t.TempDir()}
	if err := c.configure(); err != nil {
		t.Fatalf("slurmtest: %v", err)
	}
	t.Cleanup(c.stop)
	c.procs = append(c.procs, c.daemon("munged", "-F", "-f",
		"--socket="+c.path("munge/socket"), "--key-file="+c.path("munge/key"),
		"--log-file="+c.path("log/munged.log"), "--pid-file="+c.path("munge/pid"),
		"--seed-file="+c.path("munge/seed")))
	if err := waitFor(10*time.Second, func() error { _, err := os.Stat(c.path("munge/socket")); return err }); err != nil {
		t.Fatalf("slurmtest: munged did not start: %v\n%s", err, c.log("munged.out"))
	}
	c.StartController()
	c.procs = append(c.procs, c.daemon("slurmd", "-D", "-f", c.Conf, "-N", c.Node))
	c.WaitIdle()
	return c
}

// errNotRoot says why a cluster cannot run for a normal user.
var errNotRoot = errors.New("a Slurm cluster for tests needs root (slurmd starts jobs as their user)")

// find returns the absolute path of every program the cluster needs, from
// PATH or else sbin (the daemons are there, often off a user's PATH), or
// says what is missing.
func find(euid int, lookPath func(string) (string, error), sbin string) (map[string]string, error) {
	if euid != 0 {
		return nil, errNotRoot
	}
	bins := map[string]string{}
	var missing []string
	for _, name := range append(append([]string{}, daemons...), clients...) {
		p, err := lookPath(name)
		if err != nil {
			if _, serr := os.Stat(filepath.Join(sbin, name)); serr == nil {
				p, err = filepath.Join(sbin, name), nil
			}
		}
		if err != nil {
			missing = append(missing, name)
			continue
		}
		bins[name] = p
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%s not found", strings.Join(missing, ", "))
	}
	return bins, nil
}

// isCI follows CI services, which set CI=true.
func isCI(v string) bool {
	b, err := strconv.ParseBool(v)
	return err == nil && b
}

func (c *Cluster) path(rel string) string { return filepath.Join(c.Dir, rel) }

// configure writes the munge key and slurm.conf.
func (c *Cluster) configure() error {
	for _, d := range []string{"state", "spool", "log", "munge"} {
		if err := os.MkdirAll(c.path(d), 0o700); err != nil {
			return err
		}
	}
	// Clients reach munged's socket as any user; jobs of a test's node user
	// need the directories above it traversable.
	for _, d := range []string{c.Dir, c.path("munge")} {
		if err := os.Chmod(d, 0o711); err != nil {
			return err
		}
	}
	key := make([]byte, 1024)
	if _, err := rand.Read(key); err != nil {
		return err
	}
	if err := os.WriteFile(c.path("munge/key"), key, 0o400); err != nil {
		return err
	}
	host, err := os.Hostname()
	if err != nil {
		return err
	}
	c.Node, _, _ = strings.Cut(host, ".")
	nodeLine, err := c.nodeLine()
	if err != nil {
		return err
	}
	ports, err := freePorts(2)
	if err != nil {
		return err
	}
	c.Conf = c.path("slurm.conf")
	return os.WriteFile(c.Conf, []byte(conf(c.Dir, c.Node, nodeLine, ports)), 0o644)
}

// Cores is how many CPUs the cluster's one node offers, whatever the
// machine has: a job asks for one, and tests run many at once.
const Cores = 16

// nodeLine is the node's hardware as slurmd -C reads it (CPUs, memory),
// so jobs may ask for what the machine has.
func (c *Cluster) nodeLine() (string, error) {
	out, err := exec.Command(c.bins["slurmd"], "-C").Output()
	if err != nil {
		return "", fmt.Errorf("slurmd -C: %v", err)
	}
	line, _, _ := strings.Cut(string(out), "\n")
	var keep []string
	for _, f := range strings.Fields(line) {
		switch k, _, _ := strings.Cut(f, "="); k {
		case "NodeName":
		case "CPUs", "CoresPerSocket", "SocketsPerBoard", "Boards", "ThreadsPerCore":
			// One socket of Cores cores (config_overrides): jobs of a
			// test are mostly idle, and a small machine runs many.
		default:
			keep = append(keep, f)
		}
	}
	keep = append(keep, fmt.Sprintf("CPUs=%d Boards=1 SocketsPerBoard=1 CoresPerSocket=%d ThreadsPerCore=1", Cores, Cores))
	return strings.Join(keep, " "), nil
}

// conf is a slurm.conf for a one-host cluster rooted at dir: no
// accounting, no cgroups (proctrack/linuxproc), jobs leave squeue 10 s
// after they end.
func conf(dir, node, hardware string, ports []int) string {
	return fmt.Sprintf(`ClusterName=dispatchtest
SlurmctldHost=%[2]s(127.0.0.1)
SlurmctldPort=%[4]d
SlurmdPort=%[5]d
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=%[1]s/munge/socket
CredType=cred/munge
StateSaveLocation=%[1]s/state
SlurmdSpoolDir=%[1]s/spool
SlurmctldPidFile=%[1]s/slurmctld.pid
SlurmdPidFile=%[1]s/slurmd.pid
SlurmctldLogFile=%[1]s/log/slurmctld.log
SlurmdLogFile=%[1]s/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
MinJobAge=10
SlurmdParameters=config_overrides
InactiveLimit=0
KillWait=5
NodeName=%[2]s NodeAddr=127.0.0.1 %[3]s State=UNKNOWN
PartitionName=%[6]s Nodes=%[2]s Default=YES MaxTime=INFINITE State=UP
`, dir, node, hardware, ports[0], ports[1], Partition)
}

// freePorts returns n loopback ports free at the time of asking.
func freePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// daemon starts one program in the foreground with its output in
// log/<name>.out; the kernel kills it if the test binary dies.
func (c *Cluster) daemon(name string, args ...string) *exec.Cmd {
	c.t.Helper()
	out, err := os.OpenFile(c.path("log/"+name+".out"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		c.t.Fatalf("slurmtest: %v", err)
	}
	defer out.Close()
	cmd := exec.Command(c.bins[name], args...)
	cmd.Env = c.Env()
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = dieWithParent()
	if err := cmd.Start(); err != nil {
		c.t.Fatalf("slurmtest: start %s: %v", name, err)
	}
	return cmd
}

// Env is the environment for a client command of this cluster: the test
// process's own with SLURM_CONF set.
func (c *Cluster) Env() []string {
	return append(os.Environ(), "SLURM_CONF="+c.Conf)
}

// Bin returns the absolute path of one of the cluster's programs.
func (c *Cluster) Bin(name string) string { return c.bins[name] }

// Run runs a client command (sbatch, squeue, scontrol ...) of this cluster
// and returns its standard output; a failure fails the test.
func (c *Cluster) Run(name string, args ...string) string {
	c.t.Helper()
	out, err := c.try(name, args...)
	if err != nil {
		c.t.Fatalf("slurmtest: %s %s: %v", name, strings.Join(args, " "), err)
	}
	return out
}

func (c *Cluster) try(name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.bins[name], args...)
	cmd.Env = c.Env()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("%v: %s", err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}

// StopController stops slurmctld: from now on squeue, sbatch and scancel
// fail (after their own timeout) until StartController. Jobs already
// running go on under slurmd.
func (c *Cluster) StopController() {
	c.t.Helper()
	if c.ctld == nil {
		return
	}
	terminate(c.ctld)
	c.ctld = nil
}

// StartController starts slurmctld (again), recovering the jobs it knew
// from its state directory, and waits until it answers.
func (c *Cluster) StartController() {
	c.t.Helper()
	c.ctld = c.daemon("slurmctld", "-D", "-f", c.Conf)
	if err := waitFor(30*time.Second, func() error { _, err := c.try("sinfo", "-h"); return err }); err != nil {
		c.t.Fatalf("slurmtest: slurmctld does not answer: %v\n%s", err, c.log("slurmctld.log"))
	}
}

// WaitIdle waits until the node is idle (or mixed or allocated: up and
// taking jobs).
func (c *Cluster) WaitIdle() {
	c.t.Helper()
	err := waitFor(60*time.Second, func() error {
		state, err := c.NodeState()
		if err != nil {
			return err
		}
		switch state {
		case "idle", "mixed", "allocated":
			return nil
		}
		return fmt.Errorf("node %s is %s", c.Node, state)
	})
	if err != nil {
		c.t.Fatalf("slurmtest: %v\n%s", err, c.log("slurmd.log"))
	}
}

// NodeState is the node's state as sinfo names it (idle, drained, ...).
func (c *Cluster) NodeState() (string, error) {
	out, err := c.try("sinfo", "-h", "-n", c.Node, "-o", "%T")
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(out), "*")), nil
}

// Drain drains the node with reason, as an administrator would: running
// jobs go on, pending ones wait with the reason.
func (c *Cluster) Drain(reason string) {
	c.t.Helper()
	c.Run("scontrol", "update", "NodeName="+c.Node, "State=DRAIN", "Reason="+reason)
}

// Resume returns a drained node to service.
func (c *Cluster) Resume() {
	c.t.Helper()
	c.Run("scontrol", "update", "NodeName="+c.Node, "State=RESUME")
}

// Jobs lists the cluster's jobs as "id|name|state|reason" lines.
func (c *Cluster) Jobs() []string {
	c.t.Helper()
	out := c.Run("squeue", "-h", "-o", "%i|%j|%T|%r")
	return strings.Fields(out)
}

// stop cancels every job, then stops the daemons, slurmd first.
func (c *Cluster) stop() {
	if c.ctld != nil {
		_, _ = c.try("scancel", "--full", "--quiet", "--partition", Partition)
		_ = waitFor(10*time.Second, func() error {
			out, err := c.try("squeue", "-h", "-t", "running,completing", "-o", "%i")
			if err == nil && strings.TrimSpace(out) != "" {
				return errors.New("jobs still running")
			}
			return nil
		})
	}
	for i := len(c.procs) - 1; i >= 0; i-- {
		terminate(c.procs[i])
	}
	if c.ctld != nil {
		terminate(c.ctld)
	}
}

// terminate sends SIGTERM, then SIGKILL after 10 s, and reaps.
func terminate(cmd *exec.Cmd) {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// log returns the tail of one of the cluster's logs, for a failure message.
func (c *Cluster) log(name string) string {
	b, _ := os.ReadFile(c.path("log/" + name))
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// waitFor polls f every 100 ms until it returns nil or d has passed.
func waitFor(d time.Duration, f func() error) error {
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}
