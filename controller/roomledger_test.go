package controller

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/home"
	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/store"
	"github.com/dispatch-tool/dispatch/wire"
)

// fixedRoom is an attempt's claim, holding nothing, on a ledger with room
// bytes to spare past the margin.
func fixedRoom(room int64) *roomClaim {
	r := newRoomLedger(func() (int64, error) { return room + collectFreeMargin, nil }).round()
	r.figure()
	return r.open()
}

// TestDecideRoom: a claim is granted within what is left, waits when
// only what others hold is in the way, and is refused as full past both.
func TestDecideRoom(t *testing.T) {
	for _, tc := range []struct {
		name                string
		need, avail, others int64
		want                roomVerdict
	}{
		{"within what is left", 60, 100, 0, roomGranted},
		{"all that is left", 100, 100, 50, roomGranted},
		{"nothing", 0, 0, 0, roomGranted},
		{"past what is left, within what others hold", 120, 100, 50, roomBusy},
		{"past what is left, nothing held", 101, 100, 0, roomFull},
		{"past what is left and held", 151, 100, 50, roomFull},
		{"negative", -1, 100, 50, roomFull},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := decideRoom(tc.need, tc.avail, tc.others); got != tc.want {
				t.Errorf("decideRoom(%d, %d, %d) = %d, want %d", tc.need, tc.avail, tc.others, got, tc.want)
			}
		})
	}
}

// TestRoomLedger: claims are all or none; a claim refused only because of
// what other claims hold waits (errRoomBusy, naming them), past the room
// even without them it is full; a draw takes from its claim, then from the
// room; what is not written stays claimed until the claim is released,
// then goes back to the room; a removed file's bytes come back; and a new
// reading of the free space (the next round) counts what is still held.
func TestRoomLedger(t *testing.T) {
	// op is refresh (free: the margin and n; fail: the read fails), claim
	// n, draw n and write w of it, release, or freed n, on claim c.
	type op struct {
		op   string
		c    int
		n, w int64
		fail bool
		want string // "", "busy" or "full"
	}
	const m = collectFreeMargin
	refresh := func(n int64) op { return op{op: "refresh", n: n} }
	for _, tc := range []struct {
		name        string
		ops         []op
		avail, held int64
		waitFor     roomWait // what the last busy refusal said
	}{
		{"claims within the room", []op{refresh(100), {op: "claim", n: 60}, {op: "claim", c: 1, n: 40}}, 0, 100, roomWait{}},
		{"a claim past what others hold waits", []op{refresh(100), {op: "claim", n: 60}, {op: "claim", c: 1, n: 50, want: "busy"}},
			40, 60, roomWait{need: 50, claims: 1, held: 60}},
		{"a claim past the room even without others is full", []op{refresh(100), {op: "claim", n: 60}, {op: "claim", c: 1, n: 101, want: "full"}}, 40, 60, roomWait{}},
		{"a draw within its claim", []op{refresh(100), {op: "claim", n: 60}, {op: "draw", n: 50, w: 50}}, 40, 10, roomWait{}},
		{"a draw past its claim takes from the room", []op{refresh(100), {op: "claim", n: 10}, {op: "draw", n: 30, w: 30}}, 70, 0, roomWait{}},
		{"a draw past the room that others hold waits", []op{refresh(100), {op: "claim", c: 1, n: 90}, {op: "draw", n: 20, want: "busy"}},
			10, 90, roomWait{need: 20, claims: 1, held: 90}},
		{"what is not written stays claimed until released", []op{refresh(100), {op: "claim", n: 60}, {op: "draw", n: 40, w: 10}, {op: "claim", c: 1, n: 41, want: "busy"}, {op: "release"}},
			90, 0, roomWait{need: 41, claims: 1, held: 50}},
		{"a released claim's room goes to the next", []op{refresh(100), {op: "claim", n: 80}, {op: "claim", c: 1, n: 50, want: "busy"}, {op: "release"}, {op: "claim", c: 1, n: 50}},
			50, 50, roomWait{need: 50, claims: 1, held: 80}},
		{"the next round counts what is still held", []op{refresh(100), {op: "claim", n: 80}, {op: "draw", n: 30, w: 30}, refresh(100), {op: "claim", c: 1, n: 60, want: "busy"}},
			50, 50, roomWait{need: 60, claims: 1, held: 50}},
		{"a removed file's bytes come back", []op{refresh(100), {op: "draw", n: 30, w: 30}, {op: "freed", n: 30}}, 100, 0, roomWait{}},
		{"a discarded claim gives back what it wrote", []op{refresh(100), {op: "claim", n: 60}, {op: "draw", n: 50, w: 50}, {op: "release"}, {op: "discard"}, {op: "claim", c: 1, n: 100}}, 0, 100, roomWait{}},
		{"what is given back once is not again", []op{refresh(100), {op: "draw", n: 30, w: 30}, {op: "freed", n: 20}, {op: "discard"}, {op: "discard"}, {op: "freed", n: 30}}, 100, 0, roomWait{}},
		{"a negative claim is refused", []op{refresh(100), {op: "claim", n: -5, want: "full"}}, 100, 0, roomWait{}},
		{"free space under the margin leaves no room", []op{refresh(-10), {op: "claim", n: 1, want: "full"}}, 0, 0, roomWait{}},
		{"a free space not read leaves none", []op{refresh(100), {op: "refresh", fail: true}, {op: "claim", n: 1, want: "full"}}, 0, 0, roomWait{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var free int64
			var readErr error
			l := newRoomLedger(func() (int64, error) { return free, readErr })
			claims := []*roomClaim{l.round().open(), l.round().open()}
			wait := roomWait{}.err().Error()
			for i, o := range tc.ops {
				c := claims[o.c]
				var err error
				switch o.op {
				case "refresh":
					free, readErr = m+o.n, nil
					if o.fail {
						readErr = errors.New("statfs: no such device")
					}
					if _, err := l.refresh(); !errors.Is(err, readErr) {
						t.Fatalf("op %d: refresh: %v", i, err)
					}
				case "claim":
					err = c.claim(o.n)
				case "draw":
					if err = c.draw(o.n); err == nil {
						c.wrote(o.n, o.w)
					}
				case "release":
					c.release()
				case "freed":
					c.freed(o.n)
				case "discard":
					c.discard()
				}
				got := ""
				switch {
				case errors.Is(err, errRoomBusy):
					got, wait = "busy", err.Error()
				case errors.Is(err, errRoomSpent):
					got = "full"
				case err != nil:
					t.Fatalf("op %d: %v", i, err)
				}
				if got != o.want {
					t.Fatalf("op %d (%s %d on %d): %q, want %q", i, o.op, o.n, o.c, got, o.want)
				}
			}
			if l.avail != tc.avail || l.held != tc.held {
				t.Errorf("avail %d, held %d; want %d, %d", l.avail, l.held, tc.avail, tc.held)
			}
			if want := tc.waitFor.err().Error(); wait != want {
				t.Errorf("the wait said %q, want %q", wait, want)
			}
		})
	}
}

// TestRoomRoundReadsOnce: a round reads the free space once however many
// attempts ask; the next round reads it again.
func TestRoomRoundReadsOnce(t *testing.T) {
	reads := 0
	l := newRoomLedger(func() (int64, error) { reads++; return collectFreeMargin + 100, nil })
	for range 2 {
		r := l.round()
		for range 3 {
			if free, err := r.figure(); err != nil || free != collectFreeMargin+100 {
				t.Fatalf("figure: %d, %v", free, err)
			}
		}
	}
	if reads != 2 {
		t.Errorf("two rounds read the free space %d times, want twice", reads)
	}
}

// TestCollectRoundSharesTheRoom: two attempts whose output/s each fit in
// the room (1 MiB past the margin) but not together are collected in one
// tick, in one node's stream, in two nodes' streams side by side, or file
// by file from local nodes: what is written stays within the room, one is
// refused as not enough free space (tried again; side by side, it may
// instead wait for the room the other still holds, no try counted), and a
// later tick with room collects it. Each attempt used to count from its own reading of
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
	// Refused once the other was written, the disk has no room: a try. On
	// two nodes side by side, the other may still hold its claim: it
	// waits, no try counted.
	failed := h.events("collect_failed")
	var waits []store.Event
	for _, e := range h.events("warning") {
		if strings.Contains(e.Message, "waiting for room") {
			waits = append(waits, e)
		}
	}
	switch {
	case len(failed) == 1 && len(waits) == 0 && strings.Contains(failed[0].Message, "not enough free space"):
	case len(works) > 1 && len(failed) == 0 && len(waits) == 1:
	default:
		t.Fatalf("collect_failed %+v, waits %+v: want one saying not enough free space (or, side by side, one waiting for room)", failed, waits)
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

// TestClaimOfHead: an attempt claims what its head says follows, each
// part no more than the request let the node send, nothing of a part not
// sent or not asked for, nothing below zero.
func TestClaimOfHead(t *testing.T) {
	const limit = 1000
	for _, tc := range []struct {
		name          string
		head          wire.CollectHead
		output        bool
		wantLog, want int64
	}{
		{"both sent", wire.CollectHead{Log: wire.CollectSent, LogSize: 10, Output: wire.CollectSent, Bytes: 20}, true, 10, 20},
		{"a head of a few bytes announcing terabytes", wire.CollectHead{Log: wire.CollectSent, LogSize: 1 << 40, Output: wire.CollectSent, Bytes: 1 << 40}, true, limit, limit},
		{"output/ not asked for", wire.CollectHead{Log: wire.CollectSent, LogSize: 10, Output: wire.CollectSent, Bytes: 20}, false, 10, 0},
		{"parts not sent", wire.CollectHead{Log: wire.CollectOverQuota, LogSize: 10, Output: wire.CollectMissing, Bytes: 20}, true, 0, 0},
		{"below zero", wire.CollectHead{Log: wire.CollectSent, LogSize: -10, Output: wire.CollectSent, Bytes: -20}, true, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if log, out := claimOf(&tc.head, tc.output, limit); log != tc.wantLog || out != tc.want {
				t.Errorf("claimOf = %d, %d; want %d, %d", log, out, tc.wantLog, tc.want)
			}
		})
	}
}

// TestAFailedAttemptGivesBackItsClaim: an attempt whose files fail partway
// through a node's stream (the node's own error after one file) gives back
// at once, not when the stream ends, what it claimed and did not write and
// what it wrote (its files removed): the next attempt of the stream, which
// fits the room only with both given back, claims it and is collected. It
// was refused, the first attempt's claim held until the stream's end, then
// (h-room3) the 300 bytes it wrote and that were removed still counted.
func TestAFailedAttemptGivesBackItsClaim(t *testing.T) {
	l, items := twoItemsInARoom(t, 1000)
	head0 := wire.CollectHead{Found: true, Log: wire.CollectMissing, Output: wire.CollectSent, Files: 2, Bytes: 800}
	head1 := wire.CollectHead{Found: true, Log: wire.CollectSent, LogSize: 900, Output: wire.CollectMissing}
	data := streamOf(t, []entry{{"0/collect.json", 0, headOf(head0)}, {"0/output/a.bin", 0, strings.Repeat("a", 300)},
		{"0/collect.err", 0, "b.bin shrank"},
		{"1/collect.json", 0, headOf(head1)}, {"1/task.log", 0, strings.Repeat("l", 900)}, {"1/collect.end", 0, ""}})
	s := streamReader{items: items, maxFiles: 3, maxBytes: 1 << 20}
	if err := s.read(bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	if err := items[0].err; err == nil || !strings.Contains(err.Error(), "shrank") {
		t.Errorf("attempt 0: %v, want the node's error", err)
	}
	if err := items[1].err; err != nil || !items[1].gotLog || !items[1].ended {
		t.Fatalf("attempt 1, within the room once attempt 0 gave back its claim: %v", err)
	}
	for _, it := range items {
		it.room.release()
	}
	if l.held != 0 || l.avail != 100 {
		t.Errorf("the ledger holds %d, has %d left; want 0 and 100 (900 written, 300 removed)", l.held, l.avail)
	}
	if _, err := os.Stat(items[0].tmp); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the failed attempt's staging directory: %v, want it removed", err)
	}
}

// TestARefusedAttemptGivesBackWhatItWrote (the review's probe): one local
// node, a room of 1 MiB, one round: S01's task.log (500 KiB) is written,
// its output/ (700 KiB) does not fit and its files are removed (a try,
// rightly); S02's output/ of 600 KiB fits the room alone and is collected
// in the same rounds. The ledger was not told of S01's removed task.log
// and refused S02 as full, a try a round, until it failed as collect.
func TestARefusedAttemptGivesBackWhatItWrote(t *testing.T) {
	gate := filepath.Join(t.TempDir(), "go")
	wait := fmt.Sprintf("while [ ! -e '%s' ]; do sleep 0.05; done\n", gate)
	specs := map[string]string{
		"S01-a.md": wait + fmt.Sprintf("yes | head -c %d\nhead -c %d /dev/zero > big.bin\n", 500<<10, 700<<10),
		"S02-b.md": wait + fmt.Sprintf("head -c %d /dev/zero > big.bin\n", 600<<10),
	}
	h, works := localNodesHarness(t, 1, 2, specs)
	h.tickUntil("the two to run", func() bool {
		return h.task("S01").Status == domain.Running && h.task("S02").Status == domain.Running
	})
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitEnded(t, works[0], "S01", "S02")
	free := diskFree
	diskFree = func(string) (int64, error) { return collectFreeMargin + 1<<20, nil }
	t.Cleanup(func() { diskFree = free })
	for range maxCollectTries {
		h.tick()
		h.clock.Advance(collectRetryWait)
	}
	fi, err := os.Stat(filepath.Join(home.RunsDir(h.home, "p"), "S02", "output", "big.bin"))
	if tk := h.task("S02"); tk.Status != domain.Completed || err != nil || fi.Size() != 600<<10 {
		t.Errorf("S02 (600 KiB, room 1 MiB, nothing else on disk): %s %s %q, output/big.bin %v; want it collected", tk.Status, tk.ErrorClass, tk.Error, err)
	}
	if failed := taskEvents(h, "collect_failed", "S02"); len(failed) != 0 {
		t.Errorf("S02's collection failed: %+v", failed)
	}
	if failed := taskEvents(h, "collect_failed", "S01"); len(failed) == 0 || !strings.Contains(failed[0].Message, "not enough free space") {
		t.Errorf("S01 (1.2 MiB, room 1 MiB): %+v, want refused as not enough free space", failed)
	}
}

// TestAStreamMovingOnGivesBackTheClaim: a node's stream that moves on to
// its next attempt without the earlier one's end entry gives back that
// attempt's claim then (the attempt is not whole, collected again): the next attempt, which fits the room
// only without it, is collected. The claim was held until the whole
// stream ended, and the next attempt refused.
func TestAStreamMovingOnGivesBackTheClaim(t *testing.T) {
	l, items := twoItemsInARoom(t, 1000)
	head0 := wire.CollectHead{Found: true, Log: wire.CollectSent, LogSize: 800, Output: wire.CollectMissing}
	head1 := wire.CollectHead{Found: true, Log: wire.CollectSent, LogSize: 600, Output: wire.CollectMissing}
	data := streamOf(t, []entry{{"0/collect.json", 0, headOf(head0)},
		{"1/collect.json", 0, headOf(head1)}, {"1/task.log", 0, strings.Repeat("l", 600)}, {"1/collect.end", 0, ""}})
	s := streamReader{items: items, maxFiles: 3, maxBytes: 1 << 20}
	if err := s.read(bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	if err := items[0].arrived(); err == nil || !strings.Contains(err.Error(), "cut short") {
		t.Errorf("attempt 0: %v, want it not whole", err)
	}
	if err := items[1].err; err != nil || !items[1].gotLog || !items[1].ended {
		t.Fatalf("attempt 1, within the room once attempt 0's claim is given back: %v", err)
	}
	if l.held != 0 || l.avail != 400 {
		t.Errorf("the ledger holds %d, has %d left; want 0 and 400", l.held, l.avail)
	}
}

// TestClaimListedSaysWhatTheDiskHas: a local node's claim refused for
// lack of room names what it needed, what the disk has free and what
// other collections hold of it, so the operator frees enough: it said
// the ledger's room left as what "is free" (64.5 MiB here, with 65 MiB
// free and half a MiB held by another collection).
func TestClaimListedSaysWhatTheDiskHas(t *testing.T) {
	const k = 1 << 10
	for _, tc := range []struct {
		name   string
		held   int64 // what another collection holds
		log    int64
		files  []nodes.FileInfo
		want   []string
		unwant string
	}{
		{"task.log and output/, others holding room", 512 * k, 256 * k, []nodes.FileInfo{{Path: "a", Size: 896 * k}},
			[]string{"task.log and output/ needs 1.1 MiB", "the disk has 65.0 MiB free, other collections in flight hold 0.5 MiB of it", "64.0 MiB must stay free"}, "64.5 MiB"},
		{"output/ alone, nothing else held", 0, 0, []nodes.FileInfo{{Path: "a", Size: 1536 * k}},
			[]string{"output/ needs 1.5 MiB", "the disk has 65.0 MiB free, and 64.0 MiB must stay free"}, "in flight"},
		{"task.log alone", 0, 1536 * k, nil, []string{"task.log needs 1.5 MiB"}, "output/"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &Controller{opts: Options{Home: t.TempDir()}}
			l := newRoomLedger(func() (int64, error) { return collectFreeMargin + 1<<20, nil })
			r := l.round()
			r.figure()
			if err := r.open().claim(tc.held); err != nil {
				t.Fatal(err)
			}
			err := c.claimListed(r.open(), "p", tc.log, tc.files)
			if err == nil || errors.Is(err, errRoomBusy) {
				t.Fatalf("claim: %v, want not enough free space", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%q\n  does not say %q", err, w)
				}
			}
			if strings.Contains(err.Error(), tc.unwant) {
				t.Errorf("%q\n  says %q", err, tc.unwant)
			}
		})
	}
}

// TestRoomWaitsAreDroppedWhenTheAttemptLeaves: the note of an attempt
// waiting for room is forgotten once the attempt is no longer to be
// collected (here: collected, and one the database does not hold): only
// its own collection's outcome removed it, so an attempt that left
// otherwise (its task cancelled and given up, its project no longer
// served) kept its entry for the controller's life.
func TestRoomWaitsAreDroppedWhenTheAttemptLeaves(t *testing.T) {
	h := newHarness(t, "", shellProject(map[string]string{"S01.md": "echo one\n"}))
	h.tickUntil("S01 to be collected", func() bool { return h.collected("S01") })
	for _, key := range []string{collectKey(domain.Attempt{Project: "p", Task: "S01", Attempt: 1}), "p/GONE#1"} {
		h.ctl.roomWaits.Store(key, "collecting the outputs: waiting for room")
	}
	h.tick()
	h.ctl.roomWaits.Range(func(k, _ any) bool {
		t.Errorf("roomWaits still holds %v", k)
		return true
	})
}

// TestClaimDeadlineCutsOnlyWhileOthersWait: a stream past its claim's
// deadline is cut only when some collection waits for room now; with
// none waiting (a slow link, a big output, a wait that ended) the
// deadline starts again, the stream bounded by transfer_idle alone. Every
// claim past 1 MiB/s was cut, and after three tries failed as `collect`.
func TestClaimDeadlineCutsOnlyWhileOthersWait(t *testing.T) {
	for _, tc := range []struct {
		name    string
		waiting bool
	}{
		{"nobody waits for room", false},
		{"a collection waits for room", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			asked := make(chan struct{}, 16)
			cut := make(chan error, 1)
			s := &streamReader{
				bound: func(int64) time.Duration { return 5 * time.Millisecond },
				blocking: func() bool {
					select {
					case asked <- struct{}{}:
					default:
					}
					return tc.waiting
				},
				cut: func(err error) { cut <- err },
			}
			s.arm(100)
			defer s.disarm()
			for i := 0; i < 3; i++ {
				select {
				case <-asked:
				case err := <-cut:
					if !tc.waiting {
						t.Fatalf("cut with nobody waiting for room: %v", err)
					}
					if !errors.Is(err, errClaimDeadline) {
						t.Fatalf("cut with %v, want errClaimDeadline", err)
					}
					return
				case <-time.After(10 * time.Second):
					t.Fatal("the deadline never came")
				}
			}
			if tc.waiting {
				select {
				case <-cut:
				case <-time.After(10 * time.Second):
					t.Fatal("not cut while a collection waited for room")
				}
			}
		})
	}
}

// TestWaitingForRoomNow: an attempt waits for room now from its
// errRoomBusy outcome until the next collection round begins (in which
// it is collected again, or its node is down): a claim past its deadline
// is cut only while one does — not because one did once, nor by an
// attempt that waited once and is now itself being sent slowly.
func TestWaitingForRoomNow(t *testing.T) {
	c := &Controller{}
	if c.waitingForRoomNow() {
		t.Fatal("waiting for room with no attempt waiting")
	}
	r := domain.Attempt{Project: "p", Task: "S02", Attempt: 1}
	c.outcome(t.Context(), r, true, nil, roomWait{need: 600, claims: 1, held: 900}.err())
	if !c.waitingForRoomNow() {
		t.Fatal("not waiting for room with an attempt refused as busy")
	}
	if _, ok := c.roomWaits.Load(collectKey(r)); !ok {
		t.Fatal("the waiting attempt has no note")
	}
	c.waitingNow.Clear() // what collectAll does as a round begins
	if c.waitingForRoomNow() {
		t.Fatal("still waiting for room once the attempt is collected again")
	}
}

// TestUnreachedAttemptsCountNoTry: the attempts a stream had not reached
// when another attempt's claim was cut record nothing (collected again
// later); the cut attempt's own outcome is a try.
func TestUnreachedAttemptsCountNoTry(t *testing.T) {
	c := &Controller{}
	r := domain.Attempt{Project: "p", Task: "S02", Attempt: 1}
	got := c.outcome(t.Context(), r, true, nil, fmt.Errorf("%w: %w", errNotReached, errClaimDeadline))
	if got.record != nil || got.err != nil {
		t.Errorf("outcome of an attempt not reached: %+v, want nothing recorded", got)
	}
}

// TestDrawPastWhatWasAnnounced: a node that sends more than its head
// announced, while others hold the rest of the room, is refused as
// without room (a try), not as waiting: it waited for ever, uncounted.
// An attempt that announced nothing (an older wrapper) still waits.
func TestDrawPastWhatWasAnnounced(t *testing.T) {
	l := newRoomLedger(func() (int64, error) { return collectFreeMargin + 1000, nil })
	if _, err := l.refresh(); err != nil {
		t.Fatal(err)
	}
	other, liar, quiet := l.round().open(), l.round().open(), l.round().open()
	if err := other.claim(500); err != nil {
		t.Fatal(err)
	}
	if err := liar.claim(10); err != nil {
		t.Fatal(err)
	}
	if err := liar.draw(600); !errors.Is(err, errRoomSpent) || errors.Is(err, errRoomBusy) {
		t.Errorf("a draw past an announced claim: %v, want errRoomSpent", err)
	}
	if err := quiet.draw(600); !errors.Is(err, errRoomBusy) {
		t.Errorf("a draw with nothing announced: %v, want errRoomBusy", err)
	}
}

// twoItemsInARoom is a ledger whose room is room bytes past the margin
// and two stream items drawing from it, as one node's stream has them.
func twoItemsInARoom(t *testing.T, room int64) (*roomLedger, []*streamItem) {
	t.Helper()
	l := newRoomLedger(func() (int64, error) { return collectFreeMargin + room, nil })
	round := l.round()
	round.figure()
	dir := t.TempDir()
	items := make([]*streamItem, 2)
	for i := range items {
		claim := round.open()
		items[i] = &streamItem{output: true, tmp: filepath.Join(dir, fmt.Sprint(i)), room: claim, asked: claim.remaining(), seen: map[string]bool{}}
	}
	return l, items
}
