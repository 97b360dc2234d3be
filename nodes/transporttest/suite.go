package transporttest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/nodes"
	"golang.org/x/sys/unix"
)

// timeout bounds every subtest, so a transport that hangs fails instead of
// stalling the test binary.
const timeout = 60 * time.Second

// Run runs the shared suite against the transport that open returns. open is called
// once per subtest and returns a fresh transport plus an existing scratch directory
// on the node (absolute) that the suite may fill; each subtest works in its own
// subdirectory of it. The suite closes the transports it is given.
//
// The node must be a POSIX system with /bin/sh, printf, cat, sleep, head, ls, ln,
// chmod, kill and mkfifo on the PATH that Exec uses.
func Run(t *testing.T, open func(t *testing.T) (nodes.Transport, string)) {
	tests := []struct {
		name string
		fn   func(t *testing.T, ctx context.Context, tr nodes.Transport, dir string)
	}{
		{"HomeIsAbsolute", testHome},
		{"ExpandHome", testExpandHome},
		{"ExecOutputAndExitCode", testExecOutput},
		{"ExecArgumentsVerbatim", testExecVerbatim},
		{"ExecStdin", testExecStdin},
		{"ExecNilStdin", testExecNilStdin},
		{"ExecLargeOutput", testExecLargeOutput},
		{"ExecOutputCapped", testExecOutputCapped},
		{"ExecMissingCommand", testExecMissingCommand},
		{"ExecDeadline", testExecDeadline},
		{"ExecDetachedChild", testExecDetachedChild},
		{"Stream", testStream},
		{"Converse", testConverse},
		{"ConverseExchange", testExchange},
		{"Put", testPut},
		{"PutOverwriteIsAtomic", testPutOverwrite},
		{"PutFailedReaderLeavesNothing", testPutFailedReader},
		{"PutIntoFileParentFails", testPutParentIsFile},
		{"Get", testGet},
		{"GetMissing", testGetMissing},
		{"LstatSize", testLstatSize},
		{"GetRefusesLinksAndFIFOs", testGetRefusesLinks},
		{"TransferSlowButMoving", testTransferSlow},
		{"TransferStalled", testTransferStalled},
		{"TransferLarge", testTransferLarge},
		{"ExecFromStream", testExecFrom},
		{"ExecToStream", testExecTo},
		{"Walk", testWalk},
		{"WalkEmptyDir", testWalkEmpty},
		{"WalkMissing", testWalkMissing},
		{"WalkSymlinkRootNotFollowed", testWalkSymlinkRoot},
		{"Remove", testRemove},
		{"RemoveReadOnlyTree", testRemoveReadOnly},
		{"RemoveMissing", testRemoveMissing},
		{"RelativePathsRejected", testRelativePaths},
		{"Concurrent", testConcurrent},
		{"CloseTwice", testCloseTwice},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr, scratch := open(t)
			if !path.IsAbs(scratch) {
				t.Fatalf("open returned scratch dir %q, want an absolute path", scratch)
			}
			closed := false
			t.Cleanup(func() {
				if !closed {
					if err := tr.Close(); err != nil {
						t.Errorf("Close: %v", err)
					}
				}
			})
			if tc.name == "CloseTwice" {
				closed = true
			}
			ctx, cancel := context.WithTimeout(t.Context(), timeout)
			defer cancel()
			dir := path.Join(scratch, "suite-"+tc.name)
			mkdir(t, ctx, tr, dir)
			tc.fn(t, ctx, tr, dir)
		})
	}
}

func testHome(t *testing.T, ctx context.Context, tr nodes.Transport, _ string) {
	home, err := tr.Home(ctx)
	if err != nil {
		t.Fatalf("Home: %v", err)
	}
	if !path.IsAbs(home) {
		t.Fatalf("Home = %q, want an absolute path", home)
	}
	res := exec(t, ctx, tr, nil, "/bin/sh", "-c", `printf %s "$HOME"`)
	if got := string(res.Stdout); path.Clean(got) != home {
		t.Errorf("Home = %q, but $HOME of a command is %q", home, got)
	}
}

func testExpandHome(t *testing.T, ctx context.Context, tr nodes.Transport, _ string) {
	home, err := tr.Home(ctx)
	if err != nil {
		t.Fatalf("Home: %v", err)
	}
	for in, want := range map[string]string{
		"~":             home,
		"~/":            home,
		"~/dispatch":    path.Join(home, "dispatch"),
		"~/a/../b/":     path.Join(home, "b"),
		"/abs/path/":    "/abs/path",
		"/tmp/~/x":      "/tmp/~/x",
		"~/with space":  path.Join(home, "with space"),
		"~/dispatch/.b": path.Join(home, "dispatch/.b"),
	} {
		got, err := nodes.ExpandHome(ctx, tr, in)
		if err != nil || got != want {
			t.Errorf("ExpandHome(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "relative/dir", "~root/x", "./x"} {
		if got, err := nodes.ExpandHome(ctx, tr, in); err == nil {
			t.Errorf("ExpandHome(%q) = %q, want an error", in, got)
		}
	}
}

func testExecOutput(t *testing.T, ctx context.Context, tr nodes.Transport, _ string) {
	res := exec(t, ctx, tr, nil, "/bin/sh", "-c", "echo out; echo err >&2; exit 3")
	if string(res.Stdout) != "out\n" || string(res.Stderr) != "err\n" || res.ExitCode != 3 {
		t.Errorf("Exec = {stdout %q, stderr %q, exit %d}, want {\"out\\n\", \"err\\n\", 3}",
			res.Stdout, res.Stderr, res.ExitCode)
	}
	res = exec(t, ctx, tr, nil, "/bin/sh", "-c", "exit 0")
	if res.ExitCode != 0 || len(res.Stdout) != 0 || len(res.Stderr) != 0 {
		t.Errorf("Exec(exit 0) = %+v, want exit 0 and no output", res)
	}
	// A command that dies of a signal reports 128+N like a shell does.
	res = exec(t, ctx, tr, nil, "/bin/sh", "-c", "kill -9 $$")
	if res.ExitCode != 128+9 {
		t.Errorf("Exec(kill -9 $$) exit code = %d, want %d", res.ExitCode, 128+9)
	}
	// Every signal keeps its number, not only the common ones (an SSH
	// node reports the signal by name).
	for _, sig := range []syscall.Signal{syscall.SIGUSR1, syscall.SIGQUIT, syscall.SIGALRM, syscall.SIGUSR2, syscall.SIGTERM} {
		name := strings.TrimPrefix(unix.SignalName(sig), "SIG")
		res = exec(t, ctx, tr, nil, "/bin/sh", "-c", "kill -"+name+" $$")
		if want := 128 + int(sig); res.ExitCode != want {
			t.Errorf("Exec(kill -%s $$) exit code = %d, want %d", name, res.ExitCode, want)
		}
	}
}

// testExecVerbatim proves that no shell interpreted the arguments: printf gets
// each one back as data and prints it NUL-terminated.
func testExecVerbatim(t *testing.T, ctx context.Context, tr nodes.Transport, _ string) {
	args := []string{
		"plain",
		"with space",
		"  leading and trailing  ",
		"",
		`"double quoted"`,
		`'single quoted'`,
		`it's`,
		`$HOME`,
		`${HOME}`,
		`$(echo injected)`,
		"`echo injected`",
		"; echo injected",
		"a && b || c",
		"| cat",
		"> /tmp/dispatch-transporttest-redirect",
		"line1\nline2\n",
		"tab\there",
		"*",
		"?",
		"[a-z]*",
		"{a,b}",
		"~",
		"~/x",
		`back\slash`,
		`\n`,
		"#comment",
		"-n",
		"--",
		"%s %d %%",
		"héllo, 世界",
		"!event",
	}
	argv := append([]string{"printf", `%s\000`}, args...)
	res := exec(t, ctx, tr, nil, argv...)
	if res.ExitCode != 0 {
		t.Fatalf("printf exit %d, stderr %q", res.ExitCode, res.Stderr)
	}
	got := strings.Split(string(res.Stdout), "\x00")
	if len(got) == 0 || got[len(got)-1] != "" {
		t.Fatalf("printf output %q is not NUL-terminated", res.Stdout)
	}
	got = got[:len(got)-1]
	if !reflect.DeepEqual(got, args) {
		t.Errorf("arguments were changed on the way:\n got %q\nwant %q", got, args)
	}

	// The same through /bin/echo, whose output is the arguments joined by spaces.
	res = exec(t, ctx, tr, nil, "/bin/echo", "$HOME", "*", "a;b", "'q'")
	if got, want := string(res.Stdout), "$HOME * a;b 'q'\n"; got != want {
		t.Errorf("/bin/echo printed %q, want %q", got, want)
	}
}

func testExecStdin(t *testing.T, ctx context.Context, tr nodes.Transport, _ string) {
	in := []byte("hello\x00world\n'\"$HOME\n")
	res := exec(t, ctx, tr, in, "cat")
	if !bytes.Equal(res.Stdout, in) {
		t.Errorf("cat echoed %q, want %q", res.Stdout, in)
	}
	// More than any pipe buffer, so a transport that writes stdin before reading
	// stdout would deadlock.
	big := bytes.Repeat([]byte("0123456789abcdef"), 256<<10)
	res = exec(t, ctx, tr, big, "cat")
	if !bytes.Equal(res.Stdout, big) {
		t.Errorf("cat echoed %d bytes of a %d-byte stdin, or changed them", len(res.Stdout), len(big))
	}
}

func testExecNilStdin(t *testing.T, ctx context.Context, tr nodes.Transport, _ string) {
	res := exec(t, ctx, tr, nil, "cat")
	if res.ExitCode != 0 || len(res.Stdout) != 0 {
		t.Errorf("cat with nil stdin = %+v, want exit 0 and no output", res)
	}
}

func testExecLargeOutput(t *testing.T, ctx context.Context, tr nodes.Transport, _ string) {
	const n = 3 << 20
	res := exec(t, ctx, tr, nil, "/bin/sh", "-c", "head -c "+strconv.Itoa(n)+" /dev/zero; head -c 1000 /dev/zero >&2")
	if len(res.Stdout) != n || len(res.Stderr) != 1000 {
		t.Errorf("got %d bytes of stdout and %d of stderr, want %d and 1000", len(res.Stdout), len(res.Stderr), n)
	}
}

// testExecOutputCapped checks that a command printing far more than
// nodes.MaxExecOutput (a forged 500 MB `wrapper status` reply) is an error of
// that call, and that the caller's memory stays bounded meanwhile.
func testExecOutputCapped(t *testing.T, ctx context.Context, tr nodes.Transport, _ string) {
	const n = 500_000_000
	for _, redirect := range []string{"", " >&2"} {
		runtime.GC()
		var peak atomic.Uint64
		stop := make(chan struct{})
		sampled := make(chan struct{})
		go func() {
			defer close(sampled)
			var ms runtime.MemStats
			for {
				runtime.ReadMemStats(&ms)
				if ms.HeapAlloc > peak.Load() {
					peak.Store(ms.HeapAlloc)
				}
				select {
				case <-stop:
					return
				case <-time.After(5 * time.Millisecond):
				}
			}
		}()
		res, err := tr.Exec(ctx, []string{"/bin/sh", "-c", "head -c " + strconv.Itoa(n) + " /dev/zero" + redirect}, nil)
		close(stop)
		<-sampled
		if !errors.Is(err, nodes.ErrOutputTooLarge) {
			t.Errorf("Exec printing %d bytes%s = %d bytes of stdout, %d of stderr, %v; want an error wrapping ErrOutputTooLarge",
				n, redirect, len(res.Stdout), len(res.Stderr), err)
		}
		t.Logf("heap peak %d MiB while reading %d bytes%s", peak.Load()>>20, n, redirect)
		if limit := uint64(4 * nodes.MaxExecOutput); peak.Load() > limit {
			t.Errorf("heap reached %d MiB while Exec read %d bytes%s, want at most %d MiB", peak.Load()>>20, n, redirect, limit>>20)
		}
	}
	// The transport still works after that.
	if res := exec(t, ctx, tr, nil, "echo", "ok"); string(res.Stdout) != "ok\n" {
		t.Errorf("Exec after an oversized output printed %q", res.Stdout)
	}
}

// testExecMissingCommand checks that a command that does not exist is reported
// as a remote shell reports it, exit code 127, and not as a transport failure:
// the controller must tell "the node is unreachable" from "nothing installed
// there yet".
func testExecMissingCommand(t *testing.T, ctx context.Context, tr nodes.Transport, _ string) {
	res, err := tr.Exec(ctx, []string{"/nonexistent/dispatch-transporttest-no-such-command"}, nil)
	if err != nil || res.ExitCode != 127 {
		t.Errorf("Exec of a missing command = %+v, %v; want exit code 127 and no error", res, err)
	}
	res, err = tr.Exec(ctx, []string{"dispatch-transporttest-no-such-command"}, nil)
	if err != nil || res.ExitCode != 127 {
		t.Errorf("Exec of a command not on PATH = %+v, %v; want exit code 127 and no error", res, err)
	}
	if _, err := tr.Exec(ctx, nil, nil); err == nil {
		t.Error("Exec(nil argv) succeeded, want an error")
	}
}

func testExecDeadline(t *testing.T, ctx context.Context, tr nodes.Transport, _ string) {
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := tr.Exec(short, []string{"sleep", "30"}, nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Exec(sleep 30) past its deadline returned %v, want an error wrapping context.DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Exec(sleep 30) returned %v after its 300ms deadline", d)
	}
	done, cancel2 := context.WithCancel(ctx)
	cancel2()
	if _, err := tr.Exec(done, []string{"true"}, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("Exec with a cancelled ctx returned %v, want an error wrapping context.Canceled", err)
	}
}

// testStream: lines in order as they come, stdin held open (the command
// waits on it), ended by onLine, by the command's end, by ctx, or by a line
// too long.
func testStream(t *testing.T, ctx context.Context, tr nodes.Transport, _ string) {
	// The command prints two lines, then waits for its stdin to close.
	script := `echo one; echo "two words"; cat >/dev/null; echo never`
	var got []string
	err := tr.Stream(ctx, []string{"/bin/sh", "-c", script}, func(line []byte) bool {
		got = append(got, string(line))
		return len(got) < 2
	})
	if err != nil || strings.Join(got, "|") != "one|two words" {
		t.Errorf("Stream ended by onLine: %v, lines %q", err, got)
	}
	got = nil
	err = tr.Stream(ctx, []string{"/bin/sh", "-c", "echo a; echo b; printf partial"}, func(line []byte) bool {
		got = append(got, string(line))
		return true
	})
	if !errors.Is(err, nodes.ErrStreamEnded) || strings.Join(got, "|") != "a|b" {
		t.Errorf("Stream of a command that exits: %v, lines %q; want ErrStreamEnded after a|b", err, got)
	}
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = tr.Stream(short, []string{"/bin/sh", "-c", "echo x; cat >/dev/null"}, func([]byte) bool { return true })
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 10*time.Second {
		t.Errorf("Stream past its deadline: %v after %s, want DeadlineExceeded at once", err, time.Since(start))
	}
	err = tr.Stream(ctx, []string{"/bin/sh", "-c", "head -c 2000000 /dev/zero | tr '\\0' x; echo"}, func([]byte) bool { return true })
	if err == nil || errors.Is(err, nodes.ErrStreamEnded) || !strings.Contains(err.Error(), "more than") {
		t.Errorf("Stream of a 2 MB line: %v, want an error about its length", err)
	}
	// The node is still usable.
	if res := exec(t, ctx, tr, nil, "echo", "ok"); string(res.Stdout) != "ok\n" {
		t.Errorf("Exec after the streams: %q", res.Stdout)
	}
}

// testConverse: a transport that holds conversations (nodes.Converser)
// answers one line with one line until the conversation is closed or its
// command ends; a reply too long, or a deadline passed, closes it.
func testConverse(t *testing.T, ctx context.Context, tr nodes.Transport, _ string) {
	open := conversing(t, ctx, tr, "/bin/sh", "-c", `while read -r l; do case $l in long) head -c 3000 /dev/zero | tr '\0' x; echo;; quit) exit 0;; sleep) sleep 30;; *) echo "got $l";; esac; done`)
	conv := open()
	for _, req := range []string{"one", "two words"} {
		if line, err := conv.Call(ctx, []byte(req), 100); err != nil || string(line) != "got "+req {
			t.Fatalf("Call(%q) = %q, %v", req, line, err)
		}
	}
	if line, err := conv.Call(ctx, []byte("long"), 5000); err != nil || len(line) != 3000 {
		t.Fatalf("Call of a 3000-byte reply: %d bytes, %v", len(line), err)
	}
	if _, err := conv.Call(ctx, []byte("long"), 100); err == nil || !strings.Contains(err.Error(), "more than") {
		t.Errorf("Call of a reply over the limit: %v, want an error about its length", err)
	}
	if _, err := conv.Call(ctx, []byte("one"), 100); !errors.Is(err, nodes.ErrConversationClosed) {
		t.Errorf("Call after a failed one: %v, want ErrConversationClosed", err)
	}
	conv = open()
	if _, err := conv.Call(ctx, []byte("quit"), 100); !errors.Is(err, nodes.ErrStreamEnded) {
		t.Errorf("Call the command ends without answering: %v, want ErrStreamEnded", err)
	}
	conv = open()
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := conv.Call(short, []byte("sleep"), 100); !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 10*time.Second {
		t.Errorf("Call past its deadline: %v after %s, want DeadlineExceeded at once", err, time.Since(start))
	}
	if err := conv.Close(); err != nil {
		t.Errorf("Close after a failed call: %v", err)
	}
	// The node is still usable.
	if res := exec(t, ctx, tr, nil, "echo", "ok"); string(res.Stdout) != "ok\n" {
		t.Errorf("Exec after the conversations: %q", res.Stdout)
	}
}

// conversing returns what opens a conversation with argv on tr, closed at
// the test's end; it skips the test when tr holds none.
func conversing(t *testing.T, ctx context.Context, tr nodes.Transport, argv ...string) func() nodes.Conversation {
	cv, ok := tr.(nodes.Converser)
	if !ok {
		t.Skip("the transport holds no conversation")
	}
	return func() nodes.Conversation {
		t.Helper()
		conv, err := cv.Converse(ctx, argv)
		if err != nil {
			t.Fatalf("Converse: %v", err)
		}
		t.Cleanup(func() { conv.Close() })
		return conv
	}
}

// testExchange: a conversation's Exchange hands the command's stdout to
// read for an answer of its own framing (here a length line and that many
// bytes), read exactly, so that the next request, Exchange or Call, is
// answered after it; read failing, or a deadline passed, closes it, and
// ExchangeIdle ends an answer that does not come (ErrStalled).
func testExchange(t *testing.T, ctx context.Context, tr nodes.Transport, _ string) {
	open := conversing(t, ctx, tr, "/bin/sh", "-c", `while read -r l; do case $l in sleep) sleep 30;; *) echo "$l"; head -c "$l" /dev/zero | tr '\0' x;; esac; done`)
	// answer reads a length line a byte at a time, then that many bytes.
	answer := func(got *int) func(io.Reader) error {
		return func(r io.Reader) error {
			var line []byte
			b := make([]byte, 1)
			for {
				if _, err := io.ReadFull(r, b); err != nil {
					return err
				}
				if b[0] == '\n' {
					break
				}
				line = append(line, b[0])
			}
			n, err := strconv.Atoi(string(line))
			if err != nil {
				return err
			}
			body := make([]byte, n)
			if _, err := io.ReadFull(r, body); err != nil {
				return err
			}
			*got = bytes.Count(body, []byte("x"))
			return nil
		}
	}
	conv := open()
	for _, n := range []int{5, 200000, 0} {
		var got int
		if err := conv.Exchange(ctx, []byte(strconv.Itoa(n)), answer(&got)); err != nil || got != n {
			t.Fatalf("Exchange of %d bytes: %d, %v", n, got, err)
		}
	}
	if line, err := conv.Call(ctx, []byte("0"), 100); err != nil || string(line) != "0" {
		t.Fatalf("Call after the exchanges = %q, %v", line, err)
	}
	if err := conv.Exchange(ctx, []byte("3"), func(io.Reader) error { return errors.New("refused") }); err == nil {
		t.Error("Exchange whose read failed: no error")
	}
	if err := conv.Exchange(ctx, []byte("3"), answer(new(int))); !errors.Is(err, nodes.ErrConversationClosed) {
		t.Errorf("Exchange after a failed one: %v, want ErrConversationClosed", err)
	}
	conv = open()
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := conv.Exchange(short, []byte("sleep"), answer(new(int))); !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 10*time.Second {
		t.Errorf("Exchange past its deadline: %v after %s, want DeadlineExceeded at once", err, time.Since(start))
	}
	conv = open()
	if err := nodes.ExchangeIdle(ctx, conv, []byte("sleep"), answer(new(int)), 300*time.Millisecond); !errors.Is(err, nodes.ErrStalled) {
		t.Errorf("ExchangeIdle of an answer that never comes: %v, want ErrStalled", err)
	}
	if res := exec(t, ctx, tr, nil, "echo", "ok"); string(res.Stdout) != "ok\n" {
		t.Errorf("Exec after the exchanges: %q", res.Stdout)
	}
}

// testExecDetachedChild is how the wrapper's `run` behaves: it starts a child that
// outlives it, with the child's stdio on /dev/null, and exits. Exec must return
// when the command exits, not when the child does.
func testExecDetachedChild(t *testing.T, ctx context.Context, tr nodes.Transport, _ string) {
	start := time.Now()
	res := exec(t, ctx, tr, nil, "/bin/sh", "-c", "sleep 30 </dev/null >/dev/null 2>&1 & echo $!")
	pid := strings.TrimSpace(string(res.Stdout))
	if pid != "" {
		t.Cleanup(func() {
			_, _ = tr.Exec(context.WithoutCancel(ctx), []string{"kill", pid}, nil)
		})
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Exec returned %v after the command exited; a detached child must not hold it", d)
	}
	if _, err := strconv.Atoi(pid); err != nil {
		t.Errorf("command printed %q, want the child's pid", res.Stdout)
	}
}

func testPut(t *testing.T, ctx context.Context, tr nodes.Transport, dir string) {
	tests := []struct {
		name    string
		content []byte
		mode    fs.FileMode
		lsMode  string
	}{
		{"plain", []byte("hello\n"), 0o644, "-rw-r--r--"},
		{"a/b/c/nested", []byte("deep"), 0o600, "-rw-------"},
		{"exec/wrapper", []byte("#!/bin/sh\necho run\n"), 0o755, "-rwxr-xr-x"},
		{"readonly/spec.md", []byte("# spec\n"), 0o444, "-r--r--r--"},
		{"empty", nil, 0o644, "-rw-r--r--"},
		{"with space/and 'quote'", []byte("x"), 0o640, "-rw-r-----"},
		{"binary", allBytes(), 0o644, "-rw-r--r--"},
	}
	for _, tc := range tests {
		p := path.Join(dir, tc.name)
		if err := tr.Put(ctx, p, bytes.NewReader(tc.content), tc.mode); err != nil {
			t.Errorf("Put(%s): %v", tc.name, err)
			continue
		}
		if got := get(t, ctx, tr, p); !bytes.Equal(got, tc.content) {
			t.Errorf("Get(%s) = %q, want %q", tc.name, got, tc.content)
		}
		res := exec(t, ctx, tr, nil, "ls", "-ln", p)
		if got := string(res.Stdout); !strings.HasPrefix(got, tc.lsMode) {
			t.Errorf("ls -ln %s = %q, want mode %s", tc.name, got, tc.lsMode)
		}
	}
	files := walk(t, ctx, tr, dir)
	if len(files) != len(tests) {
		t.Errorf("Walk after Put found %v, want exactly the %d files put (no temporary files)", files, len(tests))
	}
	for _, f := range files {
		for _, tc := range tests {
			if f.Path == tc.name && (f.Mode != tc.mode || f.Size != int64(len(tc.content))) {
				t.Errorf("Walk reports %s as mode %v size %d, want %v and %d", f.Path, f.Mode, f.Size, tc.mode, len(tc.content))
			}
		}
	}
	// The executable really runs.
	if res := exec(t, ctx, tr, nil, path.Join(dir, "exec/wrapper")); string(res.Stdout) != "run\n" {
		t.Errorf("running the put executable printed %q, exit %d", res.Stdout, res.ExitCode)
	}
}

func testPutOverwrite(t *testing.T, ctx context.Context, tr nodes.Transport, dir string) {
	p := path.Join(dir, "status.json")
	put(t, ctx, tr, p, []byte(strings.Repeat("old ", 1000)), 0o444)
	put(t, ctx, tr, p, []byte("new"), 0o644)
	if got := get(t, ctx, tr, p); string(got) != "new" {
		t.Errorf("after overwrite Get = %q, want %q", got, "new")
	}
	if files := walk(t, ctx, tr, dir); len(files) != 1 || files[0].Path != "status.json" || files[0].Mode != 0o644 {
		t.Errorf("after overwrite the directory holds %v, want only status.json with mode 0644", files)
	}
}

func testPutFailedReader(t *testing.T, ctx context.Context, tr nodes.Transport, dir string) {
	p := path.Join(dir, "launch.json")
	put(t, ctx, tr, p, []byte("complete"), 0o644)
	r := io.MultiReader(bytes.NewReader([]byte("partial")), errReader{})
	if err := tr.Put(ctx, p, r, 0o644); err == nil {
		t.Fatal("Put from a failing reader succeeded, want an error")
	}
	if got := get(t, ctx, tr, p); string(got) != "complete" {
		t.Errorf("after a failed Put the file holds %q, want the old content", got)
	}
	if files := walk(t, ctx, tr, dir); len(files) != 1 {
		t.Errorf("after a failed Put the directory holds %v, want only launch.json", files)
	}
	fresh := path.Join(dir, "never")
	if err := tr.Put(ctx, fresh, errReader{}, 0o644); err == nil {
		t.Fatal("Put from a failing reader succeeded, want an error")
	}
	var buf bytes.Buffer
	if err := tr.Get(ctx, fresh, &buf); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("after a failed Put of a new file Get returned %v, want fs.ErrNotExist", err)
	}
}

func testPutParentIsFile(t *testing.T, ctx context.Context, tr nodes.Transport, dir string) {
	p := path.Join(dir, "file")
	put(t, ctx, tr, p, []byte("x"), 0o644)
	if err := tr.Put(ctx, path.Join(p, "child"), strings.NewReader("y"), 0o644); err == nil {
		t.Error("Put under a regular file succeeded, want an error")
	}
}

func testGet(t *testing.T, ctx context.Context, tr nodes.Transport, dir string) {
	p := path.Join(dir, "data.bin")
	content := bytes.Repeat(allBytes(), 4096) // 1 MiB
	put(t, ctx, tr, p, content, 0o600)
	if got := get(t, ctx, tr, p); !bytes.Equal(got, content) {
		t.Errorf("Get returned %d bytes that differ from the %d put", len(got), len(content))
	}
	var buf bytes.Buffer
	if err := tr.Get(ctx, dir, &buf); err == nil {
		t.Error("Get of a directory succeeded, want an error")
	}
}

// testLstatSize: Lstat reports a regular file's size and mode (a local
// node's collection claims its task.log's room from it before copying).
func testLstatSize(t *testing.T, ctx context.Context, tr nodes.Transport, dir string) {
	p := path.Join(dir, "task.log")
	put(t, ctx, tr, p, bytes.Repeat([]byte("l"), 12345), 0o600)
	st, err := tr.Lstat(ctx, p)
	if err != nil || st.Size != 12345 || !st.Mode.IsRegular() {
		t.Errorf("Lstat: %+v, %v; want a regular file of 12345 bytes", st, err)
	}
	if _, err := tr.Lstat(ctx, path.Join(dir, "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Lstat of a missing file: %v, want fs.ErrNotExist", err)
	}
}

func testGetMissing(t *testing.T, ctx context.Context, tr nodes.Transport, dir string) {
	for _, p := range []string{path.Join(dir, "missing"), path.Join(dir, "no/such/dir/file")} {
		var buf bytes.Buffer
		err := tr.Get(ctx, p, &buf)
		if !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("Get(%s) = %v, want an error wrapping fs.ErrNotExist", p, err)
		}
	}
}

// testGetRefusesLinks checks that Get reads regular files only: a symbolic
// link a task left (to the node user's keys, say) is refused, not followed,
// and a FIFO is refused at once rather than waited on.
func testGetRefusesLinks(t *testing.T, ctx context.Context, tr nodes.Transport, dir string) {
	put(t, ctx, tr, path.Join(dir, "secret/id_ed25519"), []byte("PRIVATE KEY"), 0o600)
	exec(t, ctx, tr, nil, "ln", "-s", path.Join(dir, "secret/id_ed25519"), path.Join(dir, "task.log"))
	exec(t, ctx, tr, nil, "mkfifo", path.Join(dir, "fifo"))
	for _, name := range []string{"task.log", "fifo"} {
		var buf bytes.Buffer
		if err := tr.Get(ctx, path.Join(dir, name), &buf); err == nil || buf.Len() > 0 {
			t.Errorf("Get(%s) = %q, %v; want an error and nothing read", name, buf.String(), err)
		}
	}
}

// slowReader hands out n chunks of size bytes, pausing before each; after
// chunk stallAt (when > 0) it pauses for stall instead.
type slowReader struct {
	chunk, left int
	pause       time.Duration
	stallAt     int
	stall       time.Duration
	served      int
}

func (r *slowReader) Read(p []byte) (int, error) {
	if r.left == 0 {
		return 0, io.EOF
	}
	if r.stallAt > 0 && r.served == r.stallAt {
		time.Sleep(r.stall)
	} else {
		time.Sleep(r.pause)
	}
	n := min(len(p), r.chunk)
	for i := range p[:n] {
		p[i] = byte(r.served + i)
	}
	r.served++
	r.left--
	return n, nil
}

// slowWriter pauses before each write, and for stall before write stallAt.
type slowWriter struct {
	w       io.Writer
	pause   time.Duration
	stallAt int
	stall   time.Duration
	writes  int
}

func (w *slowWriter) Write(p []byte) (int, error) {
	if w.stallAt > 0 && w.writes == w.stallAt {
		time.Sleep(w.stall)
	} else {
		time.Sleep(w.pause)
	}
	w.writes++
	return w.w.Write(p)
}

// testTransferSlowButMoving checks that a transfer bounded by progress
// (nodes.PutIdle, nodes.GetIdle) finishes however long it takes, as long as
// bytes keep moving: here each lasts several idle periods.
func testTransferSlow(t *testing.T, ctx context.Context, tr nodes.Transport, dir string) {
	const idle = 400 * time.Millisecond
	p := path.Join(dir, "slow.bin")
	start := time.Now()
	r := &slowReader{chunk: 32 << 10, left: 16, pause: idle / 4}
	if err := nodes.PutIdle(ctx, tr, p, r, 0o644, idle); err != nil {
		t.Fatalf("PutIdle of a slow but steady reader: %v", err)
	}
	if d := time.Since(start); d < 3*idle {
		t.Fatalf("the slow Put took %s, not the several idle periods (%s) the test needs", d, idle)
	}
	var got bytes.Buffer
	start = time.Now()
	if err := nodes.GetIdle(ctx, tr, p, &slowWriter{w: &got, pause: idle / 4}, idle); err != nil {
		t.Fatalf("GetIdle into a slow but steady writer: %v", err)
	}
	if got.Len() != 16*32<<10 {
		t.Errorf("GetIdle read %d bytes, want %d", got.Len(), 16*32<<10)
	}
	if d := time.Since(start); d < 3*idle {
		t.Logf("the slow Get took only %s (the node sent large writes)", d)
	}
}

// testTransferStalled checks that a transfer that stops moving fails with
// ErrStalled after its idle period, without a fixed deadline, and leaves no
// file behind.
func testTransferStalled(t *testing.T, ctx context.Context, tr nodes.Transport, dir string) {
	const idle = 300 * time.Millisecond
	p := path.Join(dir, "stalled.bin")
	r := &slowReader{chunk: 32 << 10, left: 8, stallAt: 2, stall: 5 * idle}
	err := nodes.PutIdle(ctx, tr, p, r, 0o644, idle)
	if !errors.Is(err, nodes.ErrStalled) {
		t.Fatalf("PutIdle of a reader that stalls = %v, want an error wrapping ErrStalled", err)
	}
	var buf bytes.Buffer
	if err := tr.Get(ctx, p, &buf); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("after a stalled Put, Get = %v, want fs.ErrNotExist", err)
	}
	put(t, ctx, tr, p, bytes.Repeat([]byte("x"), 1<<20), 0o644)
	w := &slowWriter{w: io.Discard, stallAt: 1, stall: 5 * idle}
	if err := nodes.GetIdle(ctx, tr, p, w, idle); !errors.Is(err, nodes.ErrStalled) {
		t.Fatalf("GetIdle into a writer that stalls = %v, want an error wrapping ErrStalled", err)
	}
	// The transport still works after that.
	if got := get(t, ctx, tr, p); len(got) != 1<<20 {
		t.Errorf("Get after a stalled transfer read %d bytes, want %d", len(got), 1<<20)
	}
}

// testTransferLarge moves a file of a few hundred megabytes each way, with
// an idle bound only, and checks its content.
func testTransferLarge(t *testing.T, ctx context.Context, tr nodes.Transport, dir string) {
	const size = 256 << 20
	p := path.Join(dir, "large.bin")
	src := sha256.New()
	r := io.TeeReader(io.LimitReader(&counter{}, size), src)
	if err := nodes.PutIdle(ctx, tr, p, r, 0o644, 10*time.Second); err != nil {
		t.Fatalf("PutIdle of %d MiB: %v", size>>20, err)
	}
	dst := sha256.New()
	cw := &countingWriter{w: dst}
	if err := nodes.GetIdle(ctx, tr, p, cw, 10*time.Second); err != nil {
		t.Fatalf("GetIdle of %d MiB: %v", size>>20, err)
	}
	if cw.n != size || !bytes.Equal(src.Sum(nil), dst.Sum(nil)) {
		t.Errorf("GetIdle returned %d bytes with another checksum than the %d put", cw.n, size)
	}
}

// counter is an endless reader of varying bytes.
type counter struct{ n byte }

func (c *counter) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = c.n
		c.n += 7
	}
	return len(p), nil
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

func testWalk(t *testing.T, ctx context.Context, tr nodes.Transport, dir string) {
	root := path.Join(dir, "tree")
	for name, content := range map[string]string{
		"b.txt":             "bb",
		"a.txt":             "a",
		"sub/deeper/z.go":   "package z\n",
		"sub/c.md":          "ccc",
		"sub dir/space.txt": "spaces",
		".hidden/h":         "hh",
		"a/b":               "ab",
		"a.b":               "dot",
		"target/in-target":  "12345",
	} {
		put(t, ctx, tr, path.Join(root, name), []byte(content), 0o644)
	}
	mkdir(t, ctx, tr, path.Join(root, "empty/dir"))
	exec(t, ctx, tr, nil, "ln", "-s", "target", path.Join(root, "link-to-dir"))
	exec(t, ctx, tr, nil, "ln", "-s", "/nonexistent/dangling", path.Join(root, "dangling"))
	exec(t, ctx, tr, nil, "chmod", "0755", path.Join(root, "sub/deeper/z.go"))

	files, err := tr.Walk(ctx, root)
	if err != nil {
		t.Fatalf("Walk: %v", err)
	}
	type entry struct {
		Path    string
		Size    int64
		Mode    fs.FileMode
		Symlink bool
	}
	var got []entry
	for _, f := range files {
		e := entry{Path: f.Path, Size: f.Size, Mode: f.Mode, Symlink: f.Mode&fs.ModeSymlink != 0}
		if e.Symlink {
			e.Size, e.Mode = 0, 0 // a symlink's size and permissions vary by OS
		}
		got = append(got, e)
	}
	want := []entry{
		{".hidden/h", 2, 0o644, false},
		{"a.b", 3, 0o644, false},
		{"a.txt", 1, 0o644, false},
		{"a/b", 2, 0o644, false},
		{"b.txt", 2, 0o644, false},
		{"dangling", 0, 0, true},
		{"link-to-dir", 0, 0, true},
		{"sub dir/space.txt", 6, 0o644, false},
		{"sub/c.md", 3, 0o644, false},
		{"sub/deeper/z.go", 10, 0o755, false},
		{"target/in-target", 5, 0o644, false},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Walk:\n got %+v\nwant %+v", got, want)
	}
}

func testWalkEmpty(t *testing.T, ctx context.Context, tr nodes.Transport, dir string) {
	mkdir(t, ctx, tr, path.Join(dir, "only/empty/dirs"))
	files, err := tr.Walk(ctx, dir)
	if err != nil || len(files) != 0 {
		t.Errorf("Walk of a tree of empty directories = %v, %v; want no files and no error", files, err)
	}
}

func testWalkMissing(t *testing.T, ctx context.Context, tr nodes.Transport, dir string) {
	_, err := tr.Walk(ctx, path.Join(dir, "missing"))
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Walk of a missing dir = %v, want an error wrapping fs.ErrNotExist", err)
	}
}

// testWalkSymlinkRoot checks that a Walk root that is a symbolic link (a
// task that replaced its output/ by a link to ~) is an error and lists
// nothing of the link's target.
func testWalkSymlinkRoot(t *testing.T, ctx context.Context, tr nodes.Transport, dir string) {
	put(t, ctx, tr, path.Join(dir, "home/.ssh/id_ed25519"), []byte("PRIVATE KEY"), 0o600)
	exec(t, ctx, tr, nil, "ln", "-s", path.Join(dir, "home"), path.Join(dir, "output"))
	files, err := tr.Walk(ctx, path.Join(dir, "output"))
	if err == nil || errors.Is(err, fs.ErrNotExist) || len(files) > 0 {
		t.Errorf("Walk of a symbolic link to a directory = %v, %v; want an error (not ErrNotExist) and no files", files, err)
	}
}

func testRemove(t *testing.T, ctx context.Context, tr nodes.Transport, dir string) {
	put(t, ctx, tr, path.Join(dir, "keep"), []byte("k"), 0o644)
	put(t, ctx, tr, path.Join(dir, "tree/a/b/c"), []byte("c"), 0o644)
	put(t, ctx, tr, path.Join(dir, "tree/d"), []byte("d"), 0o644)
	put(t, ctx, tr, path.Join(dir, "file"), []byte("f"), 0o644)
	exec(t, ctx, tr, nil, "ln", "-s", path.Join(dir, "keep"), path.Join(dir, "tree/link"))

	if err := tr.Remove(ctx, path.Join(dir, "tree")); err != nil {
		t.Fatalf("Remove(tree): %v", err)
	}
	if err := tr.Remove(ctx, path.Join(dir, "file")); err != nil {
		t.Fatalf("Remove(file): %v", err)
	}
	files := walk(t, ctx, tr, dir)
	if len(files) != 1 || files[0].Path != "keep" {
		t.Errorf("after Remove the directory holds %v, want only keep (a symlink's target survives)", files)
	}
	if _, err := tr.Walk(ctx, path.Join(dir, "tree")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Walk of the removed tree = %v, want fs.ErrNotExist", err)
	}
}

func testRemoveReadOnly(t *testing.T, ctx context.Context, tr nodes.Transport, dir string) {
	tree := path.Join(dir, "modcache")
	put(t, ctx, tr, path.Join(tree, "pkg@v1/go.mod"), []byte("module pkg\n"), 0o444)
	exec(t, ctx, tr, nil, "chmod", "0555", path.Join(tree, "pkg@v1"), tree)
	if err := tr.Remove(ctx, tree); err != nil {
		t.Fatalf("Remove of a read-only tree: %v", err)
	}
	if _, err := tr.Walk(ctx, tree); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Walk of the removed tree = %v, want fs.ErrNotExist", err)
	}
}

func testRemoveMissing(t *testing.T, ctx context.Context, tr nodes.Transport, dir string) {
	if err := tr.Remove(ctx, path.Join(dir, "missing")); err != nil {
		t.Errorf("Remove of a missing path = %v, want nil", err)
	}
	if err := tr.Remove(ctx, path.Join(dir, "missing/parent/too")); err != nil {
		t.Errorf("Remove of a path under a missing dir = %v, want nil", err)
	}
	if err := tr.Remove(ctx, "/"); err == nil {
		t.Error("Remove(/) succeeded, want a refusal")
	}
}

func testRelativePaths(t *testing.T, ctx context.Context, tr nodes.Transport, _ string) {
	var buf bytes.Buffer
	if err := tr.Put(ctx, "relative/file", strings.NewReader("x"), 0o644); err == nil {
		t.Error("Put of a relative path succeeded, want an error")
	}
	if err := tr.Get(ctx, "relative/file", &buf); err == nil {
		t.Error("Get of a relative path succeeded, want an error")
	}
	if _, err := tr.Walk(ctx, "relative"); err == nil {
		t.Error("Walk of a relative path succeeded, want an error")
	}
	if err := tr.Remove(ctx, "relative"); err == nil {
		t.Error("Remove of a relative path succeeded, want an error")
	}
	if err := tr.Put(ctx, "~/x", strings.NewReader("x"), 0o644); err == nil {
		t.Error(`Put of "~/x" succeeded, want an error: "~" must be expanded with ExpandHome first`)
	}
}

func testConcurrent(t *testing.T, ctx context.Context, tr nodes.Transport, dir string) {
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := path.Join(dir, fmt.Sprintf("task%d/status.json", i))
			want := fmt.Sprintf(`{"task":%d}`, i)
			if err := tr.Put(ctx, p, strings.NewReader(want), 0o644); err != nil {
				t.Errorf("Put: %v", err)
				return
			}
			var buf bytes.Buffer
			if err := tr.Get(ctx, p, &buf); err != nil || buf.String() != want {
				t.Errorf("Get = %q, %v; want %q", buf.String(), err, want)
			}
			res, err := tr.Exec(ctx, []string{"printf", "%s", want}, nil)
			if err != nil || string(res.Stdout) != want {
				t.Errorf("Exec = %q, %v; want %q", res.Stdout, err, want)
			}
		}()
	}
	wg.Wait()
	if files := walk(t, ctx, tr, dir); len(files) != 8 {
		t.Errorf("after 8 concurrent Puts Walk found %v", files)
	}
}

func testCloseTwice(t *testing.T, _ context.Context, tr nodes.Transport, _ string) {
	if err := tr.Close(); err != nil {
		t.Errorf("first Close: %v", err)
	}
	if err := tr.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func exec(t *testing.T, ctx context.Context, tr nodes.Transport, stdin []byte, argv ...string) nodes.Result {
	t.Helper()
	res, err := tr.Exec(ctx, argv, stdin)
	if err != nil {
		t.Fatalf("Exec(%q): %v", argv, err)
	}
	return res
}

func mkdir(t *testing.T, ctx context.Context, tr nodes.Transport, dir string) {
	t.Helper()
	res := exec(t, ctx, tr, nil, "mkdir", "-p", dir)
	if res.ExitCode != 0 {
		t.Fatalf("mkdir -p %s: exit %d: %s", dir, res.ExitCode, res.Stderr)
	}
}

func put(t *testing.T, ctx context.Context, tr nodes.Transport, p string, content []byte, mode fs.FileMode) {
	t.Helper()
	if err := tr.Put(ctx, p, bytes.NewReader(content), mode); err != nil {
		t.Fatalf("Put(%s): %v", p, err)
	}
}

func get(t *testing.T, ctx context.Context, tr nodes.Transport, p string) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := tr.Get(ctx, p, &buf); err != nil {
		t.Fatalf("Get(%s): %v", p, err)
	}
	return buf.Bytes()
}

func walk(t *testing.T, ctx context.Context, tr nodes.Transport, dir string) []nodes.FileInfo {
	t.Helper()
	files, err := tr.Walk(ctx, dir)
	if err != nil {
		t.Fatalf("Walk(%s): %v", dir, err)
	}
	return files
}

func allBytes() []byte {
	b := make([]byte, 256)
	for i := range b {
		b[i] = byte(i)
	}
	return b
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("reader failed on purpose") }

// testExecFrom streams a large stdin into a command from a reader (of a
// transport that can), then one that stalls: ExecFromIdle ends it with
// ErrStalled, and the transport works after that.
func testExecFrom(t *testing.T, ctx context.Context, tr nodes.Transport, _ string) {
	ef, ok := tr.(nodes.ExecFromer)
	if !ok {
		t.Skip("this transport cannot stream a command's stdin")
	}
	const size = 64 << 20
	src := sha256.New()
	r := io.TeeReader(io.LimitReader(&counter{}, size), src)
	res, err := nodes.ExecFromIdle(ctx, ef, []string{"sha256sum"}, r, 10*time.Second)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("ExecFromIdle of %d MiB into sha256sum: %+v, %v", size>>20, res, err)
	}
	if got, want := strings.Fields(string(res.Stdout)), fmt.Sprintf("%x", src.Sum(nil)); len(got) == 0 || got[0] != want {
		t.Errorf("the command read another stream: sha256 %v, want %s", got, want)
	}
	const idle = 300 * time.Millisecond
	stall := &slowReader{chunk: 32 << 10, left: 8, stallAt: 2, stall: 5 * idle}
	if _, err := nodes.ExecFromIdle(ctx, ef, []string{"cat"}, io.TeeReader(stall, io.Discard), idle); !errors.Is(err, nodes.ErrStalled) {
		t.Fatalf("ExecFromIdle of a reader that stalls = %v, want an error wrapping ErrStalled", err)
	}
	if res := exec(t, ctx, tr, []byte("after"), "cat"); string(res.Stdout) != "after" {
		t.Errorf("Exec after a stalled stream: %+v", res)
	}
}

// failAfter is a writer that takes n bytes, then fails.
type failAfter struct{ n int }

func (f *failAfter) Write(p []byte) (int, error) {
	if len(p) > f.n {
		return 0, errors.New("writer failed on purpose")
	}
	f.n -= len(p)
	return len(p), nil
}

// testExecTo streams a command's stdout, past MaxExecOutput, into a
// writer (of a transport that can); a writer that fails ends the command;
// a command that stops printing ends with ErrStalled; the transport works
// after each.
func testExecTo(t *testing.T, ctx context.Context, tr nodes.Transport, _ string) {
	et, ok := tr.(nodes.ExecToer)
	if !ok {
		t.Skip("this transport cannot stream a command's stdout")
	}
	size := int64(nodes.MaxExecOutput + 8<<20)
	sum := sha256.New()
	n := &countingWriter{w: sum}
	res, err := nodes.ExecToIdle(ctx, et, []string{"head", "-c", fmt.Sprint(size), "/dev/zero"}, nil, n, 10*time.Second)
	if err != nil || res.ExitCode != 0 || n.n != size || len(res.Stdout) != 0 {
		t.Fatalf("ExecToIdle of %d MiB: %+v (%d bytes kept), %v, %d bytes written", size>>20, res.ExitCode, len(res.Stdout), err, n.n)
	}
	want := sha256.New()
	io.CopyN(want, &zeroReader{}, size)
	if !bytes.Equal(sum.Sum(nil), want.Sum(nil)) {
		t.Error("the stream is not what the command printed")
	}
	if _, err := nodes.ExecToIdle(ctx, et, []string{"cat", "/dev/zero"}, nil, &failAfter{n: 1 << 20}, 10*time.Second); err == nil {
		t.Fatal("ExecToIdle into a writer that fails: no error")
	}
	const idle = 300 * time.Millisecond
	if _, err := nodes.ExecToIdle(ctx, et, []string{"sh", "-c", "echo a; sleep 5; echo b"}, nil, io.Discard, idle); !errors.Is(err, nodes.ErrStalled) {
		t.Fatalf("ExecToIdle of a command that stops printing = %v, want an error wrapping ErrStalled", err)
	}
	if res := exec(t, ctx, tr, []byte("after"), "cat"); string(res.Stdout) != "after" {
		t.Errorf("Exec after a stalled stream: %+v", res)
	}
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
