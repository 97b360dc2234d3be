//go:build linux

package control

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/home"
)

// otherUID stands for another local user.
const otherUID = 12345

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("needs root to act as another user (chown, setuid)")
	}
}

// openDir returns a new directory that other users can enter (t.TempDir's
// parent is private), removed at the end of the test.
func openDir(t *testing.T, mode os.FileMode) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "dispatch-socket-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, mode); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestCheckSocketDir(t *testing.T) {
	requireRoot(t)
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	tests := []struct {
		name string
		make func(t *testing.T, dir string)
		want string // "" = accepted
	}{
		{"created private", func(t *testing.T, dir string) {}, ""},
		{"existing private", func(t *testing.T, dir string) { mkdir(t, dir, 0o700) }, ""},
		{"world-writable", func(t *testing.T, dir string) { mkdir(t, dir, 0o777) }, "open to other users (mode 0777)"},
		{"group-readable", func(t *testing.T, dir string) { mkdir(t, dir, 0o750) }, "open to other users (mode 0750)"},
		{"another user's", func(t *testing.T, dir string) {
			mkdir(t, dir, 0o700)
			if err := os.Chown(dir, otherUID, otherUID); err != nil {
				t.Fatal(err)
			}
		}, fmt.Sprintf("belongs to uid %d", otherUID)},
		{"a symbolic link", func(t *testing.T, dir string) {
			real := dir + "-real"
			mkdir(t, real, 0o700)
			if err := os.Symlink(real, dir); err != nil {
				t.Fatal(err)
			}
		}, "not a directory"},
		{"a file", func(t *testing.T, dir string) {
			if err := os.WriteFile(dir, nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}, "not a directory"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "dispatch-0")
			tc.make(t, dir)
			err := checkSocketDir(dir, true)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("checkSocketDir: %v", err)
				}
				fi, err := os.Lstat(dir)
				if err != nil || fi.Mode().Perm() != 0o700 {
					t.Fatalf("dir mode %v (%v), want 0700", fi.Mode(), err)
				}
				return
			}
			var se *SocketError
			if !errors.As(err, &se) || !strings.Contains(err.Error(), tc.want) || se.Fix == "" {
				t.Fatalf("checkSocketDir = %v, want a SocketError saying %q", err, tc.want)
			}
		})
	}
}

func mkdir(t *testing.T, dir string, mode os.FileMode) {
	t.Helper()
	if err := os.Mkdir(dir, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, mode); err != nil {
		t.Fatal(err)
	}
}

// A socket file that another user made where the controller listens is
// neither talked to nor removed.
func TestForeignSocketRefused(t *testing.T) {
	requireRoot(t)
	homeDir := t.TempDir()
	path := home.SocketPath(homeDir)
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := os.Lchown(path, otherUID, otherUID); err != nil {
		t.Fatal(err)
	}
	_, err = Send(context.Background(), homeDir, Request{Op: "cancel", Project: "p", Tasks: []string{"S01"}})
	var se *SocketError
	if !errors.As(err, &se) || !strings.Contains(err.Error(), fmt.Sprintf("belongs to uid %d", otherUID)) {
		t.Fatalf("Send to another user's socket = %v, want a SocketError", err)
	}
	if Running(homeDir) {
		t.Fatal("Running trusts another user's socket")
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if _, err := Serve(context.Background(), homeDir, log, make(chan Call), make(chan struct{})); !errors.As(err, &se) {
		t.Fatalf("Serve over another user's socket = %v, want a SocketError", err)
	}
	if _, err := os.Lstat(path); err != nil {
		t.Fatalf("Serve removed another user's socket: %v", err)
	}
}

// peerHelper runs this test binary as another user, doing what
// TestPeerHelperProcess does with args.
func peerHelper(t *testing.T, args ...string) (*exec.Cmd, *bufio.Reader) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(openDir(t, 0o755), "helper.test")
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run=^TestPeerHelperProcess$")
	cmd.Env = append(os.Environ(), "DISPATCH_PEER_HELPER="+strings.Join(args, "\n"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: otherUID, Gid: otherUID}}
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd, bufio.NewReader(out)
}

// TestPeerHelperProcess is the other user of TestPeerUID: "serve PATH"
// answers every request on PATH with a reply of its own; "ask PATH" sends a
// request to PATH and prints the answer.
func TestPeerHelperProcess(t *testing.T) {
	spec := os.Getenv("DISPATCH_PEER_HELPER")
	if spec == "" {
		t.Skip("helper process of TestPeerUID")
	}
	args := strings.Split(spec, "\n")
	switch args[0] {
	case "serve":
		l, err := net.Listen("unix", args[1])
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		fmt.Println("ready")
		for {
			conn, err := l.Accept()
			if err != nil {
				os.Exit(1)
			}
			_ = json.NewEncoder(conn).Encode(Reply{Message: "canceled everything"})
			conn.Close()
		}
	case "ask":
		conn, err := net.Dial("unix", args[1])
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		_ = json.NewEncoder(conn).Encode(Request{Op: "cancel", Project: "p", Tasks: []string{"S01"}})
		b, _ := io.ReadAll(conn)
		fmt.Printf("reply %s", b)
		os.Exit(0)
	}
}

// TestPeerUID: the controller takes no request from another user, and a
// command does not believe a controller run by another user, whatever the
// modes of the socket file.
func TestPeerUID(t *testing.T) {
	requireRoot(t)
	t.Run("server refuses another user", func(t *testing.T) {
		homeDir := openDir(t, 0o755)
		log := slog.New(slog.NewTextHandler(io.Discard, nil))
		calls := make(chan Call)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		stop, err := Serve(ctx, homeDir, log, calls, make(chan struct{}))
		if err != nil {
			t.Fatal(err)
		}
		defer stop()
		// Even a socket open to everyone is refused to them.
		if err := os.Chmod(home.SocketPath(homeDir), 0o777); err != nil {
			t.Fatal(err)
		}
		cmd, out := peerHelper(t, "ask", home.SocketPath(homeDir))
		b, _ := io.ReadAll(out)
		_ = cmd.Wait()
		if !strings.Contains(string(b), "refused") {
			t.Fatalf("another user's request got %q, want it refused", b)
		}
		select {
		case r := <-calls:
			t.Fatalf("another user's request reached the controller: %+v", r.Req)
		default:
		}
		// The owner is still served.
		go func() {
			r := <-calls
			r.Reply <- Reply{Message: "ok"}
		}()
		if rep, err := Send(ctx, homeDir, Request{Op: "cancel", Project: "p", Tasks: []string{"S01"}}); err != nil || rep.Message != "ok" {
			t.Fatalf("owner's request: %+v, %v", rep, err)
		}
	})
	t.Run("client refuses another user's server", func(t *testing.T) {
		homeDir := openDir(t, 0o777)
		path := home.SocketPath(homeDir)
		_, out := peerHelper(t, "serve", path)
		if line, err := out.ReadString('\n'); err != nil || line != "ready\n" {
			t.Fatalf("helper: %q %v", line, err)
		}
		// The file looks like ours; the process answering is not.
		if err := os.Lchown(path, os.Getuid(), os.Getgid()); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		rep, err := Send(ctx, homeDir, Request{Op: "cancel", Project: "p", Tasks: []string{"S01"}})
		var se *SocketError
		if !errors.As(err, &se) || !strings.Contains(err.Error(), fmt.Sprintf("answering is uid %d", otherUID)) {
			t.Fatalf("Send to another user's controller = %+v, %v; want a SocketError", rep, err)
		}
		if Running(homeDir) {
			t.Fatal("Running trusts another user's controller")
		}
	})
}
