//go:build linux

package wrapper

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/internal/wtest"
	"github.com/dispatch-tool/dispatch/wrapper/taskfiles"
)

// runOne launches one task of project demo on the node and waits for its
// final status.
func (n *sandboxNode) runOne(t *testing.T, id string, l wire.Launch) *wire.Status {
	t.Helper()
	n.launch(t, n.item(id, l))
	return n.final(t, id)
}

// listener is a TCP listener of the test on the host's 127.0.0.1 that
// records the remote address of every connection it accepts.
type listener struct {
	ln   net.Listener
	mu   sync.Mutex // guards seen
	seen []string
}

func listen(t *testing.T) *listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &listener{ln: ln}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			l.mu.Lock()
			l.seen = append(l.seen, c.RemoteAddr().String())
			l.mu.Unlock()
			c.Close()
		}
	}()
	return l
}

// others connects from the test itself and returns how many connections
// the listener accepted before that one (accepts are in arrival order):
// what reached it from elsewhere, once everything before has been seen.
func (l *listener) others(t *testing.T) int {
	t.Helper()
	c, err := net.Dial("tcp", l.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	mine := c.LocalAddr().String()
	n := -1
	wtest.Poll(t, 10*time.Second, "the listener to accept the test's own connection", func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		n = slices.Index(l.seen, mine)
		return n >= 0
	})
	return n
}

// interfaces lists the network interfaces of /proc/net/dev's text.
func interfaces(dev string) []string {
	var out []string
	for _, line := range strings.Split(dev, "\n") {
		if name, _, ok := strings.Cut(line, ":"); ok && !strings.Contains(name, "|") {
			out = append(out, strings.TrimSpace(name))
		}
	}
	slices.Sort(out)
	return out
}

// netScript tries to connect to the host's 127.0.0.1:port and lists the
// network interfaces it sees.
func netScript(port int) string {
	return fmt.Sprintf(`cat /proc/net/dev > ifaces; if bash -c 'exec 3<>/dev/tcp/127.0.0.1/%d' 2>err; then echo connected > loot; fi; true`, port)
}

// A task with network: none runs with a loopback of its own: the test's
// listener on the host's 127.0.0.1 is out of its reach and it has no
// interface but lo, so it can reach nothing. The same task with network:
// open reaches the listener and sees the node's interfaces, which proves
// the check.
func TestSandboxNetworkNone(t *testing.T) {
	host, err := os.ReadFile("/proc/net/dev")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		network string
		reach   bool
		ifaces  []string
	}{
		{wire.NetworkOpen, true, interfaces(string(host))},
		{wire.NetworkNone, false, []string{"lo"}},
	} {
		t.Run(tc.network, func(t *testing.T) {
			n := newSandboxNode(t, "")
			l := listen(t)
			port := l.ln.Addr().(*net.TCPAddr).Port
			st := n.runOne(t, "NET", wire.Launch{Command: shell(netScript(port)), Sandbox: n.mode, Network: tc.network})
			if st.Status != wire.StatusCompleted || st.Sandbox != wire.SandboxBwrap {
				log, _ := os.ReadFile(filepath.Join(n.taskDir("NET"), taskfiles.FileLog))
				t.Fatalf("status %+v, want completed under bwrap; log: %s", st, log)
			}
			out := filepath.Join(n.taskDir("NET"), taskfiles.DirOutput)
			loot, _ := os.ReadFile(filepath.Join(out, "loot"))
			if got := string(loot) == "connected\n"; got != tc.reach {
				errText, _ := os.ReadFile(filepath.Join(out, "err"))
				t.Errorf("connected to the host's 127.0.0.1:%d: %v, want %v (%s)", port, got, tc.reach, errText)
			}
			if others := l.others(t); (others > 0) != tc.reach {
				t.Errorf("the listener accepted %d connections from the task, want reached %v", others, tc.reach)
			}
			dev, err := os.ReadFile(filepath.Join(out, "ifaces"))
			if err != nil {
				t.Fatal(err)
			}
			if got := interfaces(string(dev)); !slices.Equal(got, tc.ifaces) {
				t.Errorf("interfaces in the sandbox: %v, want %v", got, tc.ifaces)
			}
		})
	}
}

// A launch with network: none that does not ask for the sandbox fails to
// start (start_permanent: no retry mends it), and its tool never runs: it
// would have had the network.
func TestNetworkNoneUnsandboxedRefused(t *testing.T) {
	tk := newTask(t, "", wire.Launch{Command: shell("touch ran"), Network: wire.NetworkNone})
	tk.run(t, "")
	st := tk.waitFinal(t)
	if st.Status != wire.StatusFailed || st.ErrorClass != wire.ClassStartPermanent || !strings.Contains(st.Error, "network: none needs the sandbox") {
		t.Errorf("status %+v, want failed, class start_permanent, saying network: none needs the sandbox", st)
	}
	if _, err := os.Stat(filepath.Join(tk.dir, taskfiles.DirOutput, "ran")); err == nil {
		t.Error("the tool ran")
	}
}

// A task with a network allow list reaches the allowed loopback server
// both directly and through HTTP_PROXY, and nothing else: a loopback port
// not in the list (directly: nothing listens in its namespace; through
// the proxy: 403) and a host not in the list (CONNECT refused), each
// refusal named in task.log. The proxy's socket and net-init are there
// for the task only while it runs.
func TestSandboxNetworkAllow(t *testing.T) {
	n := newSandboxNode(t, "")
	if n.mode == "" {
		t.Skip("DISPATCH_TEST_SANDBOX=off")
	}
	_, allowed := wtest.EchoServer(t)
	l := listen(t)
	other := l.ln.Addr().(*net.TCPAddr).Port
	script := fmt.Sprintf(`
exec 2>err
bash -c 'exec 3<>/dev/tcp/127.0.0.1/%[1]d; printf "GET /direct HTTP/1.0\r\n\r\n" >&3; cat <&3' > direct
curl -s http://127.0.0.1:%[1]d/proxied > proxied
curl -s --proxy "$HTTP_PROXY" http://127.0.0.1:%[1]d/forced > forced
if bash -c 'exec 3<>/dev/tcp/127.0.0.1/%[2]d'; then echo connected > loot; fi
curl -s -o /dev/null -w '%%{http_code}' --proxy "$HTTP_PROXY" http://127.0.0.1:%[2]d/ > other_code
curl -s -o /dev/null https://evil.example/ ; echo $? > evil_exit
env | grep -i _proxy | sort > proxyenv
true`, allowed, other)
	st := n.runOne(t, "NET", wire.Launch{Command: shell(script), Sandbox: n.mode, Network: wire.NetworkAllow,
		NetworkAllow: []string{fmt.Sprintf("127.0.0.1:%d", allowed)}})
	dir := n.taskDir("NET")
	log, _ := os.ReadFile(filepath.Join(dir, taskfiles.FileLog))
	if st.Status != wire.StatusCompleted || st.Sandbox != wire.SandboxBwrap {
		t.Fatalf("status %+v, want completed under bwrap; log: %s", st, log)
	}
	out := filepath.Join(dir, taskfiles.DirOutput)
	read := func(name string) string {
		b, _ := os.ReadFile(filepath.Join(out, name))
		return strings.TrimSpace(string(b))
	}
	errText := read("err")
	for name, want := range map[string]string{"proxied": "path=/proxied", "forced": "path=/forced", "other_code": "403", "evil_exit": "56"} {
		if got := read(name); got != want {
			t.Errorf("%s: %q, want %q (stderr: %s)", name, got, want, errText)
		}
	}
	if got := read("direct"); !strings.HasSuffix(got, "path=/direct") {
		t.Errorf("direct connection to the allowed port: %q (stderr: %s)", got, errText)
	}
	if read("loot") != "" || l.others(t) != 0 {
		t.Errorf("the task reached the loopback port %d, which is not allowed", other)
	}
	for _, want := range []string{
		fmt.Sprintf("dispatch-wrapper: network: refused a connection to 127.0.0.1:%d", other),
		"dispatch-wrapper: network: refused a connection to evil.example:443",
	} {
		if !strings.Contains(string(log), want) {
			t.Errorf("task.log lacks %q:\n%s", want, log)
		}
	}
	if env := read("proxyenv"); !strings.Contains(env, "HTTPS_PROXY=http://127.0.0.1:3128") {
		t.Errorf("proxy variables in the sandbox: %s", env)
	}
}

// Under an allow list the task's exit status passes through net-init, and
// a failed attempt's error names what the list refused (the supervisor's
// own record, whatever the tool printed).
func TestSandboxNetworkAllowFailure(t *testing.T) {
	n := newSandboxNode(t, "")
	if n.mode == "" {
		t.Skip("DISPATCH_TEST_SANDBOX=off")
	}
	st := n.runOne(t, "FAIL", wire.Launch{Command: shell(`curl -s https://evil.example/; exit 3`), Sandbox: n.mode,
		Network: wire.NetworkAllow, NetworkAllow: []string{}})
	want := `exit status 3; the network allow list refused evil.example:443 (see task.log); to allow it, add to the task's network: {allow: [...]} the entries "evil.example:443"`
	if st.Status != wire.StatusFailed || st.ExitCode != 3 || st.Error != want {
		t.Errorf("status %+v; want failed with exit code 3 and error %q", st, want)
	}
	// bwrap reports a command killed by a signal as exit status 128+n:
	// with net-init in between, the same.
	none := n.runOne(t, "KILLED-NONE", wire.Launch{Command: shell(`kill -9 $$`), Sandbox: n.mode, Network: wire.NetworkNone})
	st = n.runOne(t, "KILLED", wire.Launch{Command: shell(`kill -9 $$`), Sandbox: n.mode, Network: wire.NetworkAllow})
	if st.Status != wire.StatusFailed || st.ExitCode != none.ExitCode || st.Signal != none.Signal || st.ExitCode != 137 {
		t.Errorf("status %+v; want failed as without an allow list (exit code %d, signal %q)", st, none.ExitCode, none.Signal)
	}
}
