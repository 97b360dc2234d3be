package controller

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/home"
	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/collect"
)

// logGrowth is how much the node's task.log grows between the reading
// of its size and its sending in TestCollectTaskLogGrownAfterItWasRead: more
// than the room has past the log as read.
const logGrowth = 1 << 20

// growLog appends logGrowth bytes to the task.log at p, once (grown), and
// returns its size before.
func growLog(t *testing.T, p string, grown *sync.Once) int64 {
	fi, err := os.Stat(p)
	if err != nil {
		t.Error(err)
		return 0
	}
	grown.Do(func() {
		f, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Error(err)
			return
		}
		defer f.Close()
		if _, err := f.Write(bytes.Repeat([]byte("later\n"), logGrowth/6+1)[:logGrowth]); err != nil {
			t.Error(err)
		}
	})
	return fi.Size()
}

// cutLog truncates the task.log at p by n bytes, once (cut).
func cutLog(t *testing.T, p string, n int64, cut *sync.Once) {
	cut.Do(func() {
		fi, err := os.Stat(p)
		if err == nil {
			err = os.Truncate(p, fi.Size()-n)
		}
		if err != nil {
			t.Error(err)
		}
	})
}

// growingStream is a node whose collect stream is written by the
// wrapper's own code (package wrapper/collect) in this process, with the
// task.log of each attempt grown between its head and its sending, as a
// process the task left behind writing to it does; lying, it sends the
// grown task.log whole, past the size its head announced. Every other
// call is its transport's.
type growingStream struct {
	nodes.Transport
	t     *testing.T
	lying bool
	cut   int64 // > 0: the log is cut by as many bytes instead (truncated), once
	grown sync.Once
}

func (g *growingStream) ExecTo(ctx context.Context, argv []string, stdin []byte, w io.Writer) (nodes.Result, error) {
	if !slices.Contains(argv, "collect") {
		res, err := g.Transport.Exec(ctx, argv, stdin)
		if err == nil {
			_, err = w.Write(res.Stdout)
			res.Stdout = nil
		}
		return res, err
	}
	var req wire.CollectRequest
	if err := json.Unmarshal(stdin, &req); err != nil {
		return nodes.Result{}, err
	}
	tw := tar.NewWriter(w)
	for i, it := range req.Attempts {
		prefix, log := strconv.Itoa(i), filepath.Join(it.Dir, "task.log")
		if g.lying {
			if err := g.lie(tw, prefix, log, growLog(g.t, log, &g.grown)); err != nil {
				return nodes.Result{}, err
			}
			continue
		}
		a := collect.Open(it)
		if g.cut > 0 {
			cutLog(g.t, log, g.cut, &g.grown)
		} else {
			growLog(g.t, log, &g.grown)
		}
		if err := a.Send(tw, prefix); err != nil {
			return nodes.Result{}, err
		}
	}
	return nodes.Result{}, tw.Close()
}

// lie writes an attempt whose head announces a task.log of size bytes,
// then sends the one at p whole.
func (g *growingStream) lie(tw *tar.Writer, prefix, p string, size int64) error {
	log, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	head := headOf(wire.CollectHead{Found: true, Log: wire.CollectSent, LogSize: size, Output: wire.CollectMissing})
	for _, e := range []struct{ name, body string }{{wire.CollectHeadName, head}, {"task.log", string(log)}, {wire.CollectEndName, "{}"}} {
		if err := tw.WriteHeader(&tar.Header{Name: prefix + "/" + e.name, Mode: 0o644, Size: int64(len(e.body))}); err != nil {
			return err
		}
		if _, err := io.WriteString(tw, e.body); err != nil {
			return err
		}
	}
	return nil
}

// TestCollectTaskLogGrownAfterItWasRead: S01's task.log (100 KiB) grows by 1 MiB
// after the node read its size for the collection (a process the task
// left behind still writing to it, which an unconfined task may do), with
// 512 KiB of room on the controller. A node's collect stream (the
// wrapper's code) and a local node's copy take the log as it was read:
// collected, no try counted, a warning saying by how much it grew and
// where the rest is on the node. Both sent the log as it was then, drew
// past what the attempt announced and claimed, and counted a try, "not
// enough free space", as if the node had lied. A node that does send
// more than its head announced still counts its try.
func TestCollectTaskLogGrownAfterItWasRead(t *testing.T) {
	for _, tc := range []struct {
		name   string
		stream bool
		lying  bool
	}{
		{"a local node's copy", false, false},
		{"a node's collect stream", true, false},
		{"a node sending more than its head announced", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, "", shellProject(map[string]string{"S01-chatty.md": "head -c 102400 /dev/zero | tr '\\0' x\n"}))
			nodeLog := filepath.Join(h.work, "p", "tasks", "S01", "task.log")
			var grown sync.Once
			var read int64 // the size of the node's task.log before it grew
			var tr nodes.Transport = &shapedTransport{Local: nodes.NewLocal(), get: func(p string, w io.Writer) (io.Writer, error) {
				if filepath.Base(p) == "task.log" {
					read = growLog(t, p, &grown)
				}
				return nil, nil
			}}
			if tc.stream {
				tr = &growingStream{Transport: nodes.NewLocal(), t: t, lying: tc.lying}
			}
			h.ctl = New(Options{Home: h.home, Config: h.cfg, Store: h.st, Transports: map[string]nodes.Transport{"local": tr},
				Wrappers: wrappers, Now: h.clock.Now, Jitter: func() float64 { return 0 }})
			free := diskFree
			diskFree = func(string) (int64, error) { return collectFreeMargin + 512<<10, nil }
			t.Cleanup(func() { diskFree = free })

			h.tickUntil("S01 to be collected, or its collection to fail", func() bool {
				return h.collected("S01") || len(taskEvents(h, "collect_failed", "S01")) > 0
			})
			failed := taskEvents(h, "collect_failed", "S01")
			if tc.lying {
				if len(failed) != 1 || !strings.Contains(failed[0].Message, "not enough free space") {
					t.Errorf("collect_failed %+v, want a try saying not enough free space", failed)
				}
				return
			}
			if len(failed) != 0 {
				t.Fatalf("the collection counted a try: %+v", failed)
			}
			onNode, err := os.ReadFile(nodeLog)
			if err != nil {
				t.Fatal(err)
			}
			if tc.stream {
				read = int64(len(onNode)) - logGrowth
			}
			got, err := os.ReadFile(filepath.Join(home.RunsDir(h.home, "p"), "S01", "task.log"))
			if err != nil || int64(len(got)) != read || !bytes.HasPrefix(onNode, got) || read < 100<<10 {
				t.Errorf("collected task.log of %d bytes (%v), want the node's first %d (it has %d)", len(got), err, read, len(onNode))
			}
			ws := taskEvents(h, "warning", "S01")
			want := fmt.Sprintf("task.log grew by %d bytes after it was read", logGrowth)
			if len(ws) != 1 || !strings.Contains(ws[0].Message, want) || !strings.Contains(ws[0].Message, "the rest stays on node local at "+nodeLog) {
				t.Errorf("warnings %+v, want one saying %q and where the rest is", ws, want)
			}
		})
	}
}

// changingLogNode is a node (local, or a collect stream of the wrapper's
// code: stream) whose task.log grows by logGrowth, or is cut by cut
// bytes, after its size was read for its collection.
func changingLogNode(t *testing.T, stream bool, cut int64) nodes.Transport {
	if stream {
		return &growingStream{Transport: nodes.NewLocal(), t: t, cut: cut}
	}
	var once sync.Once
	return &shapedTransport{Local: nodes.NewLocal(), get: func(p string, w io.Writer) (io.Writer, error) {
		switch {
		case filepath.Base(p) != "task.log":
		case cut > 0:
			cutLog(t, p, cut, &once)
		default:
			growLog(t, p, &once)
		}
		return nil, nil
	}}
}

// onNodes names the two ways a node's files are collected.
var onNodes = map[bool]string{false: "a local node's copy", true: "a node's collect stream"}

// TestLogGrewWarningKeptWhenOutputRefused: S01's output/ is over
// collect_max_files (refused: the task fails, its task.log collected all
// the same) and its task.log grows after its size was read. The log is
// collected as read, and the warning saying it grew is recorded. It was
// dropped: the refusal returned before the warnings were added.
func TestLogGrewWarningKeptWhenOutputRefused(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(onNodes[stream], func(t *testing.T) {
			yaml := strings.Replace(fastYAML, "  max_retries: 1\n", "  max_retries: 1\n  collect_max_files: 5\n", 1)
			h := newHarness(t, yaml, shellProject(map[string]string{
				"S01-many.md": "head -c 102400 /dev/zero | tr '\\0' x; for i in $(seq 1 6); do echo $i > f$i; done\n"}))
			h.ctl = New(Options{Home: h.home, Config: h.cfg, Store: h.st, Transports: map[string]nodes.Transport{"local": changingLogNode(t, stream, 0)},
				Wrappers: wrappers, Now: h.clock.Now, Jitter: func() float64 { return 0 }})
			h.tickUntil("S01 to fail", func() bool { return h.task("S01").Status == domain.Failed })
			if tk := h.task("S01"); !strings.Contains(tk.Error, "collect_max_files") {
				t.Fatalf("S01 failed with %q, want over collect_max_files", tk.Error)
			}
			got, err := os.ReadFile(filepath.Join(home.RunsDir(h.home, "p"), "S01", "task.log"))
			if err != nil || len(got) != 102400 {
				t.Errorf("collected task.log of %d bytes (%v), want the 102400 read", len(got), err)
			}
			ws := taskEvents(h, "warning", "S01")
			want := fmt.Sprintf("task.log grew by %d bytes after it was read", logGrowth)
			if len(ws) != 1 || !strings.Contains(ws[0].Message, want) {
				t.Errorf("warnings %+v, want one saying %q", ws, want)
			}
		})
	}
}

// rotatingWriter renames the node's task.log at p away and makes a new
// empty one on its first Write (a log rotation), after Get opened the
// old one.
type rotatingWriter struct {
	w    io.Writer
	p    string
	once sync.Once
	t    *testing.T
}

func (r *rotatingWriter) Write(b []byte) (int, error) {
	r.once.Do(func() {
		if err := os.Rename(r.p, r.p+".1"); err != nil {
			r.t.Error(err)
		}
		if err := os.WriteFile(r.p, nil, 0o644); err != nil {
			r.t.Error(err)
		}
	})
	return r.w.Write(b)
}

// TestCollectLocalLogGrewThenRotated: a local node's task.log grows by
// 1 MiB after its size was read, and is rotated while it is copied, so
// that reading its size again shows no growth: the warning says it grew
// by at least what the copy was offered past the size read. It said "grew
// by 1 bytes" (a placeholder kept when the second read showed no growth).
func TestCollectLocalLogGrewThenRotated(t *testing.T) {
	h := newHarness(t, "", shellProject(map[string]string{"S01-chatty.md": "head -c 102400 /dev/zero | tr '\\0' x\n"}))
	var grown, rotated sync.Once
	tr := &shapedTransport{Local: nodes.NewLocal(), get: func(p string, w io.Writer) (io.Writer, error) {
		if filepath.Base(p) != "task.log" {
			return nil, nil
		}
		growLog(t, p, &grown)
		var out io.Writer
		rotated.Do(func() { out = &rotatingWriter{w: w, p: p, t: t} })
		return out, nil
	}}
	h.ctl = New(Options{Home: h.home, Config: h.cfg, Store: h.st, Transports: map[string]nodes.Transport{"local": tr},
		Wrappers: wrappers, Now: h.clock.Now, Jitter: func() float64 { return 0 }})
	h.tickUntil("S01 to be collected", func() bool { return h.collected("S01") })
	ws := taskEvents(h, "warning", "S01")
	var by int64
	if len(ws) == 1 {
		if m := regexp.MustCompile(`grew by at least (\d+) bytes`).FindStringSubmatch(ws[0].Message); m != nil {
			by, _ = strconv.ParseInt(m[1], 10, 64)
		}
	}
	if by <= 1 || by > logGrowth {
		t.Errorf("warnings %+v, want one saying task.log grew by at least N bytes, 1 < N <= %d", ws, logGrowth)
	}
}

// TestCollectTaskLogShrankAfterItWasRead: S01's task.log (100 KiB) is
// cut by 1000 bytes after its size was read for its collection (on the
// node, truncated): what it held when it was copied is collected, no try
// counted, and a warning says it shrank and by how much. It was collected
// short and nothing said so.
func TestCollectTaskLogShrankAfterItWasRead(t *testing.T) {
	const cut = 1000
	for _, stream := range []bool{false, true} {
		t.Run(onNodes[stream], func(t *testing.T) {
			h := newHarness(t, "", shellProject(map[string]string{"S01-chatty.md": "head -c 102400 /dev/zero | tr '\\0' x\n"}))
			h.ctl = New(Options{Home: h.home, Config: h.cfg, Store: h.st, Transports: map[string]nodes.Transport{"local": changingLogNode(t, stream, cut)},
				Wrappers: wrappers, Now: h.clock.Now, Jitter: func() float64 { return 0 }})
			h.tickUntil("S01 to be collected, or its collection to fail", func() bool {
				return h.collected("S01") || len(taskEvents(h, "collect_failed", "S01")) > 0
			})
			if failed := taskEvents(h, "collect_failed", "S01"); len(failed) != 0 {
				t.Fatalf("the collection counted a try: %+v", failed)
			}
			onNode, err := os.ReadFile(filepath.Join(h.work, "p", "tasks", "S01", "task.log"))
			if err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(filepath.Join(home.RunsDir(h.home, "p"), "S01", "task.log"))
			if err != nil || !bytes.Equal(got, onNode) {
				t.Errorf("collected task.log of %d bytes (%v), want the node's %d", len(got), err, len(onNode))
			}
			ws := taskEvents(h, "warning", "S01")
			want := fmt.Sprintf("task.log shrank by %d bytes after its size was read", cut)
			if len(ws) != 1 || !strings.Contains(ws[0].Message, want) {
				t.Errorf("warnings %+v, want one saying %q", ws, want)
			}
		})
	}
}
