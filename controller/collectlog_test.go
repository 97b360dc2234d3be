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
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

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
		growLog(g.t, log, &g.grown)
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
