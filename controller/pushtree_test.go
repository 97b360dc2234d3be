package controller

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/home"
	"github.com/dispatch-tool/dispatch/nodes"
)

// countPuts is a transport that counts its Puts.
type countPuts struct {
	nodes.Transport
	n atomic.Int64
}

func (c *countPuts) Put(ctx context.Context, path string, r io.Reader, mode fs.FileMode) error {
	if strings.Contains(path, "/tasks/") {
		c.n.Add(1) // not the wrapper's installation
	}
	return c.Transport.Put(ctx, path, r, mode)
}

// TestBaseTreeIsOneTransfer: a base tree of thousands of files reaches
// every task whole, with its permissions, in one transfer per task (it
// used to be one per file: a real repository never launched).
func TestBaseTreeIsOneTransfer(t *testing.T) {
	const files = 3000
	specs := map[string]string{
		"project.yaml": "tool: shell\nbase: repo\nintegration: false\n",
		"S01-count.md": "find . -type f | wc -l > ../count.txt\nmv ../count.txt count.txt\ntest -x bin/run.sh && echo exec > mode.txt\n",
		"S02-count.md": "find . -type f | wc -l > ../count.txt\nmv ../count.txt count.txt\n",
	}
	for i := range files - 1 {
		specs[fmt.Sprintf("repo/pkg%02d/file%04d.go", i%40, i)] = fmt.Sprintf("package pkg // %d\n", i)
	}
	yaml := `
nodes:
  - name: local
    slots: 2
    work_dir: WORK
`
	h := newHarness(t, yaml, specs)
	bin := filepath.Join(h.home, "specs", "p", "repo", "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "run.sh"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	counter := &countPuts{Transport: h.ctl.nodes["local"].tr}
	h.useTransport("local", counter)
	h.tickUntil("project to finish", func() bool {
		p, _ := h.st.Project(context.Background(), "p")
		return p.State == domain.ProjectDone
	})
	if p, _ := h.st.Project(context.Background(), "p"); p.Result != domain.ResultPassed {
		t.Fatalf("result %s: %s", p.Result, h.dump())
	}
	runs := home.RunsDir(h.home, "p")
	for _, id := range []string{"S01", "S02"} {
		b, err := os.ReadFile(filepath.Join(runs, id, "output", "count.txt"))
		if err != nil || string(b) != fmt.Sprintf("%d\n", files) {
			t.Errorf("%s saw %q files in its workspace (%v), want %d", id, b, err, files)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(runs, "S01", "output", "mode.txt")); string(b) != "exec\n" {
		t.Errorf("bin/run.sh lost its executable bit")
	}
	if n := counter.n.Load(); n != 2 {
		t.Errorf("%d transfers for two tasks' base trees of %d files, want one each", n, files)
	}
}

// countGets is a transport that counts its Gets.
type countGets struct {
	nodes.Transport
	n atomic.Int64
}

func (c *countGets) Get(ctx context.Context, path string, w io.Writer) error {
	c.n.Add(1)
	return c.Transport.Get(ctx, path, w)
}

// TestLargeOutputIsOneTransfer: an output/ of thousands of files comes
// back whole, with its permissions and its manifest, in a few transfers
// (it used to be one per file).
func TestLargeOutputIsOneTransfer(t *testing.T) {
	const files = 2000
	h := newHarness(t, fastYAML, shellProject(map[string]string{
		// Shell builtins only in the loop: a fork per file would make
		// the test about a slow machine's fork.
		"S01-many.md": fmt.Sprintf("mkdir d0 d1 d2 d3 d4 d5 d6 d7 d8 d9 d10 d11 d12 d13 d14 d15 d16 d17 d18 d19\ni=0; while [ $i -lt %d ]; do echo $i > d$((i %% 20))/f$i.txt; i=$((i+1)); done\nprintf '#!/bin/sh\\n' > run.sh; chmod 755 run.sh\n", files-1),
	}))
	counter := &countGets{Transport: h.ctl.nodes["local"].tr}
	h.useTransport("local", counter)
	h.tickUntil("S01 to be collected", func() bool {
		runs, _ := h.st.Attempts(context.Background(), "p", "S01")
		return len(runs) == 1 && !runs[0].CollectedAt.IsZero()
	})
	out := filepath.Join(home.RunsDir(h.home, "p"), "S01", "output")
	n := 0
	filepath.WalkDir(out, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			n++
		}
		return nil
	})
	if n != files {
		t.Errorf("%d files collected, want %d", n, files)
	}
	if b, _ := os.ReadFile(filepath.Join(out, "d7", "f1327.txt")); string(b) != "1327\n" {
		t.Errorf("d7/f1327.txt = %q", b)
	}
	if fi, err := os.Stat(filepath.Join(out, "run.sh")); err != nil || fi.Mode().Perm()&0o111 == 0 {
		t.Errorf("run.sh lost its executable bit: %v %v", fi, err)
	}
	manifest, err := h.st.Files(context.Background(), "p", "S01")
	if err != nil || len(manifest) != files {
		t.Errorf("manifest of %d files (%v), want %d", len(manifest), err, files)
	}
	if g := counter.n.Load(); g > 10 {
		t.Errorf("%d transfers for an output of %d files, want a few", g, files)
	}
}

// forgedArchive is a local node whose `wrapper tar` archive is replaced
// by one a hostile node made.
type forgedArchive struct {
	*nodes.Local
	archive []byte
}

func (f *forgedArchive) Get(ctx context.Context, p string, w io.Writer) error {
	if strings.HasSuffix(p, "/.output.tar") {
		_, err := w.Write(f.archive)
		return err
	}
	return f.Local.Get(ctx, p, w)
}

func tarOf(t *testing.T, names ...string) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, n := range names {
		if err := tw.WriteHeader(&tar.Header{Name: n, Typeflag: tar.TypeReg, Mode: 0o644, Size: 2}); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte("x\n"))
	}
	tw.Close()
	return b.Bytes()
}

// TestForgedOutputArchive: whatever archive a node sends in place of
// output/, nothing lands outside runs/<p>/<ID>/output/, and a name given
// twice fails the collection instead of being taken for two files.
func TestForgedOutputArchive(t *testing.T) {
	script := "for i in $(seq 1 30); do echo $i > f$i.txt; done\n"
	for name, tc := range map[string]struct {
		names   []string
		collect bool
	}{
		"escaping names are kept inside": {names: []string{"../../escape.txt", "/abs.txt", "ok.txt"}, collect: true},
		"a name twice":                   {names: []string{"a.txt", "./a.txt"}},
	} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, fastYAML, shellProject(map[string]string{"S01-many.md": script}))
			h.useTransport("local", &forgedArchive{Local: nodes.NewLocal(), archive: tarOf(t, tc.names...)})
			h.tickUntil("S01 to end", func() bool {
				evs := h.events("collect_failed")
				runs, _ := h.st.Attempts(context.Background(), "p", "S01")
				return len(evs) > 0 || len(runs) == 1 && !runs[0].CollectedAt.IsZero()
			})
			runs := home.RunsDir(h.home, "p")
			for _, p := range []string{filepath.Join(h.home, "escape.txt"), filepath.Join(runs, "escape.txt"),
				filepath.Join(runs, "S01", "escape.txt"), "/abs.txt"} {
				if _, err := os.Stat(p); err == nil {
					t.Errorf("%s was written", p)
				}
			}
			collected := len(h.events("collect_failed")) == 0
			if collected != tc.collect {
				t.Fatalf("collected = %v, want %v; events %+v", collected, tc.collect, h.events("collect_failed"))
			}
			if tc.collect {
				for _, f := range []string{"escape.txt", "abs.txt", "ok.txt"} {
					if _, err := os.Stat(filepath.Join(runs, "S01", "output", f)); err != nil {
						t.Errorf("output/%s: %v", f, err)
					}
				}
			}
		})
	}
}
