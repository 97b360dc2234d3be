package controller

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/home"
	"github.com/dispatch-tool/dispatch/internal/sshdtest"
	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/nodes/sshnode"
	"github.com/dispatch-tool/dispatch/store"
	"github.com/dispatch-tool/dispatch/wire"
)

// entry is one entry of a forged collect stream.
type entry struct {
	name string
	typ  byte
	body string
}

func headOf(h wire.CollectHead) string {
	b, _ := json.Marshal(h)
	return string(b)
}

func streamOf(t *testing.T, entries []entry) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range entries {
		typ := e.typ
		if typ == 0 {
			typ = tar.TypeReg
		}
		h := &tar.Header{Name: e.name, Typeflag: typ, Mode: 0o644, Size: int64(len(e.body))}
		if typ != tar.TypeReg {
			h.Size, h.Linkname = 0, "/etc/passwd"
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if typ == tar.TypeReg {
			tw.Write([]byte(e.body))
		}
	}
	tw.Close()
	return b.Bytes()
}

// TestCollectStreamChecksEveryEntry: whatever a node sends as its collect
// stream, each attempt gets only the files its head announced, inside its
// own output/, once, within the quotas; an entry that is wrong fails the
// attempt it names and no other; what is not a tar fails the stream.
func TestCollectStreamChecksEveryEntry(t *testing.T) {
	sent := wire.CollectHead{Found: true, Log: wire.CollectSent, Output: wire.CollectSent, Files: 2, Bytes: 4}
	noLog := wire.CollectHead{Found: true, Log: wire.CollectMissing, Output: wire.CollectSent}
	ok := []entry{{"1/collect.json", 0, headOf(sent)}, {"1/task.log", 0, "log\n"}, {"1/output/b.txt", 0, "b\n"}}
	for _, tc := range []struct {
		name    string
		entries []entry
		want0   string // "" when attempt 0 is whole, else its error
		files0  []string
		stream  bool // the stream itself fails
	}{
		{name: "whole", entries: append([]entry{{"0/collect.json", 0, headOf(sent)}, {"0/task.log", 0, "log\n"},
			{"0/output/a.txt", 0, "a\n"}, {"0/output/d/c.txt", 0, "c\n"}}, ok...), files0: []string{"a.txt", "d/c.txt"}},
		{name: "escaping names are kept inside", entries: append([]entry{{"0/collect.json", 0, headOf(noLog)},
			{"0/output/../../../escape.txt", 0, "x\n"}, {"0/output//abs.txt", 0, "x\n"}}, ok...), files0: []string{"abs.txt", "escape.txt"}},
		{name: "a name twice", entries: append([]entry{{"0/collect.json", 0, headOf(noLog)},
			{"0/output/a.txt", 0, "x\n"}, {"0/output/./a.txt", 0, "y\n"}}, ok...), want0: "twice"},
		{name: "a link is not written", entries: append([]entry{{"0/collect.json", 0, headOf(noLog)},
			{"0/output/passwd", tar.TypeSymlink, ""}, {"0/output/hard", tar.TypeLink, ""}}, ok...)},
		{name: "a file before the head", entries: append([]entry{{"0/task.log", 0, "x"}, {"0/collect.json", 0, headOf(sent)}}, ok...), want0: "before"},
		{name: "the head twice", entries: append([]entry{{"0/collect.json", 0, headOf(noLog)}, {"0/collect.json", 0, headOf(noLog)}}, ok...), want0: "twice"},
		{name: "a task.log not announced", entries: append([]entry{{"0/collect.json", 0, headOf(noLog)}, {"0/task.log", 0, "x"}}, ok...), want0: "did not announce"},
		{name: "a huge head", entries: append([]entry{{"0/collect.json", 0, strings.Repeat(" ", maxCollectHead+1)}}, ok...), want0: "larger than"},
		{name: "a head of unknown words", entries: append([]entry{{"0/collect.json", 0, `{"found":true,"log":"maybe"}`}}, ok...), want0: "says task.log"},
		{name: "a negative task.log size", entries: append([]entry{{"0/collect.json", 0, `{"found":true,"log":"sent","log_size":-5,"output":"missing"}`}}, ok...), want0: "below zero"},
		{name: "a negative output/ size", entries: append([]entry{{"0/collect.json", 0, `{"found":true,"log":"missing","output":"sent","files":1,"bytes":-1}`}}, ok...), want0: "below zero"},
		{name: "a negative size in a head of nothing found", entries: append([]entry{{"0/collect.json", 0, `{"found":false,"log_size":-1}`}}, ok...), want0: "below zero"},
		{name: "over collect_max_bytes", entries: append([]entry{{"0/collect.json", 0, headOf(noLog)},
			{"0/output/big", 0, strings.Repeat("x", 101)}}, ok...), want0: errOverQuota.Error()},
		{name: "over collect_max_files", entries: append([]entry{{"0/collect.json", 0, headOf(noLog)},
			{"0/output/1", 0, ""}, {"0/output/2", 0, ""}, {"0/output/3", 0, ""}, {"0/output/4", 0, ""}}, ok...), want0: "collect_max_files"},
		{name: "an unknown entry", entries: append([]entry{{"0/collect.json", 0, headOf(noLog)}, {"0/secrets", 0, "x"}}, ok...), want0: "unexpected entry"},
		{name: "entries of attempts nobody asked for are skipped", entries: append([]entry{{"0/collect.json", 0, headOf(noLog)},
			{"7/task.log", 0, "x"}, {"-1/task.log", 0, "x"}, {"../x", 0, "x"}, {"x", 0, "x"}}, ok...)},
		{name: "an attempt's file after the next attempt's", entries: append(append([]entry{{"0/collect.json", 0, headOf(noLog)}}, ok...),
			entry{"0/output/late.txt", 0, "x"}), want0: "after the next attempt"},
		{name: "the node's own error", entries: append([]entry{{"0/collect.json", 0, headOf(noLog)}, {"0/collect.err", 0, "a.txt shrank"}}, ok...), want0: "shrank"},
		{name: "not a tar", entries: nil, stream: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			items := make([]*streamItem, 2)
			for i := range items {
				items[i] = &streamItem{output: true, tmp: filepath.Join(dir, fmt.Sprint(i)), room: fixedRoom(1 << 30), asked: 1 << 30, seen: map[string]bool{}}
			}
			data := streamOf(t, tc.entries)
			if tc.entries == nil {
				data = []byte(`{"error":"collect: stdin is not a collect request","kind":"usage"}`)
			}
			s := streamReader{items: items, maxFiles: 3, maxBytes: 100}
			err := s.read(bytes.NewReader(data))
			if (err != nil) != tc.stream {
				t.Fatalf("stream error %v, want one: %v", err, tc.stream)
			}
			if tc.stream {
				return
			}
			if got := items[0].err; (got == nil) != (tc.want0 == "") || got != nil && !strings.Contains(got.Error(), tc.want0) {
				t.Errorf("attempt 0: %v, want %q", got, tc.want0)
			}
			if items[1].err != nil || len(items[1].manifest) != 1 || !items[1].gotLog {
				t.Errorf("attempt 1, sent right, hurt: err %v, manifest %+v", items[1].err, items[1].manifest)
			}
			var written []string
			filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
				if err == nil && !d.IsDir() {
					rel, _ := filepath.Rel(dir, p)
					written = append(written, filepath.ToSlash(rel))
				}
				if err == nil && d.Type()&os.ModeSymlink != 0 {
					t.Errorf("a link was written: %s", p)
				}
				return nil
			})
			for _, w := range written {
				if !strings.HasPrefix(w, "0/output/") && !strings.HasPrefix(w, "1/") && w != "0/task.log" {
					t.Errorf("%s written outside an attempt's files", w)
				}
			}
			if tc.files0 != nil {
				var got []string
				for _, f := range items[0].manifest {
					got = append(got, f.Path)
				}
				slices.Sort(got)
				if !slices.Equal(got, tc.files0) {
					t.Errorf("attempt 0's manifest %v, want %v", got, tc.files0)
				}
			}
		})
	}
}

// countingSSH is an SSH node that counts the calls a collection makes:
// collects holds each collect request, made with an exec (execCollects
// counts those) or over a collect conversation (collectConv).
type countingSSH struct {
	*sshnode.SSH
	mu           sync.Mutex
	gets         []string
	walks        []string
	collects     [][]wire.CollectItem
	exec         atomic.Int64
	execCollects atomic.Int64
	convs        collectConvs
}

func (c *countingSSH) Get(ctx context.Context, p string, w io.Writer) error {
	c.mu.Lock()
	c.gets = append(c.gets, p)
	c.mu.Unlock()
	return c.SSH.Get(ctx, p, w)
}

func (c *countingSSH) Walk(ctx context.Context, dir string) ([]nodes.FileInfo, error) {
	c.mu.Lock()
	c.walks = append(c.walks, dir)
	c.mu.Unlock()
	return c.SSH.Walk(ctx, dir)
}

func (c *countingSSH) Exec(ctx context.Context, argv []string, stdin []byte) (nodes.Result, error) {
	c.exec.Add(1)
	return c.SSH.Exec(ctx, argv, stdin)
}

func (c *countingSSH) ExecTo(ctx context.Context, argv []string, stdin []byte, w io.Writer) (nodes.Result, error) {
	if slices.Contains(argv, "collect") {
		c.execCollects.Add(1)
		c.recordCollect(stdin)
	}
	return c.SSH.ExecTo(ctx, argv, stdin, w)
}

// recordCollect records the collect request req.
func (c *countingSSH) recordCollect(req []byte) {
	var r wire.CollectRequest
	if json.Unmarshal(req, &r) == nil {
		c.mu.Lock()
		c.collects = append(c.collects, r.Attempts)
		c.mu.Unlock()
	}
}

func (c *countingSSH) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gets, c.walks, c.collects = nil, nil, nil
}

// sshHarness is a harness whose one node, n, is a real sshd on loopback
// reached through a countingSSH.
func sshHarness(t *testing.T, slots int, specs map[string]string) (*harness, *countingSSH, *sshdtest.Server) {
	t.Helper()
	h, counted, servers := sshNodesHarness(t, 1, slots, specs)
	return h, counted[0], servers[0]
}

// sshNodesHarness is a harness of count nodes (n, n2, n3...), each a real
// sshd on loopback reached through a countingSSH.
func sshNodesHarness(t *testing.T, count, slots int, specs map[string]string) (*harness, []*countingSSH, []*sshdtest.Server) {
	t.Helper()
	sshdtest.Require(t)
	c := sshdtest.NewClient(t)
	yaml := "controller:\n  ssh_connect_timeout: 2s\nnodes:\n"
	var servers []*sshdtest.Server
	for i := range count {
		s := c.StartServer(t, "collect")
		c.Trust(t, s)
		servers = append(servers, s)
		yaml += fmt.Sprintf("  - name: %s\n    ssh: %s@127.0.0.1:%d\n    slots: %d\n    work_dir: %s\n", nodeName(i), c.User, s.Port, slots, s.WorkDir)
	}
	h := newHarness(t, unsandboxed(yaml, "the tasks wait for a file of the test outside their workspace"), shellProject(specs))
	trs := map[string]nodes.Transport{}
	var counted []*countingSSH
	for i := range count {
		tr, err := sshnode.New(sshnode.Config{Node: nodeName(i), Target: h.cfg.Nodes[i].SSH, ConnectTimeout: 2 * time.Second,
			Env: sshnode.Env{Home: c.Home, ConfigFile: c.SSHConfig, User: c.User}, AgentSocket: "/nonexistent"})
		if err != nil {
			t.Fatal(err)
		}
		counted = append(counted, &countingSSH{SSH: tr})
		trs[nodeName(i)] = counted[i]
	}
	h.ctl = New(Options{Home: h.home, Config: h.cfg, Store: h.st, Transports: trs,
		Wrappers: wrappers, Now: h.clock.Now, Jitter: func() float64 { return 0 }})
	return h, counted, servers
}

// nodeName is the name of sshNodesHarness's node i: n, n2, n3...
func nodeName(i int) string {
	if i == 0 {
		return "n"
	}
	return fmt.Sprintf("n%d", i+1)
}

// TestCollectStreamOneCallPerNode: four attempts that finished on an SSH
// node by the same tick are collected in one `wrapper collect` call — no
// status.json read, no task.log read, no listing of output/ — with every
// file, its manifest and its record as one by one: a task.log each, an
// output/ of many files, one with a link in it (left out), one empty.
func TestCollectStreamOneCallPerNode(t *testing.T) {
	gate := filepath.Join(t.TempDir(), "go")
	wait := fmt.Sprintf("while [ ! -e '%s' ]; do sleep 0.05; done\n", gate)
	h, counted, s := sshHarness(t, 4, map[string]string{
		"S01-one.md":   wait + "echo one; echo 1 > one.txt\n",
		"S02-many.md":  wait + "echo many; mkdir d; for i in $(seq 1 40); do echo $i > d/$i.txt; done\n",
		"S03-link.md":  wait + "echo link; echo x > real.txt; ln -s /etc/passwd passwd\n",
		"S04-empty.md": wait + "echo empty\n",
	})
	h.tickUntil("the four to run", func() bool {
		for _, id := range []string{"S01", "S02", "S03", "S04"} {
			if h.task(id).Status != domain.Running {
				return false
			}
		}
		return true
	})
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// All four end on the node before the controller looks again.
	waitEnded(t, s.WorkDir, "S01", "S02", "S03", "S04")
	txs := countCollectTx(t)
	counted.reset()
	// The free space under runs/ is asked once for the stream, not once
	// an attempt.
	var asked atomic.Int32
	free := diskFree
	diskFree = func(dir string) (int64, error) {
		if strings.HasPrefix(dir, h.home) {
			asked.Add(1)
		}
		return free(dir)
	}
	h.tick()
	diskFree = free
	if got := txs.take(); !slices.Equal(got, []int{4}) {
		t.Errorf("collection transactions %v, want one of 4 attempts", got)
	}
	if n := asked.Load(); n != 1 {
		t.Errorf("the stream of 4 attempts asked for the free space %d times, want once", n)
	}
	counted.mu.Lock()
	collects, gets, walks := counted.collects, counted.gets, counted.walks
	counted.mu.Unlock()
	if len(collects) != 1 || len(collects[0]) != 4 {
		t.Fatalf("collect calls %v, want one of four attempts", collects)
	}
	if len(gets) != 0 || len(walks) != 0 {
		t.Errorf("the collection read files one by one: gets %v, walks %v", gets, walks)
	}
	runs := home.RunsDir(h.home, "p")
	for id, log := range map[string]string{"S01": "one", "S02": "many", "S03": "link", "S04": "empty"} {
		b, err := os.ReadFile(filepath.Join(runs, id, "task.log"))
		if err != nil || !strings.Contains(string(b), log) {
			t.Errorf("%s task.log: %q %v", id, b, err)
		}
		if b, err := os.ReadFile(filepath.Join(runs, id, "attempts", "1", "task.log")); err != nil || !strings.Contains(string(b), log) {
			t.Errorf("%s attempts/1/task.log: %q %v", id, b, err)
		}
		attempts, _ := h.st.Attempts(context.Background(), "p", id)
		if len(attempts) != 1 || attempts[0].CollectedAt.IsZero() {
			t.Errorf("%s not recorded collected: %+v", id, attempts)
		}
	}
	files, _ := h.st.Files(context.Background(), "p", "S02")
	if len(files) != 40 {
		t.Errorf("S02's manifest holds %d files, want 40", len(files))
	}
	if b, _ := os.ReadFile(filepath.Join(runs, "S02", "output", "d", "17.txt")); string(b) != "17\n" {
		t.Errorf("S02 output/d/17.txt = %q", b)
	}
	one, _ := h.st.Files(context.Background(), "p", "S01")
	sum := sha256.Sum256([]byte("1\n"))
	if len(one) != 1 || one[0].Path != "one.txt" || one[0].SHA256 != hex.EncodeToString(sum[:]) {
		t.Errorf("S01's manifest %+v", one)
	}
	if _, err := os.Lstat(filepath.Join(runs, "S03", "output", "passwd")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("S03's link was collected: %v", err)
	}
	for _, id := range []string{"S01", "S02", "S03", "S04"} {
		if tk := h.task(id); tk.Status != domain.Completed {
			t.Errorf("%s %s (%s), want completed", id, tk.Status, tk.Error)
		}
	}
}

// TestCollectStreamGigabyte: a 1 GiB output/ file comes back through the
// collect stream of an SSH node, bounded by progress and not by a
// deadline, written to disk as it comes, whole and with its checksum.
func TestCollectStreamGigabyte(t *testing.T) {
	if testing.Short() {
		t.Skip("streams 1 GiB over sshd")
	}
	h, counted, _ := sshHarness(t, 1, map[string]string{
		"S01-big.md": "truncate -s 1G big.bin 2>/dev/null || dd if=/dev/zero of=big.bin bs=1 count=0 seek=1073741824 2>/dev/null\n",
	})
	h.tickUntilLong("S01 collected", 240*time.Second, func() bool {
		runs, _ := h.st.Attempts(context.Background(), "p", "S01")
		return len(runs) == 1 && !runs[0].CollectedAt.IsZero()
	})
	if tk := h.task("S01"); tk.Status != domain.Completed {
		t.Fatalf("S01 %s (%s), want completed", tk.Status, tk.Error)
	}
	files, _ := h.st.Files(context.Background(), "p", "S01")
	sum := sha256.New()
	if _, err := io.CopyN(sum, zeros{}, 1<<30); err != nil {
		t.Fatal(err)
	}
	if len(files) != 1 || files[0].Size != 1<<30 || files[0].SHA256 != hex.EncodeToString(sum.Sum(nil)) {
		t.Fatalf("manifest = %+v, want big.bin of 1 GiB of zeros", files)
	}
	counted.mu.Lock()
	defer counted.mu.Unlock()
	if len(counted.collects) == 0 || len(counted.gets) != 0 {
		t.Errorf("%d collect streams, %d gets: want the file through the stream", len(counted.collects), len(counted.gets))
	}
}

// txCounter counts the transactions that record collections.
type txCounter struct {
	mu  sync.Mutex
	txs []int
}

func countCollectTx(t *testing.T) *txCounter {
	c := &txCounter{}
	testHookCollectTx = func(records int, err error) {
		c.mu.Lock()
		defer c.mu.Unlock()
		if err == nil {
			c.txs = append(c.txs, records)
		}
	}
	t.Cleanup(func() { testHookCollectTx = nil })
	return c
}

func (c *txCounter) take() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	txs := c.txs
	c.txs = nil
	return txs
}

// waitEnded waits until the tasks ids have a final status.json in the
// task directories under work (the node's work_dir, project p).
func waitEnded(t *testing.T, work string, ids ...string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for _, id := range ids {
		for {
			b, _ := os.ReadFile(filepath.Join(work, "p", "tasks", id, "status.json"))
			var st wire.Status
			if json.Unmarshal(b, &st) == nil && st.Final() {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s did not end on the node", id)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// statusGets is a node (one without a collect stream) that records the
// status.json files it is asked for.
type statusGets struct {
	nodes.Transport
	mu    sync.Mutex
	paths []string
}

func (s *statusGets) Get(ctx context.Context, p string, w io.Writer) error {
	if strings.HasSuffix(p, "/status.json") {
		s.mu.Lock()
		s.paths = append(s.paths, p)
		s.mu.Unlock()
	}
	return s.Transport.Get(ctx, p, w)
}

// TestCollectOneTransactionPerTick: the attempts a tick collects (here
// three, file by file from a node without a collect stream) are recorded
// in one transaction, and the pull, which saw each attempt in its task
// directory, spares the status.json read that found it.
func TestCollectOneTransactionPerTick(t *testing.T) {
	gate := filepath.Join(t.TempDir(), "go")
	wait := fmt.Sprintf("while [ ! -e '%s' ]; do sleep 0.05; done\n", gate)
	yaml := strings.Replace(fastYAML, "slots: 2", "slots: 3", 1)
	h := newHarness(t, unsandboxed(yaml, "the tasks wait for a file of the test outside their workspace"), shellProject(map[string]string{
		"S01-a.md": wait + "echo a > a.txt\n", "S02-b.md": wait + "echo b > b.txt\n", "S03-c.md": wait + "echo c\n",
	}))
	gets := &statusGets{Transport: h.ctl.nodes["local"].tr}
	h.ctl.nodes["local"].tr = gets
	txs := countCollectTx(t)
	h.tickUntil("the three to run", func() bool {
		return h.task("S01").Status == domain.Running && h.task("S02").Status == domain.Running && h.task("S03").Status == domain.Running
	})
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitEnded(t, h.work, "S01", "S02", "S03")
	txs.take()
	h.tick()
	if got := txs.take(); !slices.Equal(got, []int{3}) {
		t.Errorf("collection transactions %v, want one of 3 attempts", got)
	}
	for _, id := range []string{"S01", "S02", "S03"} {
		if runs, _ := h.st.Attempts(context.Background(), "p", id); len(runs) != 1 || runs[0].CollectedAt.IsZero() {
			t.Errorf("%s not collected: %+v", id, runs)
		}
	}
	gets.mu.Lock()
	defer gets.mu.Unlock()
	if len(gets.paths) != 0 {
		t.Errorf("status.json read to find the attempts: %v", gets.paths)
	}
}

// TestCollectStreamBudget: a stream larger than its attempts' quotas
// allow (an entry the controller would otherwise skip for hours) ends.
func TestCollectStreamBudget(t *testing.T) {
	req := wire.CollectRequest{Attempts: []wire.CollectItem{{MaxFiles: 1, MaxBytes: 10}}}
	budget := streamBudget(req)
	data := streamOf(t, []entry{{"0/collect.json", 0, headOf(wire.CollectHead{Found: true, Log: wire.CollectSent})},
		{"0/task.log", 0, strings.Repeat("x", int(budget))}})
	it := &streamItem{tmp: t.TempDir(), room: fixedRoom(1 << 30), asked: 1 << 30, seen: map[string]bool{}}
	s := streamReader{items: []*streamItem{it}, maxFiles: 1, maxBytes: 10}
	if err := readBudgeted(&s, &io.LimitedReader{R: bytes.NewReader(data), N: budget}); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("a stream past its budget: %v, want it ended", err)
	}
}

// TestCollectStreamCutIsNotCollected: a stream cut after attempt 1's head
// and part of its output/ ends as a whole tar does (the node's buffer often
// stops before a header). Attempt 1 must not be taken for collected: the
// call's error fails it (and those after it), without an error it lacks its
// end entry, and its output/ is checked against its head; attempt 0, sent
// whole, is unharmed.
func TestCollectStreamCutIsNotCollected(t *testing.T) {
	sent := wire.CollectHead{Found: true, Log: wire.CollectSent, Output: wire.CollectSent, Files: 2, Bytes: 4}
	whole := []entry{{"0/collect.json", 0, headOf(sent)}, {"0/task.log", 0, "log\n"}, {"0/output/a.txt", 0, "a\n"}, {"0/output/b.txt", 0, "b\n"}, {"0/collect.end", 0, ""}}
	for _, tc := range []struct {
		name    string
		entries []entry
		callErr error // what the call (transport or wrapper's exit) returned
		want1   string
	}{
		{name: "cut after a file, the call failed", entries: append(slices.Clone(whole), entry{"1/collect.json", 0, headOf(sent)},
			entry{"1/task.log", 0, "log\n"}, entry{"1/output/a.txt", 0, "a\n"}), callErr: io.ErrUnexpectedEOF, want1: "unexpected EOF"},
		{name: "cut after the head, the call failed", entries: append(slices.Clone(whole), entry{"1/collect.json", 0, headOf(sent)}),
			callErr: errors.New("exit status 1"), want1: "exit status 1"},
		{name: "cut after a file, no error", entries: append(slices.Clone(whole), entry{"1/collect.json", 0, headOf(sent)},
			entry{"1/task.log", 0, "log\n"}, entry{"1/output/a.txt", 0, "a\n"}), want1: "cut short"},
		{name: "cut before an empty file, no error", entries: append(slices.Clone(whole), entry{"1/collect.json", 0,
			headOf(wire.CollectHead{Found: true, Log: wire.CollectMissing, Output: wire.CollectSent, Files: 2, Bytes: 2})},
			entry{"1/output/a.txt", 0, "a\n"}), want1: "cut short"},
		{name: "a file missing, ended", entries: append(slices.Clone(whole), entry{"1/collect.json", 0, headOf(sent)},
			entry{"1/task.log", 0, "log\n"}, entry{"1/output/a.txt", 0, "a\n"}, entry{"1/collect.end", 0, ""}), want1: "announced 2 files, 4 bytes"},
		{name: "a file after the end", entries: append(slices.Clone(whole), entry{"1/collect.json", 0, headOf(sent)},
			entry{"1/task.log", 0, "log\n"}, entry{"1/output/a.txt", 0, "a\n"}, entry{"1/collect.end", 0, ""},
			entry{"1/output/b.txt", 0, "b\n"}), want1: "after the attempt's end"},
		{name: "a file more than announced", entries: append(slices.Clone(whole), entry{"1/collect.json", 0, headOf(sent)},
			entry{"1/task.log", 0, "log\n"}, entry{"1/output/a.txt", 0, "a\n"}, entry{"1/output/b.txt", 0, "b\n"},
			entry{"1/output/c.txt", 0, ""}, entry{"1/collect.end", 0, ""}), want1: "brought 3 files"},
		{name: "whole", entries: append(slices.Clone(whole), entry{"1/collect.json", 0, headOf(sent)},
			entry{"1/task.log", 0, "log\n"}, entry{"1/output/a.txt", 0, "a\n"}, entry{"1/output/b.txt", 0, "b\n"}, entry{"1/collect.end", 0, ""})},
		{name: "whole, the end saying what was sent and a file that grew", entries: append(slices.Clone(whole), entry{"1/collect.json", 0, headOf(sent)},
			entry{"1/task.log", 0, "log\n"}, entry{"1/output/a.txt", 0, "a\n"}, entry{"1/output/b.txt", 0, "b\n"},
			entry{"1/collect.end", 0, `{"files":2,"bytes":4,"changed":[{"path":"b.txt","listed":2,"now":9}]}`})},
		{name: "a file removed since the listing, the end saying so", entries: append(slices.Clone(whole), entry{"1/collect.json", 0, headOf(sent)},
			entry{"1/task.log", 0, "log\n"}, entry{"1/output/a.txt", 0, "a\n"},
			entry{"1/collect.end", 0, `{"files":1,"bytes":2,"changed":[{"path":"b.txt","listed":2,"now":-1}]}`})},
		{name: "the end says more than came", entries: append(slices.Clone(whole), entry{"1/collect.json", 0, headOf(sent)},
			entry{"1/task.log", 0, "log\n"}, entry{"1/output/a.txt", 0, "a\n"}, entry{"1/collect.end", 0, `{"files":2,"bytes":4}`}),
			want1: "the node sent 2 files, 4 bytes"},
		{name: "an end that is not JSON", entries: append(slices.Clone(whole), entry{"1/collect.json", 0, headOf(sent)},
			entry{"1/task.log", 0, "log\n"}, entry{"1/output/a.txt", 0, "a\n"}, entry{"1/output/b.txt", 0, "b\n"},
			entry{"1/collect.end", 0, `sent`}), want1: "end entry"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			items := make([]*streamItem, 3)
			for i := range items {
				items[i] = &streamItem{output: true, tmp: filepath.Join(dir, fmt.Sprint(i)), room: fixedRoom(1 << 30), asked: 1 << 30, seen: map[string]bool{}}
			}
			s := streamReader{items: items, maxFiles: 3, maxBytes: 100}
			if err := s.read(bytes.NewReader(streamOf(t, tc.entries))); err != nil {
				t.Fatal(err)
			}
			if tc.callErr != nil {
				s.failRest(tc.callErr)
			}
			judged := func(it *streamItem) error {
				if err := it.arrived(); err != nil {
					return err
				}
				return it.checkReceived()
			}
			if err := judged(items[0]); err != nil {
				t.Errorf("attempt 0, sent whole, hurt: %v", err)
			}
			got := judged(items[1])
			if (got == nil) != (tc.want1 == "") || got != nil && !strings.Contains(got.Error(), tc.want1) {
				t.Errorf("attempt 1: %v, want %q", got, tc.want1)
			}
			if tc.callErr != nil && items[2].err == nil {
				t.Error("attempt 2, never sent, is not failed by the call's error")
			}
		})
	}
}

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

// collectEach runs the gated tasks bodies on an SSH node, then lets each
// end in turn, before(id) called first, and checks that the tick after it
// collects it.
func collectEach(t *testing.T, before func(c *countingSSH, id string), bodies ...string) (*harness, *countingSSH) {
	t.Helper()
	specs, gates := gatedTasks(t, bodies...)
	h, counted, s := sshHarness(t, len(bodies), specs)
	var ids []string
	for i := range bodies {
		ids = append(ids, fmt.Sprintf("S%02d", i+1))
	}
	h.tickUntil("the tasks to run", func() bool {
		return !slices.ContainsFunc(ids, func(id string) bool { return h.task(id).Status != "running" })
	})
	for i, id := range ids {
		before(counted, id)
		finish(t, s, gates[i], id)
		h.tick()
		if !h.collected(id) {
			t.Fatalf("%s not collected in the tick after it ended: %s %q", id, h.task(id).Status, h.task(id).Warning)
		}
	}
	return h, counted
}

// TestCollectOverOneConversation: the collections of a batch that ends over
// four ticks go over one `collect --serve` held open on the node, one
// request a tick, with no `wrapper collect` exec; closing the node's
// executor (reload, Close) closes it.
func TestCollectOverOneConversation(t *testing.T) {
	h, counted := collectEach(t, func(*countingSSH, string) {}, "echo one > one.txt\n", "echo two\n", "mkdir d; echo 3 > d/three.txt\n", "echo four\n")
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
		t.Fatalf("S01 not collected: %s %q", h.task("S01").Status, h.task("S01").Warning)
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
		t.Fatalf("S02 not collected on the next try: %s %q", h.task("S02").Status, h.task("S02").Warning)
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
	for _, tc := range []struct {
		name         string
		before       func(c *countingSSH, id string)
		execs, convs int64
	}{
		{name: "S02's request not sent", before: func(c *countingSSH, id string) { c.convs.notSent.Store(id == "S02") }, execs: 1, convs: 2},
		{name: "an older wrapper", before: func(c *countingSSH, _ string) { c.convs.older.Store(true) }, execs: 3, convs: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, counted := collectEach(t, tc.before, "echo one\n", "echo two\n", "echo three\n")
			if counted.execCollects.Load() != tc.execs || counted.convs.opened.Load() != tc.convs {
				t.Errorf("%d collect execs, %d conversations; want %d and %d", counted.execCollects.Load(), counted.convs.opened.Load(), tc.execs, tc.convs)
			}
		})
	}
}

// TestCollectReadsNoPlainTask: collecting the current attempt of a task
// that starts from no commit (not git-native, as the read of what to
// collect says) reads nothing more of the task: its whole row was read
// for each attempt collected (issue 35). A task that starts from a
// commit is read (here: it is not there).
func TestCollectReadsNoPlainTask(t *testing.T) {
	h := newHarness(t, "", shellProject(map[string]string{"S01.md": "true\n"}))
	ctx := context.Background()
	r := domain.Attempt{Project: "p", Task: "GONE", Attempt: 1, Node: "local", Status: domain.Completed}
	it, err := h.ctl.prepareItem(ctx, r, collectRole{current: true}, h.ctl.room.round(), nil)
	if err != nil {
		t.Fatalf("a plain task's attempt: %v, want it prepared without reading its task", err)
	}
	os.RemoveAll(it.tmp)
	if it.git != nil || !it.output {
		t.Errorf("a plain task's attempt: git %v, output %v; want its output/ asked for", it.git, it.output)
	}
	if _, err := h.ctl.prepareItem(ctx, r, collectRole{current: true, based: true}, h.ctl.room.round(), nil); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("an attempt of a task that starts from a commit: %v, want its task read (not found)", err)
	}
}

// hostileNode is a node whose first collect stream is forged: a head of a
// few hundred bytes announcing a task.log of claim bytes, which then
// trickles in, a byte every 50 ms (within transfer_idle), until release is
// closed; the stream then ends cut short. Every other call, and every
// later collect, is its transport's (an exec, its stdout copied).
type hostileNode struct {
	nodes.Transport
	claim   int64
	release chan struct{}
	forged  atomic.Bool
}

func (h *hostileNode) ExecTo(ctx context.Context, argv []string, stdin []byte, w io.Writer) (nodes.Result, error) {
	if !slices.Contains(argv, "collect") || h.forged.Swap(true) {
		res, err := h.Transport.Exec(ctx, argv, stdin)
		if err == nil {
			_, err = w.Write(res.Stdout)
			res.Stdout = nil
		}
		return res, err
	}
	tw := tar.NewWriter(w)
	head := headOf(wire.CollectHead{Found: true, Log: wire.CollectSent, LogSize: h.claim, Output: wire.CollectMissing})
	if err := tw.WriteHeader(&tar.Header{Name: "0/" + wire.CollectHeadName, Mode: 0o644, Size: int64(len(head))}); err != nil {
		return nodes.Result{}, err
	}
	if _, err := io.WriteString(tw, head); err != nil {
		return nodes.Result{}, err
	}
	if err := tw.WriteHeader(&tar.Header{Name: "0/task.log", Mode: 0o644, Size: h.claim}); err != nil {
		return nodes.Result{}, err
	}
	beat := time.NewTicker(50 * time.Millisecond)
	defer beat.Stop()
	for {
		select {
		case <-h.release:
			return nodes.Result{}, nil
		case <-ctx.Done():
			return nodes.Result{}, ctx.Err()
		case <-beat.C:
			if _, err := w.Write([]byte("x")); err != nil {
				return nodes.Result{}, err
			}
		}
	}
}

// TestCollectWaitsForRoomOthersHold: a node's collect stream claims 900
// KiB of a 1 MiB room with a head of a few hundred bytes and trickles, its
// collection outliving the round that began it; another node's attempt of
// 600 KiB, collected in the next rounds (file by file from a local node,
// or in an SSH node's stream), fits the room without that claim and not
// with it: it is not collected while the claim is held (each round's room
// is the free space less what the ledger holds; each round used to read
// the room afresh and collect it), and it waits without counting a try,
// saying so on its status line (it used to fail a try a round, and after
// three as `collect`); once the stream ends, it is collected.
func TestCollectWaitsForRoomOthersHold(t *testing.T) {
	for _, tc := range []struct {
		name string
		ssh  bool
	}{
		{"a local node's listing", false},
		{"an SSH node's stream", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rate := claimMinRate
			claimMinRate = 1 // the trickler is not cut while the test looks
			t.Cleanup(func() { claimMinRate = rate })
			h, _, release := hostileRoomHarness(t, tc.ssh)
			for range maxCollectTries + 1 {
				h.tick()
				h.clock.Advance(collectRetryWait)
			}
			// A local node's waiting attempt claims its task.log and
			// output/ together, before copying either: it copied its
			// task.log again every round.
			if gets, ok := h.ctl.nodes["n2"].tr.(*logGets); ok && gets.n.Load() != 0 {
				t.Errorf("S02's task.log was copied %d times while it waited for room, want none", gets.n.Load())
			}
			if failed := taskEvents(h, "collect_failed", "S02"); len(failed) != 0 {
				t.Fatalf("S02's collection counted a try waiting for room: %+v", failed)
			}
			if h.collected("S02") {
				t.Fatalf("S02 collected while the room was held: %d bytes under runs/ with a room of 1 MiB", writtenUnder(t, home.RunsDir(h.home, "p")))
			}
			if tk := h.task("S02"); tk.Status != domain.Completed || !strings.Contains(tk.Warning, "waiting for room: 1 collection in flight holds 0.9 MiB") {
				t.Errorf("S02 %s, warning %q; want completed, waiting for room", tk.Status, tk.Warning)
			}
			if ws := taskEvents(h, "warning", "S02"); len(ws) != 1 || !strings.Contains(ws[0].Message, "waiting for room") {
				t.Errorf("S02's warnings %+v, want one saying it waits for room", ws)
			}
			release()
			h.tickUntil("S02 to be collected once the stream ended", func() bool { return h.collected("S02") })
			checkCollectedAfterWaiting(t, h)
		})
	}
}

// TestCollectCutsAClaimPastItsDeadline: the trickling stream of
// TestCollectWaitsForRoomOthersHold, never ended by the node, is cut once
// it has not sent its claim by its deadline (transfer_idle, and a second
// for each claimMinRate bytes): its claim is given back and its own
// attempt counts a try, as a stalled transfer does; the other node's
// attempt, waiting for that room without counting a try, is collected.
// The trickler held the room, and the other attempt waited, for ever.
func TestCollectCutsAClaimPastItsDeadline(t *testing.T) {
	for _, tc := range []struct {
		name string
		ssh  bool
	}{
		{"a local node's listing", false},
		{"an SSH node's stream", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rate := claimMinRate
			claimMinRate = 200 << 10 // a deadline of transfer_idle and 4.5 s: S02 ends and waits before it
			t.Cleanup(func() { claimMinRate = rate })
			h, _, _ := hostileRoomHarness(t, tc.ssh)
			h.tick()
			if ws := taskEvents(h, "warning", "S02"); len(ws) != 1 || !strings.Contains(ws[0].Message, "waiting for room") {
				t.Errorf("S02's warnings %+v, want one saying it waits for room", ws)
			}
			h.tickUntil("S02 to be collected once the trickler's deadline passed", func() bool {
				h.clock.Advance(collectRetryWait)
				return h.collected("S02")
			})
			checkCollectedAfterWaiting(t, h)
			failed := taskEvents(h, "collect_failed", "S01")
			if len(failed) == 0 || !strings.Contains(failed[0].Message, errClaimDeadline.Error()) {
				t.Errorf("the trickler's collect_failed %+v, want a try past its claim's deadline", failed)
			}
		})
	}
}

// hostileRoomHarness runs S01 on node n, whose first collect stream is a
// hostileNode's claiming 900 KiB of a room of 1 MiB and trickling, and
// S02 (600 KiB of output/) on n2, a local node or an SSH node; it returns
// once the claim is held and S02 has ended. release ends the trickle.
func hostileRoomHarness(t *testing.T, ssh bool) (*harness, *hostileNode, func()) {
	gates := []string{filepath.Join(t.TempDir(), "go1"), filepath.Join(t.TempDir(), "go2")}
	wait := func(gate string) string { return fmt.Sprintf("while [ ! -e '%s' ]; do sleep 0.05; done\n", gate) }
	specs := map[string]string{
		"S01-hostile.md": "---\nnode: n\n---\n" + wait(gates[0]) + "echo one\n",
		"S02-honest.md":  "---\nnode: n2\n---\n" + wait(gates[1]) + fmt.Sprintf("head -c %d /dev/zero > big.bin\n", 600<<10),
	}
	hostile := &hostileNode{claim: 900 << 10, release: make(chan struct{})}
	var h *harness
	var works []string
	trs := map[string]nodes.Transport{}
	if ssh {
		var counted []*countingSSH
		var servers []*sshdtest.Server
		h, counted, servers = sshNodesHarness(t, 2, 1, specs)
		trs["n"], trs["n2"] = counted[0], counted[1]
		for _, s := range servers {
			works = append(works, s.WorkDir)
		}
	} else {
		h, works = localNodesHarness(t, 2, 1, specs)
		trs["n"], trs["n2"] = nodes.NewLocal(), &logGets{Transport: nodes.NewLocal()}
	}
	hostile.Transport = trs["n"]
	trs["n"] = hostile
	h.ctl = New(Options{Home: h.home, Config: h.cfg, Store: h.st, Transports: trs,
		Wrappers: wrappers, Now: h.clock.Now, Jitter: func() float64 { return 0 }})
	free := diskFree
	diskFree = func(string) (int64, error) { return collectFreeMargin + 1<<20, nil }
	t.Cleanup(func() { diskFree = free })
	var once sync.Once
	release := func() { once.Do(func() { close(hostile.release) }) }
	t.Cleanup(release)

	h.tickUntil("the two to run", func() bool {
		return h.task("S01").Status == domain.Running && h.task("S02").Status == domain.Running
	})
	if err := os.WriteFile(gates[0], nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitEnded(t, works[0], "S01")
	h.tickUntil("the hostile stream's claim", func() bool { return h.ctl.room.heldNow() >= hostile.claim-4<<10 })
	if err := os.WriteFile(gates[1], nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitEnded(t, works[1], "S02")
	return h, hostile, release
}

// logGets is a node whose transport counts the task.logs it is asked for.
type logGets struct {
	nodes.Transport
	n atomic.Int64
}

func (l *logGets) Get(ctx context.Context, p string, w io.Writer) error {
	if path.Base(p) == "task.log" {
		l.n.Add(1)
	}
	return l.Transport.Get(ctx, p, w)
}

// checkCollectedAfterWaiting checks S02 of hostileRoomHarness collected
// whole, its waiting note cleared, no try counted.
func checkCollectedAfterWaiting(t *testing.T, h *harness) {
	t.Helper()
	fi, err := os.Stat(filepath.Join(home.RunsDir(h.home, "p"), "S02", "output", "big.bin"))
	if err != nil || fi.Size() != 600<<10 {
		t.Errorf("S02 output/big.bin: %v %v", fi, err)
	}
	if tk := h.task("S02"); tk.Status != domain.Completed || tk.Warning != "" {
		t.Errorf("S02 %s, warning %q; want completed, no warning", tk.Status, tk.Warning)
	}
	if failed := taskEvents(h, "collect_failed", "S02"); len(failed) != 0 {
		t.Errorf("S02's collection failed: %+v", failed)
	}
}

// taskEvents are h's events of kind about task id.
func taskEvents(h *harness, kind, id string) []store.Event {
	var out []store.Event
	for _, e := range h.events(kind) {
		if e.Task == id {
			out = append(out, e)
		}
	}
	return out
}

// heldNow is what the ledger holds now.
func (l *roomLedger) heldNow() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.held
}
