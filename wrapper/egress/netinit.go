package egress

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/dispatch-tool/dispatch/internal/netallow"
)

// NetInitArgs is the argv that runs argv under net-init (see netproxy.go):
// init is where this binary is bound in the sandbox, sock the proxy's
// socket there, port the proxy's port on the sandbox's loopback and
// forwards the allowed loopback destinations.
func NetInitArgs(init, sock string, port int, forwards []string, argv []string) []string {
	a := []string{init, NetInitCmd, "-socket", sock, "-proxy", net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}
	for _, f := range forwards {
		a = append(a, "-forward", f)
	}
	return append(append(a, "--"), argv...)
}

// ProxyPort is the first port from netProxyPort that no allowed loopback
// destination uses.
func ProxyPort(allow netallow.List) int {
	port := netProxyPort
	for {
		taken := false
		for _, e := range allow {
			taken = taken || (e.Loopback() && e.Port == port)
		}
		if !taken {
			return port
		}
		port++
	}
}

// LoopbackForwards are the addresses net-init listens on for the allowed
// loopback destinations ("localhost" on both 127.0.0.1 and ::1).
func LoopbackForwards(allow netallow.List) []string {
	var out []string
	for _, e := range allow {
		if !e.Loopback() {
			continue
		}
		port := strconv.Itoa(e.Port)
		if e.Host == "localhost" {
			out = append(out, net.JoinHostPort("127.0.0.1", port), net.JoinHostPort("::1", port))
			continue
		}
		out = append(out, e.String())
	}
	return out
}

// ProxyEnv are the variables that point the sandboxed command's clients
// at net-init's proxy, replacing any the environment has; NO_PROXY goes:
// nothing is reached but through it.
func ProxyEnv(env []string, port int) []string {
	url := "http://127.0.0.1:" + strconv.Itoa(port)
	names := []string{"HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy", "ALL_PROXY", "all_proxy"}
	out := make([]string, 0, len(env)+len(names)+1)
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if k == "NODE_USE_ENV_PROXY" || k == "NO_PROXY" || k == "no_proxy" || slices.Contains(names, k) {
			continue
		}
		out = append(out, kv)
	}
	for _, k := range names {
		out = append(out, k+"="+url)
	}
	// Node's own fetch uses the variables only when asked to (Node 24+).
	return append(out, "NODE_USE_ENV_PROXY=1")
}

// CmdNetInit is net-init: it serves the sandbox's side of the proxy and
// runs the command, ending as the command ends (its exit status, or the
// signal that killed it). It prints only on trouble, to stderr (task.log).
func CmdNetInit(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet(NetInitCmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	sock := fs.String("socket", "", "the proxy's unix socket")
	proxy := fs.String("proxy", "", "where to serve the proxy (host:port)")
	var forwards []string
	fs.Func("forward", "an allowed loopback destination to serve (host:port)", func(s string) error {
		forwards = append(forwards, s)
		return nil
	})
	if err := fs.Parse(args); err != nil {
		return 127
	}
	argv := fs.Args()
	if *sock == "" || *proxy == "" || len(argv) == 0 {
		fmt.Fprintf(stderr, "dispatch-wrapper: %s: want -socket PATH -proxy ADDR [-forward ADDR]... -- PROGRAM [ARGS...]\n", NetInitCmd)
		return 127
	}
	serve := func(addr string, pass func(net.Conn)) {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			fmt.Fprintf(stderr, "dispatch-wrapper: network: cannot serve %s in the sandbox: %v\n", addr, err)
			return
		}
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go pass(c)
			}
		}()
	}
	serve(*proxy, func(c net.Conn) {
		defer c.Close()
		up, err := dialUnix(*sock)
		if err != nil {
			return
		}
		defer up.Close()
		splice(c, c, up)
	})
	for _, f := range forwards {
		serve(f, func(c net.Conn) {
			defer c.Close()
			up, br, err := tunnel(*sock, f)
			if err != nil {
				return
			}
			defer up.Close()
			splice(c, c, readerConn{up, br})
		})
	}
	return runChild(argv, stderr)
}

// tunnel asks the proxy at sock for a CONNECT to addr; the reader holds
// what came after the proxy's answer.
func tunnel(sock, addr string) (net.Conn, *bufio.Reader, error) {
	up, err := dialUnix(sock)
	if err != nil {
		return nil, nil, err
	}
	if _, err := fmt.Fprintf(up, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", addr, addr); err != nil {
		up.Close()
		return nil, nil, err
	}
	br := bufio.NewReader(up)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		up.Close()
		return nil, nil, err
	}
	if resp.StatusCode != http.StatusOK {
		up.Close()
		return nil, nil, fmt.Errorf("proxy: %s", resp.Status)
	}
	return up, br, nil
}

// readerConn reads through r, which buffers c.
type readerConn struct {
	net.Conn
	r io.Reader
}

func (c readerConn) Read(p []byte) (int, error) { return c.r.Read(p) }

func (c readerConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Conn.Close()
}

// runChild runs argv (the program, looked up in the PATH when it has no
// slash, and its arguments) with this process's environment
// and standard files, passes on the signals that ask it to end, and
// returns its exit status; killed by a signal, it kills itself with the
// same one, so that its parent sees what the child's would have.
func runChild(argv []string, stderr io.Writer) int {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(stderr, "dispatch-wrapper: %s: %v\n", NetInitCmd, err)
		return 127
	}
	go func() {
		for s := range sigs {
			cmd.Process.Signal(s)
		}
	}()
	err := cmd.Wait()
	if err == nil {
		return 0
	}
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ok {
		return 1
	}
	if ws.Signaled() {
		signal.Reset()
		syscall.Kill(os.Getpid(), ws.Signal())
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}
