package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/dispatch-tool/dispatch/home"
	"github.com/dispatch-tool/dispatch/internal/sshdtest"
	"github.com/dispatch-tool/dispatch/nodes"
)

// collectConvs counts a countingSSH's collect conversations and breaks
// them as a test asks.
type collectConvs struct {
	opened, closed atomic.Int64
	// cutAt, when > 0, cuts the next answer after that many bytes, as a
	// connection that drops mid-answer does.
	cutAt atomic.Int64
	// notSent fails the next request unwritten, as a session gone since
	// the last tick does.
	notSent atomic.Bool
	// older opens them with a flag the wrapper does not know: it answers
	// as a wrapper without `collect --serve` does.
	older atomic.Bool
}

func (c *countingSSH) Converse(ctx context.Context, argv []string) (nodes.Conversation, error) {
	if !slices.Contains(argv, "collect") {
		return c.SSH.Converse(ctx, argv)
	}
	c.convs.opened.Add(1)
	if c.convs.older.Load() {
		argv = append(slices.Clone(argv[:len(argv)-1]), "--serve-not-known")
	}
	conv, err := c.SSH.Converse(ctx, argv)
	if err != nil {
		return nil, err
	}
	return &countedConv{Conversation: conv, c: c}, nil
}

// countedConv is a collect conversation of a countingSSH.
type countedConv struct {
	nodes.Conversation
	c    *countingSSH
	once sync.Once
}

func (cc *countedConv) Exchange(ctx context.Context, req []byte, read func(io.Reader) error) error {
	if cc.c.convs.notSent.CompareAndSwap(true, false) {
		return fmt.Errorf("write a request: %w: %w", nodes.ErrNotSent, io.ErrClosedPipe)
	}
	cc.c.recordCollect(req)
	if at := cc.c.convs.cutAt.Swap(0); at > 0 {
		whole := read
		read = func(r io.Reader) error { return whole(&cutReader{r: r, left: at}) }
	}
	return cc.Conversation.Exchange(ctx, req, read)
}

func (cc *countedConv) Close() error {
	cc.once.Do(func() { cc.c.convs.closed.Add(1) })
	return cc.Conversation.Close()
}

// cutReader reads left bytes of r, then fails as a dropped connection.
type cutReader struct {
	r    io.Reader
	left int64
}

func (c *cutReader) Read(p []byte) (int, error) {
	if c.left <= 0 {
		return 0, io.ErrUnexpectedEOF
	}
	n, err := c.r.Read(p[:min(int64(len(p)), c.left)])
	c.left -= int64(n)
	return n, err
}

// gatedTasks are specs S01.. each ending when the test creates its gate
// file (gates[i] for the i-th), after running body.
func gatedTasks(t *testing.T, bodies ...string) (map[string]string, []string) {
	dir := t.TempDir()
	specs := map[string]string{}
	var gates []string
	for i, body := range bodies {
		gate := filepath.Join(dir, fmt.Sprint("go", i+1))
		gates = append(gates, gate)
		specs[fmt.Sprintf("S%02d-t.md", i+1)] = fmt.Sprintf("while [ ! -e '%s' ]; do sleep 0.05; done\n%s", gate, body)
	}
	return specs, gates
}

// finish lets task id end (its gate) and waits until it has on the node.
func finish(t *testing.T, s *sshdtest.Server, gate, id string) {
	t.Helper()
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitEnded(t, s.WorkDir, id)
}

// TestCollectOverOneConversation: the collections of a batch that ends over
// four ticks go over one `collect --serve` held open on the node, one
// request a tick, with no `wrapper collect` exec; closing the node's
// executor (reload, Close) closes it.
func TestCollectOverOneConversation(t *testing.T) {
	specs, gates := gatedTasks(t, "echo one > one.txt\n", "echo two\n", "mkdir d; echo 3 > d/three.txt\n", "echo four\n")
	h, counted, s := sshHarness(t, 4, specs)
	ids := []string{"S01", "S02", "S03", "S04"}
	h.tickUntil("the four to run", func() bool {
		return !slices.ContainsFunc(ids, func(id string) bool { return h.task(id).Status != "running" })
	})
	for i, id := range ids {
		finish(t, s, gates[i], id)
		h.tick()
		if !h.collected(id) {
			t.Fatalf("%s not collected in the tick after it ended: %+v", id, h.task(id))
		}
	}
	counted.mu.Lock()
	collects := counted.collects
	counted.mu.Unlock()
	if len(collects) != 4 || counted.execCollects.Load() != 0 || counted.convs.opened.Load() != 1 {
		t.Fatalf("%d collect requests, %d of them execs, over %d conversations; want 4 over one, no exec",
			len(collects), counted.execCollects.Load(), counted.convs.opened.Load())
	}
	if b, _ := os.ReadFile(filepath.Join(home.RunsDir(h.home, "p"), "S03", "output", "d", "three.txt")); string(b) != "3\n" {
		t.Errorf("S03 output/d/three.txt = %q", b)
	}
	h.ctl.nodes["n"].exec.Close()
	if counted.convs.closed.Load() != 1 {
		t.Errorf("the node's executor closed, %d collect conversations closed, want 1", counted.convs.closed.Load())
	}
}

// TestCollectConversationCutMidAnswer: a collect conversation broken in
// the middle of an answer (the connection drops inside an output/ file)
// collects nothing of the attempt it was sending, and is closed; the next
// try opens a new one and collects the attempt whole.
func TestCollectConversationCutMidAnswer(t *testing.T) {
	specs, gates := gatedTasks(t, "echo one > one.txt\n", "yes abcdefgh | head -c 300000 > big.txt\n")
	h, counted, s := sshHarness(t, 2, specs)
	h.tickUntil("the two to run", func() bool { return h.task("S01").Status == "running" && h.task("S02").Status == "running" })
	finish(t, s, gates[0], "S01")
	h.tick()
	if !h.collected("S01") {
		t.Fatalf("S01 not collected: %+v", h.task("S01"))
	}
	counted.convs.cutAt.Store(100_000)
	finish(t, s, gates[1], "S02")
	h.tick()
	out := filepath.Join(home.RunsDir(h.home, "p"), "S02", "output", "big.txt")
	if h.collected("S02") {
		t.Fatal("S02 recorded collected from an answer cut inside its output/")
	}
	if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a part of S02's output/ was placed: %v", err)
	}
	if files, _ := h.st.Files(context.Background(), "p", "S02"); len(files) != 0 {
		t.Fatalf("S02's manifest holds %d files of a cut answer", len(files))
	}
	if counted.convs.closed.Load() != 1 {
		t.Fatalf("%d collect conversations closed after the cut, want 1", counted.convs.closed.Load())
	}
	if evs := h.events("collect_failed"); len(evs) != 1 || !strings.Contains(evs[0].Message, "stopped inside a frame") {
		t.Errorf("collect_failed events %+v, want one saying the answer stopped inside a frame", evs)
	}
	h.clock.Advance(collectRetryWait)
	h.tick()
	if !h.collected("S02") {
		t.Fatalf("S02 not collected on the next try: %+v", h.task("S02"))
	}
	want := sha256.Sum256([]byte(strings.Repeat("abcdefgh\n", 300000/9+1)[:300000]))
	files, _ := h.st.Files(context.Background(), "p", "S02")
	if len(files) != 1 || files[0].Size != 300000 || files[0].SHA256 != hex.EncodeToString(want[:]) {
		t.Errorf("S02's manifest %+v, want big.txt whole", files)
	}
	if counted.convs.opened.Load() != 2 || counted.execCollects.Load() != 0 {
		t.Errorf("%d collect conversations, %d execs; want a new conversation for the next try, no exec",
			counted.convs.opened.Load(), counted.execCollects.Load())
	}
}

// TestCollectConversationFallsBack: a request that could not be written
// on the node's collect conversation is made with an exec in the same
// tick, and the next tick opens a new conversation; a wrapper without
// `collect --serve` (an older one) is collected with an exec from the
// first tick on, and not asked for a conversation again.
func TestCollectConversationFallsBack(t *testing.T) {
	t.Run("not sent", func(t *testing.T) {
		specs, gates := gatedTasks(t, "echo one\n", "echo two\n", "echo three\n")
		h, counted, s := sshHarness(t, 3, specs)
		h.tickUntil("the three to run", func() bool {
			return h.task("S01").Status == "running" && h.task("S02").Status == "running" && h.task("S03").Status == "running"
		})
		for i, id := range []string{"S01", "S02", "S03"} {
			counted.convs.notSent.Store(id == "S02")
			finish(t, s, gates[i], id)
			h.tick()
			if !h.collected(id) {
				t.Fatalf("%s not collected in the tick after it ended: %+v", id, h.task(id))
			}
		}
		if counted.execCollects.Load() != 1 || counted.convs.opened.Load() != 2 {
			t.Errorf("%d collect execs, %d conversations; want the one not sent made with an exec, and a new conversation after it",
				counted.execCollects.Load(), counted.convs.opened.Load())
		}
	})
	t.Run("an older wrapper", func(t *testing.T) {
		specs, gates := gatedTasks(t, "echo one\n", "echo two\n")
		h, counted, s := sshHarness(t, 2, specs)
		counted.convs.older.Store(true)
		h.tickUntil("the two to run", func() bool { return h.task("S01").Status == "running" && h.task("S02").Status == "running" })
		for i, id := range []string{"S01", "S02"} {
			finish(t, s, gates[i], id)
			h.tick()
			if !h.collected(id) {
				t.Fatalf("%s not collected in the tick after it ended: %+v", id, h.task(id))
			}
		}
		if counted.execCollects.Load() != 2 || counted.convs.opened.Load() != 1 {
			t.Errorf("%d collect execs, %d conversations; want each collected with an exec, one conversation tried",
				counted.execCollects.Load(), counted.convs.opened.Load())
		}
	})
}
