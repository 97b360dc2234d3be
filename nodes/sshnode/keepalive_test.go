package sshnode_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"path/filepath"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/internal/sshdtest"
	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/nodes/sshnode"
)

func TestKeepaliveFor(t *testing.T) {
	for _, tc := range []struct {
		offline, want time.Duration
	}{
		{10 * time.Second, 10 * time.Second / 3},
		{2 * time.Second, 2 * time.Second / 3},
		{5 * time.Minute, sshnode.DefaultKeepalive},
		{0, 100 * time.Millisecond},
	} {
		if got := sshnode.KeepaliveFor(tc.offline); got != tc.want {
			t.Errorf("KeepaliveFor(%s) = %s, want %s", tc.offline, got, tc.want)
		}
	}
}

// TestSSHKeepaliveDropsAFrozenNode: a node frozen whole (sshd and the
// processes of its connection stopped, the TCP connection open) under a
// stream that has no deadline, as the controller's status stream has none.
// Three keepalive intervals without a byte drop the connection: the stream
// ends at once, unreachable, and the transport says the node was given up
// and how long it has been silent. Before, the stream waited for ever.
// On a quiet live connection the keepalives are answered and nothing is
// dropped.
func TestSSHKeepaliveDropsAFrozenNode(t *testing.T) {
	sshdtest.Require(t)
	c := sshdtest.NewClient(t)
	s := c.StartServer(t, "frozen")
	c.Trust(t, s)
	const every = 200 * time.Millisecond
	tr := newSSH(t, c, target(c, s), func(cfg *sshnode.Config) { cfg.Keepalive = every })
	if _, err := tr.Exec(t.Context(), []string{"true"}, nil); err != nil {
		t.Fatal(err)
	}
	// Quiet for five intervals: answered, kept.
	for end := time.Now().Add(5 * every); time.Now().Before(end); {
		if since, gaveUp := tr.Silence(); gaveUp || since >= 3*every {
			t.Fatalf("a live quiet node: silent for %s, given up %v", since, gaveUp)
		}
		time.Sleep(every / 4) // sampling the silence, not waiting for an event
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	began := make(chan struct{})
	ended := make(chan error, 1)
	go func() {
		ended <- tr.Stream(ctx, []string{"sh", "-c", "echo up; exec sleep 600"}, func([]byte) bool {
			close(began)
			return true
		})
	}()
	<-began
	s.PauseAll(t)
	frozeAt := time.Now()
	err := <-ended
	took := time.Since(frozeAt)
	s.Resume(t)
	if !errors.Is(err, nodes.ErrUnreachable) || ctx.Err() != nil {
		t.Fatalf("stream on a frozen node ended with %v after %s, want unreachable before its deadline", err, took)
	}
	if took > 3*every+2*time.Second {
		t.Errorf("the frozen node's connection was dropped after %s, want about %s", took, 3*every)
	}
	since, gaveUp := tr.Silence()
	if !gaveUp || since < 3*every {
		t.Errorf("Silence() = %s, %v after the drop, want at least %s and given up", since, gaveUp, 3*every)
	}
	// Back: a new connection, no longer given up.
	if _, err := tr.Exec(t.Context(), []string{"true"}, nil); err != nil {
		t.Fatalf("after resume: %v", err)
	}
	if _, gaveUp := tr.Silence(); gaveUp {
		t.Error("still given up on a new connection")
	}
}

// slowReader gives n chunks of size bytes, one every gap.
type slowReader struct {
	n, size int
	gap     time.Duration
}

func (r *slowReader) Read(p []byte) (int, error) {
	if r.n == 0 {
		return 0, io.EOF
	}
	time.Sleep(r.gap) // the pace of a slow link, not a wait for state
	r.n--
	k := min(r.size, len(p))
	for i := range p[:k] {
		p[i] = 'x'
	}
	return k, nil
}

// TestSSHLongTransferIsNotCut: transfers on a live connection that take
// many keepalive intervals — a slow upload (3 s, 15× the interval) and a
// large download, neither with a deadline — are not cut: every byte from
// the node counts as its answer, and no call has a fixed deadline.
func TestSSHLongTransferIsNotCut(t *testing.T) {
	sshdtest.Require(t)
	c := sshdtest.NewClient(t)
	s := c.StartServer(t, "long")
	c.Trust(t, s)
	const every = 200 * time.Millisecond
	tr := newSSH(t, c, target(c, s), func(cfg *sshnode.Config) { cfg.Keepalive = every })
	slow := filepath.Join(s.WorkDir, "slow")
	r := &slowReader{n: 60, size: 4 << 10, gap: 50 * time.Millisecond}
	if err := tr.Put(t.Context(), slow, r, 0o600); err != nil {
		t.Fatalf("slow upload: %v", err)
	}
	big := filepath.Join(s.WorkDir, "big")
	const size = 64 << 20
	if err := tr.Put(t.Context(), big, io.LimitReader(zeros{}, size), 0o600); err != nil {
		t.Fatalf("large upload: %v", err)
	}
	var got countWriter
	if err := tr.Get(t.Context(), big, &got); err != nil || got != size {
		t.Fatalf("large download: %d bytes, %v", got, err)
	}
	var b bytes.Buffer
	if err := tr.Get(t.Context(), slow, &b); err != nil || b.Len() != 60*4<<10 {
		t.Fatalf("slow file: %d bytes, %v", b.Len(), err)
	}
	if _, gaveUp := tr.Silence(); gaveUp {
		t.Error("a live node given up during transfers")
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

type countWriter int64

func (w *countWriter) Write(p []byte) (int, error) {
	*w += countWriter(len(p))
	return len(p), nil
}
