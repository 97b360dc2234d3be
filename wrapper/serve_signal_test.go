package wrapper

import (
	"bufio"
	"encoding/json"
	"io"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/wire"
)

// served is a `--serve` wrapper process and its conversation.
type served struct {
	cmd   *exec.Cmd
	in    io.WriteCloser
	lines *bufio.Scanner
	once  sync.Once
	ended chan struct{} // closed once the process was waited for
}

// serveWrapper starts the wrapper with args (a --serve command).
func serveWrapper(t *testing.T, args ...string) *served {
	t.Helper()
	cmd := exec.Command(wrapperBin, args...)
	in, lines := startPiped(t, cmd)
	s := &served{cmd: cmd, in: in, lines: lines, ended: make(chan struct{})}
	t.Cleanup(func() { in.Close(); cmd.Process.Kill(); <-s.reap() })
	return s
}

// reap reads the rest of the process's stdout, then waits for it (as
// exec.Cmd wants), in a goroutine; it returns s.ended.
func (s *served) reap() chan struct{} {
	s.once.Do(func() {
		go func() {
			for s.lines.Scan() {
			}
			s.cmd.Wait()
			close(s.ended)
		}()
	})
	return s.ended
}

// call writes one request line and returns the reply line.
func (s *served) call(t *testing.T, req []byte) []byte {
	t.Helper()
	if _, err := s.in.Write(append(req, '\n')); err != nil {
		t.Fatal(err)
	}
	if !s.lines.Scan() {
		t.Fatalf("%v: no reply line: %v", s.cmd.Args[1:], s.lines.Err())
	}
	return s.lines.Bytes()
}

// wait waits at most limit for the process to end; its exit code, -1 for
// a signal.
func (s *served) wait(t *testing.T, limit time.Duration) int {
	t.Helper()
	select {
	case <-s.reap():
		return s.cmd.ProcessState.ExitCode()
	case <-time.After(limit):
		t.Errorf("%v still serving %s after the signal", s.cmd.Args[1:], limit)
		return -2
	}
}

// TestServeEndsOnSignal: `run --serve`, `status --serve` and `collect
// --serve` end on SIGTERM, SIGINT or SIGHUP, exit 0 (they went on serving
// until stdin ended, SIGHUP killed them), and the attempt `run --serve` had
// handed to its supervisor runs on.
func TestServeEndsOnSignal(t *testing.T) {
	t.Parallel()
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP} {
		t.Run(sig.String(), func(t *testing.T) {
			t.Parallel()
			root := t.TempDir()
			slow := newTask(t, root, wire.Launch{Task: "T1"})
			run := serveWrapper(t, "run", "--serve")
			status := serveWrapper(t, "status", "--serve", "--root", root)
			l := wire.Launch{Project: slow.project, Task: slow.name, Attempt: 1, Node: "local", HeartbeatSeconds: 0.1,
				TimeoutSeconds: 60, Command: shell("exec sleep 60")}
			doc, err := json.Marshal(wire.LaunchBatch{Launches: []wire.LaunchItem{{Dir: slow.dir, Spec: "# spec\n", Launch: l}}})
			if err != nil {
				t.Fatal(err)
			}
			var r wire.LaunchReply
			if err := json.Unmarshal(run.call(t, doc), &r); err != nil || len(r.Results) != 1 || r.Results[0].Run == nil {
				t.Fatalf("launch reply: %+v, %v", r, err)
			}
			slow.waitStarted(t, 1)
			var ns wire.NodeStatus
			if err := json.Unmarshal(status.call(t, []byte(`{}`)), &ns); err != nil || len(ns.Tasks) != 1 {
				t.Fatalf("status reply: %+v, %v", ns, err)
			}

			// collect --serve, waiting for its next request after a refused
			// one (answered: no data, an end saying why).
			collect := serveWrapper(t, "collect", "--serve")
			if got := string(collect.call(t, []byte("not a request"))); got != "0" {
				t.Fatalf("collect --serve answered a refused request with %q, want its end frame", got)
			}
			for _, s := range []*served{run, status, collect} {
				if err := s.cmd.Process.Signal(sig); err != nil {
					t.Fatal(err)
				}
				if code := s.wait(t, 15*time.Second); code != 0 {
					t.Errorf("%v after %v: exit %d, want 0", s.cmd.Args[1:], sig, code)
				}
			}
			if !slow.alive(t) {
				t.Fatal("the attempt's supervisor ended with run --serve")
			}
			if st := slow.status(t); st.Status != wire.StatusRunning {
				t.Errorf("the attempt after run --serve ended: %+v, want running", st)
			}
		})
	}
}
