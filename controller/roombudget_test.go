package controller

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/home"
)

// fixedRoom is a round's budget with room bytes to spare past the margin.
func fixedRoom(room int64) *roomBudget {
	return newRoomBudget(func() (int64, error) { return room + collectFreeMargin, nil })
}

// TestRoomBudget: draws are all or none, what is given back may be drawn
// again, and the free space is read once however many draw.
func TestRoomBudget(t *testing.T) {
	type op struct {
		draw, give int64
		ok         bool
	}
	broken := errors.New("statfs: no such device")
	for _, tc := range []struct {
		name string
		free int64
		err  error
		ops  []op
		left int64
	}{
		{"two draws within the room", collectFreeMargin + 100, nil, []op{{draw: 60, ok: true}, {draw: 40, ok: true}}, 0},
		{"a draw past what is left fails and takes nothing", collectFreeMargin + 100, nil, []op{{draw: 60, ok: true}, {draw: 41}, {draw: 40, ok: true}}, 0},
		{"what is given back is drawn again", collectFreeMargin + 100, nil, []op{{draw: 100, ok: true}, {draw: 1}, {give: 30}, {draw: 30, ok: true}}, 0},
		{"free under the margin leaves no room", collectFreeMargin - 10, nil, []op{{draw: 1}, {draw: 0, ok: true}}, 0},
		{"a free space not read leaves none", 0, broken, []op{{draw: 0}, {draw: 1}}, 0},
		{"a negative draw is refused", collectFreeMargin + 5, nil, []op{{draw: -5}}, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reads := 0
			b := newRoomBudget(func() (int64, error) { reads++; return tc.free, tc.err })
			for i, o := range tc.ops {
				if o.give > 0 {
					b.give(o.give)
					continue
				}
				if got := b.draw(o.draw); got != o.ok {
					t.Errorf("op %d: draw(%d) = %v, want %v", i, o.draw, got, o.ok)
				}
			}
			if got := b.remaining(); got != tc.left {
				t.Errorf("left %d, want %d", got, tc.left)
			}
			if _, err := b.figure(); !errors.Is(err, tc.err) {
				t.Errorf("figure: %v, want %v", err, tc.err)
			}
			if reads != 1 {
				t.Errorf("the free space read %d times, want once", reads)
			}
		})
	}
}

// TestRoomReader: an entry is read chunk by chunk from the room: one that
// fits is read whole, to the byte; one that does not stops with
// errRoomSpent having drawn no more than the room, and undo gives it back.
func TestRoomReader(t *testing.T) {
	for _, tc := range []struct {
		size, room int64
		err        error
	}{
		{size: 100 << 10, room: 100 << 10},
		{size: 100 << 10, room: 1 << 20},
		{size: 100 << 10, room: 99 << 10, err: errRoomSpent},
		{size: 0, room: 0},
	} {
		t.Run(fmt.Sprintf("%d in %d", tc.size, tc.room), func(t *testing.T) {
			b := fixedRoom(tc.room)
			rr := &roomReader{r: io.LimitReader(zeros{}, tc.size), room: b, size: tc.size}
			n, err := io.CopyBuffer(io.Discard, rr, make([]byte, 32<<10))
			if !errors.Is(err, tc.err) {
				t.Fatalf("read %d bytes: %v, want %v", n, err, tc.err)
			}
			if drawn := tc.room - b.remaining(); drawn != n || n > tc.room {
				t.Errorf("read %d bytes, drew %d of a room of %d", n, drawn, tc.room)
			}
			if err == nil && n != tc.size {
				t.Errorf("read %d bytes of %d", n, tc.size)
			}
			rr.undo()
			if b.remaining() != tc.room {
				t.Errorf("undo left %d, want the room %d back", b.remaining(), tc.room)
			}
		})
	}
}

// TestCollectStreamsShareTheRoom: two attempts whose output/s each fit in
// the room (1 MiB past the margin) but not together are collected in one
// tick, in one node's stream or in two nodes' streams side by side: what
// is written stays within the room, one is refused as not enough free
// space (tried again), and a later tick with room collects it. Each
// attempt used to count from the same figure, and wrote 1.2 MiB.
func TestCollectStreamsShareTheRoom(t *testing.T) {
	for _, tc := range []struct {
		name         string
		nodes, slots int
	}{
		{"two attempts in one stream", 1, 2},
		{"one attempt on each of two nodes", 2, 1},
	} {
		t.Run(tc.name, func(t *testing.T) { collectsWithinTheRoom(t, tc.nodes, tc.slots) })
	}
}

func collectsWithinTheRoom(t *testing.T, count, slots int) {
	gate := filepath.Join(t.TempDir(), "go")
	wait := fmt.Sprintf("while [ ! -e '%s' ]; do sleep 0.05; done\n", gate)
	const each = 600 << 10
	big := fmt.Sprintf("head -c %d /dev/zero > big.bin\n", each)
	h, counted, servers := sshNodesHarness(t, count, slots, map[string]string{"S01-a.md": wait + big, "S02-b.md": wait + big})
	h.tickUntil("the two to run", func() bool {
		return h.task("S01").Status == domain.Running && h.task("S02").Status == domain.Running
	})
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"S01", "S02"} {
		for _, s := range servers {
			if _, err := os.Stat(filepath.Join(s.WorkDir, "p", "tasks", id)); err == nil {
				waitEnded(t, s.WorkDir, id)
			}
		}
	}
	const room = 1 << 20
	free := diskFree
	diskFree = func(string) (int64, error) { return collectFreeMargin + room, nil }
	for _, c := range counted {
		c.reset()
	}
	h.tick()
	diskFree = free
	streams := 0
	for _, c := range counted {
		c.mu.Lock()
		for _, attempts := range c.collects {
			streams++
			if len(attempts) != 2/count {
				t.Errorf("a stream of %d attempts, want %d", len(attempts), 2/count)
			}
		}
		c.mu.Unlock()
	}
	if streams != count {
		t.Fatalf("%d collect streams, want %d", streams, count)
	}
	runs := home.RunsDir(h.home, "p")
	if n := writtenUnder(t, runs); n > room {
		t.Errorf("%d bytes written under runs/ with a room of %d", n, room)
	}
	if h.collected("S01") == h.collected("S02") {
		t.Fatalf("collected S01 %v, S02 %v: want one of the two", h.collected("S01"), h.collected("S02"))
	}
	failed := h.events("collect_failed")
	if len(failed) != 1 || !strings.Contains(failed[0].Message, "not enough free space") {
		t.Fatalf("collect_failed %+v, want one saying not enough free space", failed)
	}
	h.clock.Advance(collectRetryWait)
	h.tickUntil("both to be collected once there is room", func() bool { return h.collected("S01") && h.collected("S02") })
	for _, id := range []string{"S01", "S02"} {
		if fi, err := os.Stat(filepath.Join(runs, id, "output", "big.bin")); err != nil || fi.Size() != each {
			t.Errorf("%s output/big.bin: %v %v", id, fi, err)
		}
		if tk := h.task(id); tk.Status != domain.Completed {
			t.Errorf("%s %s (%s), want completed", id, tk.Status, tk.Error)
		}
	}
}

// writtenUnder is the bytes of the files under dir, attempts/ left out
// (its task.logs are hard links to the task's).
func writtenUnder(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == "attempts" {
			return filepath.SkipDir
		}
		if d.Type().IsRegular() {
			fi, err := d.Info()
			if err != nil {
				return err
			}
			n += fi.Size()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}
