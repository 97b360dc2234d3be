package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/home"
	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/wire"
)

// shapedTransport is the local transport with its transfers slowed down or
// broken by the test.
type shapedTransport struct {
	*nodes.Local
	// get and put, when set, replace the writer or reader of a transfer of
	// a path for which they return non-nil (and may fail it).
	get func(p string, w io.Writer) (io.Writer, error)
	put func(p string, r io.Reader) (io.Reader, error)
}

func (s *shapedTransport) Get(ctx context.Context, p string, w io.Writer) error {
	if s.get != nil {
		sw, err := s.get(p, w)
		if err != nil {
			return err
		}
		if sw != nil {
			w = sw
		}
	}
	return s.Local.Get(ctx, p, w)
}

func (s *shapedTransport) Put(ctx context.Context, p string, r io.Reader, mode fs.FileMode) error {
	if s.put != nil {
		sr, err := s.put(p, r)
		if err != nil {
			return err
		}
		if sr != nil {
			r = sr
		}
	}
	return s.Local.Put(ctx, p, r, mode)
}

// ExecFrom shapes a tree streamed into `wrapper untar --archive -` as put
// shapes the archive file <dir>.tar that the other way of sending it
// writes, so that each test holds for both.
func (s *shapedTransport) ExecFrom(ctx context.Context, argv []string, stdin io.Reader) (nodes.Result, error) {
	if i := slices.Index(argv, "--dir"); s.put != nil && slices.Contains(argv, "untar") && i >= 0 && i+1 < len(argv) {
		sr, err := s.put(argv[i+1]+".tar", stdin)
		if err != nil {
			return nodes.Result{}, err
		}
		if sr != nil {
			stdin = sr
		}
	}
	return s.Local.ExecFrom(ctx, argv, stdin)
}

// trickle passes data on in small pieces with a pause before each.
type trickle struct {
	w     io.Writer
	r     io.Reader
	piece int
	pause time.Duration
}

func (t *trickle) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		time.Sleep(t.pause)
		k := min(len(p), t.piece)
		m, err := t.w.Write(p[:k])
		n += m
		if err != nil {
			return n, err
		}
		p = p[k:]
	}
	return n, nil
}

func (t *trickle) Read(p []byte) (int, error) {
	time.Sleep(t.pause)
	return t.r.Read(p[:min(len(p), t.piece)])
}

func (h *harness) shape(s *shapedTransport) {
	s.Local = nodes.NewLocal()
	h.ctl = New(Options{Home: h.home, Config: h.cfg, Store: h.st, Transports: map[string]nodes.Transport{"local": s},
		Wrappers: wrappers, Now: h.clock.Now, Jitter: func() float64 { return 0 }})
}

const fastYAML = `
controller:
  ssh_connect_timeout: 1s
  retry_backoff: 10s
  max_retries: 1
nodes:
  - name: local
    slots: 2
    work_dir: WORK
`

// TestCollectSlowFileOutlivesTheOldDeadline collects a file that takes
// longer than one remote call may (callTimeout, the old fixed deadline of a
// fetch) while its bytes keep moving: it is collected once, not restarted for
// ever.
func TestCollectSlowFileOutlivesTheOldDeadline(t *testing.T) {
	h := newHarness(t, fastYAML, shellProject(map[string]string{
		"S01-big.md": "head -c 262144 /dev/zero > slow.bin\n",
	}))
	pause := 250 * time.Millisecond // 32 pieces of 8 KiB: about 8 s, over callTimeout
	if total := 32 * pause; total <= h.ctl.callTimeout() {
		t.Fatalf("the slow file takes %s, not longer than callTimeout %s", total, h.ctl.callTimeout())
	}
	h.shape(&shapedTransport{get: func(p string, w io.Writer) (io.Writer, error) {
		if strings.HasSuffix(p, "/slow.bin") {
			return &trickle{w: w, piece: 8 << 10, pause: pause}, nil
		}
		return nil, nil
	}})
	deadline := time.Now().Add(60 * time.Second)
	for {
		h.tick()
		runs, _ := h.st.Attempts(context.Background(), "p", "S01")
		if len(runs) == 1 && !runs[0].CollectedAt.IsZero() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("slow file never collected; events %+v", h.events("collect_failed"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if tk := h.task("S01"); tk.Status != domain.Completed {
		t.Fatalf("S01 %s (%s), want completed", tk.Status, tk.Error)
	}
	fi, err := os.Stat(filepath.Join(home.RunsDir(h.home, "p"), "S01", "output", "slow.bin"))
	if err != nil || fi.Size() != 262144 {
		t.Fatalf("collected slow.bin: %v, %v", fi, err)
	}
	if evs := h.events("collect_failed"); len(evs) > 0 {
		t.Errorf("collection failed on the way: %+v", evs)
	}
}

// TestCollectLargeFileWithinQuota collects a 1 GiB (sparse on the node,
// real on the controller) output within the default 2 GiB quota.
func TestCollectLargeFileWithinQuota(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 1 GiB")
	}
	h := newHarness(t, fastYAML, shellProject(map[string]string{
		"S01-big.md": "truncate -s 1G big.bin 2>/dev/null || dd if=/dev/zero of=big.bin bs=1 count=0 seek=1073741824 2>/dev/null\n",
	}))
	h.tickUntilLong("S01 collected", 120*time.Second, func() bool {
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
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

func (h *harness) tickUntilLong(what string, limit time.Duration, cond func() bool) {
	h.t.Helper()
	deadline := time.Now().Add(limit)
	for {
		h.tick()
		if cond() {
			return
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("timed out waiting for %s; tasks: %s", what, h.dump())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestCollectOverQuotaFailsTheTask checks collect_max_files and
// collect_max_bytes: an output over either is not collected at all, the task
// fails with error_class collect and a message naming the quota, and its
// task.log is still collected.
func TestCollectOverQuotaFailsTheTask(t *testing.T) {
	yaml := strings.Replace(fastYAML, "  max_retries: 1\n", "  max_retries: 1\n  collect_max_files: 50\n  collect_max_bytes: 1MiB\n", 1)
	h := newHarness(t, yaml, shellProject(map[string]string{
		"S01-many.md": "echo many; for i in $(seq 1 51); do echo $i > f$i; done\n",
		"S02-big.md":  "echo big; head -c 2097152 /dev/zero > big.bin\n",
		"S03-ok.md":   "for i in $(seq 1 50); do echo $i > f$i; done\n",
	}))
	h.tickUntil("project to finish", func() bool {
		p, _ := h.st.Project(context.Background(), "p")
		return p.State == domain.ProjectDone
	})
	for id, want := range map[string]string{"S01": "collect_max_files (50)", "S02": "collect_max_bytes (1.0 MiB)"} {
		tk := h.task(id)
		if tk.Status != domain.Failed || tk.ErrorClass != classCollect || !strings.Contains(tk.Error, want) || tk.RetriesUsed != 0 {
			t.Errorf("%s: %s class %q retries %d error %q; want failed, collect, not retried, naming %s", id, tk.Status, tk.ErrorClass, tk.RetriesUsed, tk.Error, want)
		}
		entries, err := os.ReadDir(filepath.Join(home.RunsDir(h.home, "p"), id, "output"))
		if err != nil || len(entries) != 0 {
			t.Errorf("%s: runs output holds %d entries (%v), want none", id, len(entries), err)
		}
		if b, err := os.ReadFile(filepath.Join(home.RunsDir(h.home, "p"), id, "task.log")); err != nil || len(b) == 0 {
			t.Errorf("%s: task.log not collected: %q %v", id, b, err)
		}
		if files, _ := h.st.Files(context.Background(), "p", id); len(files) != 0 {
			t.Errorf("%s: manifest %+v, want empty", id, files)
		}
	}
	if tk := h.task("S03"); tk.Status != domain.Completed {
		t.Errorf("S03 (at the file quota) %s: %s", tk.Status, tk.Error)
	}
	if evs := h.events("collect_failed"); len(evs) != 2 {
		t.Errorf("collect_failed events = %+v, want one per refused task", evs)
	}
}

// TestCollectNeverFollowsSymlinks: a task that replaces its output/ by a
// symbolic link to a directory holding a secret gets nothing collected (and
// fails); symbolic links inside output/ are skipped, never followed.
func TestCollectNeverFollowsSymlinks(t *testing.T) {
	secret := t.TempDir()
	if err := os.MkdirAll(filepath.Join(secret, ".ssh"), 0o700); err != nil {
		t.Fatal(err)
	}
	const key = "-----BEGIN OPENSSH PRIVATE KEY----- not really"
	if err := os.WriteFile(filepath.Join(secret, ".ssh", "id_ed25519"), []byte(key), 0o600); err != nil {
		t.Fatal(err)
	}
	// The attacks are an unconfined task's: the sandbox would keep S01 from
	// replacing its output/ and S03 from replacing its task.log.
	h := newHarness(t, unsandboxed(fastYAML, "the tasks replace their output/ and task.log, which only an unconfined task can"), shellProject(map[string]string{
		"S01-swap.md":   fmt.Sprintf("echo hi > kept.txt; cd .. && rm -rf output && ln -s '%s' output\n", secret),
		"S02-inside.md": fmt.Sprintf("echo hi > kept.txt; ln -s '%s' home; ln -s '%s/.ssh/id_ed25519' key\n", secret, secret),
		"S03-log.md":    fmt.Sprintf("echo hi > kept.txt; rm -f ../task.log; ln -s '%s/.ssh/id_ed25519' ../task.log\n", secret),
	}))
	h.tickUntil("project to finish", func() bool {
		p, _ := h.st.Project(context.Background(), "p")
		return p.State == domain.ProjectDone
	})
	if tk := h.task("S01"); tk.Status != domain.Failed || tk.ErrorClass != classCollect || !strings.Contains(tk.Error, "symbolic link") {
		t.Errorf("S01: %s class %q error %q; want failed, collect, naming the symbolic link", tk.Status, tk.ErrorClass, tk.Error)
	}
	if tk := h.task("S03"); tk.Status != domain.Failed || tk.ErrorClass != classCollect || !strings.Contains(tk.Error, "symbolic link") {
		t.Errorf("S03: %s class %q error %q; want failed, collect, naming the symbolic link task.log", tk.Status, tk.ErrorClass, tk.Error)
	}
	if tk := h.task("S02"); tk.Status != domain.Completed {
		t.Errorf("S02: %s %q, want completed", tk.Status, tk.Error)
	}
	files, _ := h.st.Files(context.Background(), "p", "S02")
	if len(files) != 1 || files[0].Path != "kept.txt" {
		t.Errorf("S02 manifest = %+v, want kept.txt only", files)
	}
	// Nothing of the secret reached runs/, by any path.
	_ = filepath.WalkDir(filepath.Join(h.home, "runs"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type()&fs.ModeSymlink != 0 {
			t.Errorf("symbolic link %s in runs/", p)
		}
		if d.Type().IsRegular() {
			if b, _ := os.ReadFile(p); strings.Contains(string(b), key) {
				t.Errorf("%s holds the secret", p)
			}
		}
		return nil
	})
}

// TestCollectFailuresAreBoundedAndShown: a collection that keeps failing
// (here: not enough free space on the controller) is tried
// maxCollectTries times, each failure an event and a warning on the task's
// status line, then the task fails with the error.
func TestCollectFailuresAreBoundedAndShown(t *testing.T) {
	h := newHarness(t, fastYAML, shellProject(map[string]string{
		"S01-out.md": "echo out > out.txt\n",
	}))
	old := diskFree
	diskFree = func(string) (int64, error) { return collectFreeMargin / 2, nil }
	defer func() { diskFree = old }()
	var warnings []string
	h.tickUntil("S01 to fail", func() bool {
		tk := h.task("S01")
		if tk.Warning != "" && (len(warnings) == 0 || warnings[len(warnings)-1] != tk.Warning) {
			warnings = append(warnings, tk.Warning)
			h.clock.Advance(collectRetryWait)
		}
		return tk.Status == domain.Failed
	})
	tk := h.task("S01")
	if tk.ErrorClass != classCollect || !strings.Contains(tk.Error, "not enough free space") || !strings.Contains(tk.Error, "giving up") {
		t.Errorf("S01: class %q error %q; want collect, naming the free space", tk.ErrorClass, tk.Error)
	}
	if len(warnings) != maxCollectTries-1 || !strings.Contains(warnings[0], "try 1 of 3") {
		t.Errorf("warnings on the status line = %q, want one per failed try before the last", warnings)
	}
	if evs := h.events("collect_failed"); len(evs) != maxCollectTries {
		t.Errorf("collect_failed events = %d, want %d", len(evs), maxCollectTries)
	}
	// Given up: no more tries.
	for range 3 {
		h.clock.Advance(collectRetryWait)
		h.tick()
	}
	if evs := h.events("collect_failed"); len(evs) != maxCollectTries {
		t.Errorf("collect_failed events after giving up = %d, want %d", len(evs), maxCollectTries)
	}
}

// TestLaunchPushesASlowBaseTree pushes a base tree that takes longer than
// one remote call may while its bytes keep moving: the task starts once,
// with no retry used, and is not requeued for ever.
func TestLaunchPushesASlowBaseTree(t *testing.T) {
	files := shellProject(map[string]string{
		"S01-use.md":    "cat data.bin | wc -c > size.txt\n",
		"base/data.bin": strings.Repeat("x", 256<<10),
	})
	files["project.yaml"] += "base: base\n"
	h := newHarness(t, fastYAML, files)
	pause := 250 * time.Millisecond // 32 pieces of 8 KiB: about 8 s
	h.shape(&shapedTransport{put: func(p string, r io.Reader) (io.Reader, error) {
		if strings.HasSuffix(p, "/base.tar") { // the base tree, one archive
			return &trickle{r: r, piece: 8 << 10, pause: pause}, nil
		}
		return nil, nil
	}})
	h.tickUntilLong("S01 to complete", 60*time.Second, func() bool { return h.task("S01").Status == domain.Completed })
	tk := h.task("S01")
	if tk.Attempt != 1 || tk.RetriesUsed != 0 {
		t.Errorf("S01 attempt %d retries %d, want one attempt", tk.Attempt, tk.RetriesUsed)
	}
	if evs := append(h.events("push_failed"), h.events("warning")...); len(evs) > 0 {
		t.Errorf("launch troubles: %+v", evs)
	}
}

// TestLaunchPushFailuresAreBounded: a push that keeps failing is tried
// maxPushTries times, each an event, then the attempt fails as a start
// failure that uses a retry.
func TestLaunchPushFailuresAreBounded(t *testing.T) {
	files := shellProject(map[string]string{
		"S01-use.md":    "cat data.bin\n",
		"base/data.bin": "data\n",
	})
	files["project.yaml"] += "base: base\n"
	h := newHarness(t, fastYAML, files)
	h.shape(&shapedTransport{put: func(p string, r io.Reader) (io.Reader, error) {
		if strings.HasSuffix(p, "/base.tar") { // the base tree, one archive
			return nil, errors.New("injected: disk quota exceeded")
		}
		return nil, nil
	}})
	h.tickUntil("first attempt to fail", func() bool { return h.task("S01").RetriesUsed == 1 })
	tk := h.task("S01")
	if tk.ErrorClass != "start" || !strings.Contains(tk.Error, "failed 3 times") || !strings.Contains(tk.Error, "injected") {
		t.Errorf("S01: class %q error %q; want start, naming the tries and the error", tk.ErrorClass, tk.Error)
	}
	if evs := h.events("push_failed"); len(evs) != maxPushTries {
		t.Errorf("push_failed events = %d, want %d", len(evs), maxPushTries)
	}
	h.clock.Advance(time.Minute)
	h.tickUntil("S01 to fail for good", func() bool { return h.task("S01").Status == domain.Failed && h.task("S01").Attempt == 2 })
}

// TestHugeStatusReplyIsAnErrorOfThatNode: a node whose `wrapper status`
// prints more than nodes.MaxExecOutput fails its pull with a clear error
// (the transport suite measures that memory stays bounded).
func TestHugeStatusReplyIsAnErrorOfThatNode(t *testing.T) {
	// A pull's deadline of 20 s: 64 MiB must come through in time on a
	// busy machine, for the cap to be what ends the call.
	h := newHarness(t, strings.Replace(fastYAML, "ssh_connect_timeout: 1s", "ssh_connect_timeout: 10s", 1),
		shellProject(map[string]string{"S01-x.md": "true\n"}))
	h.tick() // installs the wrapper
	fake := filepath.Join(t.TempDir(), "wrapper")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\nexec head -c 100000000 /dev/zero\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	inst := *h.ctl.nodes["local"].installed()
	inst.Path = fake
	h.ctl.nodes["local"].inst.Store(&inst)
	h.tick()
	ns, err := h.st.Nodes(context.Background())
	if err != nil || len(ns) != 1 {
		t.Fatalf("nodes = %+v, %v", ns, err)
	}
	if ns[0].State != "offline" || !strings.Contains(ns[0].LastError, "more than 64 MiB") {
		t.Errorf("node %s, error %q; want offline with the output cap named", ns[0].State, ns[0].LastError)
	}
}

// TestWriteCapped: every collected file (a fetch, an archive's entry, a
// collect stream's) is written by writeCapped: its directories made, its
// mode kept writable by its owner, its sha256 and size returned, its
// bytes drawn from the round's room when it has one, and a file over the
// limit, past the room or whose copy failed removed, its room given back.
func TestWriteCapped(t *testing.T) {
	fail := errors.New("the node went away")
	for _, tc := range []struct {
		name    string
		body    string
		fillErr error
		limit   int64
		room    int64 // the round's room; 0 is none drawn from
		wantErr error
	}{
		{name: "within the limit", body: "hello\n", limit: 6},
		{name: "empty", body: "", limit: 0},
		{name: "over the limit", body: "hello\n", limit: 5, wantErr: errOverQuota},
		{name: "the copy fails", body: "hel", limit: 100, fillErr: fail, wantErr: fail},
		{name: "within the room", body: "hello\n", limit: 100, room: 6},
		{name: "past the room", body: "hello\n", limit: 100, room: 5, wantErr: errRoomSpent},
		{name: "over the limit within the room", body: "hello\n", limit: 5, room: 100, wantErr: errOverQuota},
		{name: "the copy fails within the room", body: "hel", limit: 100, room: 100, fillErr: fail, wantErr: fail},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dst := filepath.Join(t.TempDir(), "a", "b", "f.txt")
			var room *roomClaim
			if tc.room > 0 {
				room = fixedRoom(tc.room)
			}
			sum, n, err := writeCapped(dst, 0o444, tc.limit, room, func(w io.Writer) error {
				if _, err := io.WriteString(w, tc.body); err != nil {
					return err
				}
				return tc.fillErr
			})
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("error %v, want %v", err, tc.wantErr)
			}
			if room != nil {
				left := tc.room - int64(len(tc.body))
				if tc.wantErr != nil {
					left = tc.room
				}
				if got := room.remaining(); got != left {
					t.Errorf("the room has %d left, want %d", got, left)
				}
			}
			if tc.wantErr != nil {
				if _, serr := os.Stat(dst); !errors.Is(serr, fs.ErrNotExist) {
					t.Errorf("a failed file is left behind: %v", serr)
				}
				return
			}
			want := sha256.Sum256([]byte(tc.body))
			if sum != hex.EncodeToString(want[:]) || n != int64(len(tc.body)) {
				t.Errorf("sum %s size %d, want %x %d", sum, n, want, len(tc.body))
			}
			fi, err := os.Stat(dst)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Perm() != 0o644 {
				t.Errorf("the file's mode %v, want 0644 (0444 and its owner's write bit)", fi.Mode().Perm())
			}
		})
	}
}

// TestWriteLocalAllocatesNoCopyBuffer: a collected file is copied through
// a kept buffer, not a new one of 32 KiB each (io.Copy from a tar entry,
// a quarter of the controller's allocations for 200 no-op tasks).
func TestWriteLocalAllocatesNoCopyBuffer(t *testing.T) {
	dir := t.TempDir()
	body := strings.Repeat("a line of task.log\n", 20)
	write := func(i int) {
		// A reader that is no io.WriterTo, as a tar entry is not.
		r := struct{ io.Reader }{strings.NewReader(body)}
		if _, n, err := writeLocal(filepath.Join(dir, strconv.Itoa(i)), 0o644, r, 1<<20, nil); err != nil || n != int64(len(body)) {
			t.Fatalf("writeLocal: %d bytes, %v", n, err)
		}
	}
	write(0)
	const files = 50
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := 1; i <= files; i++ {
		write(i)
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / files; per > 24<<10 {
		t.Errorf("writeLocal of a %d-byte file allocated %d bytes, want under 24 KiB (no 32 KiB buffer of its own; about 1 KiB, more under -race, which drops some pooled ones)", len(body), per)
	}
}

// TestChangedWarning: the warning of an output/ that changed while it was
// collected names each file and what was taken of it, at most
// wire.CollectMaxChanged of them and how many more; none when nothing
// changed.
func TestChangedWarning(t *testing.T) {
	many := wire.CollectEnd{More: 3}
	for i := range wire.CollectMaxChanged {
		many.Changed = append(many.Changed, wire.CollectChange{Path: fmt.Sprintf("f%d", i), Listed: 1, Now: 2})
	}
	for _, tc := range []struct {
		name string
		end  wire.CollectEnd
		want []string // substrings; nil: no warning
	}{
		{name: "nothing changed", end: wire.CollectEnd{Files: 3, Bytes: 10}},
		{name: "grew", end: wire.CollectEnd{Changed: []wire.CollectChange{{Path: "z.txt", Listed: 6, Now: 90}}},
			want: []string{"output/ changed after the attempt's final status", "z.txt (grew past the 6 bytes listed: those taken)", "not taken"}},
		{name: "removed", end: wire.CollectEnd{Changed: []wire.CollectChange{{Path: "gone.txt", Listed: 6, Now: -1}}},
			want: []string{"gone.txt (removed or replaced: not taken)"}},
		{name: "shrank before it was sent", end: wire.CollectEnd{Changed: []wire.CollectChange{{Path: "s.txt", Listed: 6, Now: 2}}},
			want: []string{"s.txt (6 bytes when listed, 2 when taken)"}},
		{name: "many", end: many, want: []string{"f0 (grew", "f9 (grew", "and 3 more"}},
		{name: "task.log alone grew: its own warning, not output/'s", end: wire.CollectEnd{LogGrew: 5}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := changedWarning(tc.end)
			if (got == "") != (tc.want == nil) {
				t.Fatalf("warning %q, want one: %v", got, tc.want != nil)
			}
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("warning %q, want it to say %q", got, w)
				}
			}
		})
	}
}

// TestLogChangedWarning: the warning of an attempt whose task.log changed
// between the reading of its size and its copy says how, by how much (a
// floor, "at least", when its size could not be read again) and where the
// log is on the node; none when it did not change.
func TestLogChangedWarning(t *testing.T) {
	const where = "/w/p/tasks/S01/task.log"
	for _, tc := range []struct {
		name string
		lc   logChange
		want []string // substrings; nil: no warning
	}{
		{name: "unchanged", lc: logChange{path: where}},
		{name: "grew", lc: logChange{grew: 7, path: where},
			want: []string{"task.log grew by 7 bytes after it was read", "the rest stays on node n1 at " + where}},
		{name: "grew, then rotated", lc: logChange{grew: 7, atLeast: true, path: where},
			want: []string{"task.log grew by at least 7 bytes after it was read"}},
		{name: "shrank", lc: logChange{shrank: 3, path: where},
			want: []string{"task.log shrank by 3 bytes after its size was read", "node n1 at " + where, "short of the size read"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := logChangedWarning(tc.lc, "n1")
			if (got == "") != (tc.want == nil) {
				t.Fatalf("warning %q, want one: %v", got, tc.want != nil)
			}
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("warning %q, want it to say %q", got, w)
				}
			}
		})
	}
}
