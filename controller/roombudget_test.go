package controller

import (
	"errors"
	"fmt"
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
// again, the free space is read once however many draw, and a share
// (claimed whole) is drawn from first, then its round, and gives back
// what it did not use.
func TestRoomBudget(t *testing.T) {
	// op acts on the round (on 0) or on share on of those claimed so far
	// (1, 2...): draws, gives or claims n, or releases.
	type op struct {
		on            int
		draw, give, n int64
		claim, rel    bool
		ok            bool
	}
	const m = collectFreeMargin
	broken := errors.New("statfs: no such device")
	for _, tc := range []struct {
		name string
		free int64
		err  error
		ops  []op
		left int64
	}{
		{"two draws within the room", m + 100, nil, []op{{draw: 60, ok: true}, {draw: 40, ok: true}}, 0},
		{"a draw past what is left fails and takes nothing", m + 100, nil, []op{{draw: 60, ok: true}, {draw: 41}, {draw: 40, ok: true}}, 0},
		{"what is given back is drawn again", m + 100, nil, []op{{draw: 100, ok: true}, {draw: 1}, {give: 30}, {draw: 30, ok: true}}, 0},
		{"free under the margin leaves no room", m - 10, nil, []op{{draw: 1}, {draw: 0, ok: true}}, 0},
		{"a free space not read leaves none", 0, broken, []op{{draw: 0}, {draw: 1}, {claim: true, n: 0}}, 0},
		{"a negative draw is refused", m + 5, nil, []op{{draw: -5}}, 5},
		{"a second claim past what is left is refused whole", m + 100, nil, []op{{claim: true, n: 60, ok: true}, {claim: true, n: 60}, {on: 1, draw: 60, ok: true}}, 40},
		{"a share draws past itself from its round", m + 100, nil, []op{{claim: true, n: 10, ok: true}, {on: 1, draw: 8, ok: true}, {on: 1, draw: 5, ok: true}, {on: 1, rel: true}}, 87},
		{"a share past itself and its round is refused", m + 100, nil, []op{{claim: true, n: 10, ok: true}, {draw: 85, ok: true}, {on: 1, draw: 16}, {on: 1, draw: 15, ok: true}}, 0},
		{"a release gives back what the share did not use", m + 100, nil, []op{{claim: true, n: 50, ok: true}, {on: 1, draw: 20, ok: true}, {on: 1, give: 5}, {on: 1, rel: true}, {on: 1, rel: true}}, 85},
		{"a round's release keeps its room", m + 100, nil, []op{{draw: 30, ok: true}, {rel: true}}, 70},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reads := 0
			b := newRoomBudget(func() (int64, error) { reads++; return tc.free, tc.err })
			budgets := []*roomBudget{b}
			for i, o := range tc.ops {
				on := budgets[o.on]
				switch {
				case o.give > 0:
					on.give(o.give)
				case o.rel:
					on.release()
				case o.claim:
					share, ok := on.claim(o.n)
					if ok != o.ok {
						t.Fatalf("op %d: claim(%d) = %v, want %v", i, o.n, ok, o.ok)
					}
					if ok {
						budgets = append(budgets, share)
					}
				default:
					if got := on.draw(o.draw); got != o.ok {
						t.Errorf("op %d: draw(%d) = %v, want %v", i, o.draw, got, o.ok)
					}
				}
			}
			if got := b.remaining(); got != tc.left {
				t.Errorf("left %d, want %d", got, tc.left)
			}
			for i, share := range budgets[1:] {
				if got, want := share.remaining(), share.left+b.remaining(); got != want {
					t.Errorf("share %d may draw %d, want %d (its own and its round's)", i+1, got, want)
				}
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

// TestCollectRoundSharesTheRoom: two attempts whose output/s each fit in
// the room (1 MiB past the margin) but not together are collected in one
// tick, in one node's stream, in two nodes' streams side by side, or file
// by file from local nodes: what is written stays within the room, one is
// refused as not enough free space (tried again), and a later tick with
// room collects it. Each attempt used to count from its own reading of
// the free space (the same, here), and the two wrote 1.2 MiB.
func TestCollectRoundSharesTheRoom(t *testing.T) {
	for _, tc := range []struct {
		name         string
		ssh          bool
		nodes, slots int
	}{
		{"two attempts in one stream", true, 1, 2},
		{"one attempt on each of two nodes' streams", true, 2, 1},
		{"two attempts on one local node", false, 1, 2},
		{"one attempt on each of two local nodes", false, 2, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gate := filepath.Join(t.TempDir(), "go")
			wait := fmt.Sprintf("while [ ! -e '%s' ]; do sleep 0.05; done\n", gate)
			big := fmt.Sprintf("head -c %d /dev/zero > big.bin\n", 600<<10)
			specs := map[string]string{"S01-a.md": wait + big, "S02-b.md": wait + big}
			if !tc.ssh {
				h, works := localNodesHarness(t, tc.nodes, tc.slots, specs)
				collectsWithinTheRoom(t, h, works, gate, nil)
				return
			}
			h, counted, servers := sshNodesHarness(t, tc.nodes, tc.slots, specs)
			var works []string
			for _, s := range servers {
				works = append(works, s.WorkDir)
			}
			collectsWithinTheRoom(t, h, works, gate, func() int {
				streams := 0
				for _, c := range counted {
					c.mu.Lock()
					for _, attempts := range c.collects {
						if len(attempts) == 2/tc.nodes {
							streams++
						}
					}
					c.collects = nil
					c.mu.Unlock()
				}
				return streams
			})
		})
	}
}

// localNodesHarness is a harness of count local nodes (n, n2...) of slots
// each, unsandboxed, and their work_dirs.
func localNodesHarness(t *testing.T, count, slots int, specs map[string]string) (*harness, []string) {
	yaml := "controller:\n  ssh_connect_timeout: 1s\nnodes:\n"
	for i := range count {
		yaml += fmt.Sprintf("  - name: %s\n    slots: %d\n    work_dir: WORK/%s\n", nodeName(i), slots, nodeName(i))
	}
	h := newHarness(t, unsandboxed(yaml, "the tasks wait for a file of the test outside their workspace"), shellProject(specs))
	var works []string
	for i := range count {
		works = append(works, filepath.Join(h.work, nodeName(i)))
	}
	return h, works
}

// collectsWithinTheRoom runs S01 and S02 of h (on the nodes of work_dirs
// works) until both wait for gate, lets both end, and collects them in one
// tick with 1 MiB of room. streams, for SSH nodes, takes how many collect
// streams of 2/len(works) attempts were asked since it last did.
func collectsWithinTheRoom(t *testing.T, h *harness, works []string, gate string, streams func() int) {
	h.tickUntil("the two to run", func() bool {
		return h.task("S01").Status == domain.Running && h.task("S02").Status == domain.Running
	})
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	nodes := map[string]bool{}
	for _, id := range []string{"S01", "S02"} {
		for _, w := range works {
			if _, err := os.Stat(filepath.Join(w, "p", "tasks", id)); err == nil {
				waitEnded(t, w, id)
				nodes[w] = true
			}
		}
	}
	if len(nodes) != len(works) {
		t.Fatalf("the two ran on %d nodes, want %d", len(nodes), len(works))
	}
	if streams != nil {
		streams() // what the ticks so far asked
	}
	const room = 1 << 20
	free := diskFree
	diskFree = func(string) (int64, error) { return collectFreeMargin + room, nil }
	h.tick()
	diskFree = free
	if streams != nil {
		if n := streams(); n != len(works) {
			t.Fatalf("%d collect streams of %d attempts, want %d", n, 2/len(works), len(works))
		}
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
		if fi, err := os.Stat(filepath.Join(runs, id, "output", "big.bin")); err != nil || fi.Size() != 600<<10 {
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
