package controller

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/home"
	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/readmodel"
	"github.com/dispatch-tool/dispatch/store"
)

// forgedYAML has an honest node and a node, evil, whose wrapper answers
// whatever it likes.
const forgedYAML = `
controller:
  ssh_connect_timeout: 1s
  retry_backoff: 10s
  max_retries: 1
nodes:
  - name: local
    slots: 2
    work_dir: WORK
  - name: evil
    slots: 2
    work_dir: WORK-evil
`

// forgeWrapper makes node's wrapper a script that answers `status` with
// reply (a shell word, so $$ is a new number on every call) and fails every
// other command. The node reports a nearly full disk, so nothing is
// launched on it.
func forgeWrapper(t *testing.T, h *harness, node, reply string) {
	t.Helper()
	fake := filepath.Join(t.TempDir(), "wrapper")
	script := "#!/bin/sh\ncase \"$1\" in\nstatus) echo \"" + reply + "\" ;;\n*) echo refused >&2; exit 1 ;;\nesac\n"
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	n := h.ctl.nodes[node]
	n.inst.Store(&nodes.Installed{WorkDir: h.work + "-evil", Path: fake})
}

// TestForgedStaleAttemptHoldsNoTaskOfAnotherNode: a node whose status
// reply claims a live attempt of a task it never ran, with a new attempt
// number on every call, and refuses every kill, neither holds that task
// back from the honest node nor floods the events.
func TestForgedStaleAttemptHoldsNoTaskOfAnotherNode(t *testing.T) {
	h := newHarness(t, forgedYAML, shellProject(map[string]string{"S01-a.md": "echo hi\n"}))
	entry := `{\"project\":\"p\",\"task\":\"S01\",\"dir\":\"/x/$$\",\"alive\":true,\"status\":{\"task\":\"S01\",\"attempt\":$$,\"status\":\"running\"}}`
	forgeWrapper(t, h, "evil", `{\"wrapper_version\":\"x\",\"facts\":{\"disk_free_bytes\":1},\"tasks\":[`+
		entry+","+strings.ReplaceAll(entry, "$$", "1$$")+`]}`)
	h.tickUntil("S01 to complete on the honest node", func() bool { return h.task("S01").Status == domain.Completed })
	if n := h.task("S01").Node; n != "local" {
		t.Errorf("S01 ran on %s, want local", n)
	}
	// One event says the attempt is stale; on a slow machine the ticks
	// until S01 completes may reach the three kill tries, and one more
	// says the kill is given up. No more than that, however many ticks.
	var said, gaveUp int
	for _, e := range h.events("stale") {
		if strings.Contains(e.Message, "could not be killed after") {
			gaveUp++
		} else {
			said++
		}
	}
	if said > 1 || gaveUp > 1 {
		t.Errorf("%d stale and %d give-up events for one forged task; want at most one each: %v", said, gaveUp, h.events("stale"))
	}
}

// TestMergeFileAndDirectoryClashIsAConflict: one task's output has a file
// where another's has a directory of the same name. The merge records a
// conflict and keeps the other version beside it, instead of failing every
// tick and leaving the project unfinished for ever.
func TestMergeFileAndDirectoryClashIsAConflict(t *testing.T) {
	specs := map[string]string{
		"project.yaml": "tool: shell\nverification: false\n",
		"S01-dir.md":   "mkdir -p docs && echo a > docs/a.md\necho x > x\n",
		"S02-file.md":  "echo b > docs\nmkdir -p x && echo y > x/y\n",
		"S99-own.md":   "# Own integration\nls -R . > tree.txt\n",
	}
	h := newHarness(t, "", specs)
	h.tickUntil("project to finish", func() bool {
		p, _ := h.st.Project(context.Background(), "p")
		return p.State == domain.ProjectDone
	})
	runs := home.RunsDir(h.home, "p")
	for name, want := range map[string]string{
		"merged/docs/a.md":         "a\n",
		"merged/docs.S02.conflict": "b\n",
		"merged/x":                 "x\n",
		"merged/x.S02.conflict/y":  "y\n",
	} {
		if b, err := os.ReadFile(filepath.Join(runs, filepath.FromSlash(name))); string(b) != want {
			t.Errorf("%s = %q (%v), want %q", name, b, err, want)
		}
	}
	cs, _ := h.st.Conflicts(context.Background(), "p")
	want := []store.Conflict{{Path: "docs", Tasks: []string{"S01", "S02"}}, {Path: "x", Tasks: []string{"S01", "S02"}}}
	if !reflect.DeepEqual(cs, want) {
		t.Errorf("conflicts = %+v, want %+v", cs, want)
	}
}

// allocated is how many bytes f allocates.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestCollectedFilesAreReadBounded: a collected task.log or verdict.json
// may be as large as collect_max_bytes (a node sends what it likes). The
// report reads the end of the log only, and a verdict over its cap is
// malformed, unread: neither costs the controller memory in proportion.
func TestCollectedFilesAreReadBounded(t *testing.T) {
	dir := t.TempDir()
	big := bytes.Repeat([]byte("a\n"), 16<<20) // 32 MiB, 16 Mi lines
	logPath := filepath.Join(dir, "task.log")
	if err := os.WriteFile(logPath, append(big, "last line\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	var tail string
	if n := allocated(func() { tail = readmodel.LogTail(logPath, 3) }); n > 8<<20 {
		t.Errorf("logTail allocated %d MiB for a 32 MiB log", n>>20)
	}
	if tail != "a\na\nlast line" {
		t.Errorf("tail = %q", tail)
	}
	verdict := filepath.Join(dir, "verdict.json")
	body := append([]byte(`{"pass":false,"issues":["`), bytes.Repeat([]byte("x"), 32<<20)...)
	if err := os.WriteFile(verdict, append(body, `"]}`...), 0o644); err != nil {
		t.Fatal(err)
	}
	var v store.Verdict
	if n := allocated(func() { v = readVerdict(domain.Task{ID: "V01", Status: domain.Completed}, fileVerdict(verdict)) }); n > 8<<20 {
		t.Errorf("readVerdict allocated %d MiB for a 32 MiB verdict", n>>20)
	}
	if v.Pass || len(v.Issues) != 1 || !strings.Contains(v.Issues[0], "larger than") {
		t.Errorf("verdict: pass %v, %d issues, want not passed, with one issue naming the size", v.Pass, len(v.Issues))
	}
}

// lyingWalk is the local transport with a listing that says every file is
// empty, as a hostile node (or files growing after the listing) may.
type lyingWalk struct{ *nodes.Local }

func (l lyingWalk) Walk(ctx context.Context, dir string) ([]nodes.FileInfo, error) {
	files, err := l.Local.Walk(ctx, dir)
	for i := range files {
		files[i].Size = 0
	}
	return files, err
}

// TestCollectFreeSpaceHoldsForWhatIsCopied: the free space a collection
// must leave on the controller holds for the bytes actually copied, not
// for the sizes the node's listing claims: an output/ file is copied no
// further than its listed size (an understated one is taken as listed,
// with a warning), and task.log, which is not listed, stops at the
// margin.
func TestCollectFreeSpaceHoldsForWhatIsCopied(t *testing.T) {
	t.Run("output", func(t *testing.T) {
		h := newHarness(t, fastYAML, shellProject(map[string]string{"S01-big.md": "head -c 4194304 /dev/zero > big.bin\n"}))
		h.ctl = New(Options{Home: h.home, Config: h.cfg, Store: h.st, Transports: map[string]nodes.Transport{"local": lyingWalk{nodes.NewLocal()}},
			Wrappers: wrappers, Now: h.clock.Now, Jitter: func() float64 { return 0 }})
		old := diskFree
		diskFree = func(string) (int64, error) { return collectFreeMargin + 1<<20, nil } // 1 MiB to spare
		defer func() { diskFree = old }()
		h.tickUntil("S01 to be collected", func() bool { return h.collected("S01") })
		fi, err := os.Stat(filepath.Join(home.RunsDir(h.home, "p"), "S01", "output", "big.bin"))
		if err != nil || fi.Size() != 0 {
			t.Errorf("big.bin listed empty: collected %v, %v; want it as listed, empty", fi, err)
		}
		if ws := h.events("warning"); len(ws) != 1 || !strings.Contains(ws[0].Message, "big.bin (grew past the 0 bytes listed") {
			t.Errorf("warnings %+v, want one naming big.bin", ws)
		}
	})
	for name, tc := range map[string]struct{ script, file string }{
		"log": {"head -c 4194304 /dev/zero | tr '\\0' x\n", "task.log"},
	} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, fastYAML, shellProject(map[string]string{"S01-big.md": tc.script}))
			h.ctl = New(Options{Home: h.home, Config: h.cfg, Store: h.st, Transports: map[string]nodes.Transport{"local": lyingWalk{nodes.NewLocal()}},
				Wrappers: wrappers, Now: h.clock.Now, Jitter: func() float64 { return 0 }})
			old := diskFree
			diskFree = func(string) (int64, error) { return collectFreeMargin + 1<<20, nil } // 1 MiB to spare
			defer func() { diskFree = old }()
			h.tickUntil("a collection to fail", func() bool { return len(h.events("collect_failed")) > 0 })
			if ev := h.events("collect_failed")[0]; !strings.Contains(ev.Message, "not enough free space") {
				t.Errorf("collect_failed: %q, want the free space named", ev.Message)
			}
			collected := filepath.Join(home.RunsDir(h.home, "p"), "S01", filepath.FromSlash(tc.file))
			if _, err := os.Stat(collected); err == nil {
				t.Errorf("4 MiB %s collected with 1 MiB to spare", tc.file)
			}
			diskFree = old
			h.clock.Advance(collectRetryWait)
			h.tickUntil("S01 to be collected once there is room", func() bool {
				fi, err := os.Stat(collected)
				return err == nil && fi.Size() == 4<<20
			})
		})
	}
}
