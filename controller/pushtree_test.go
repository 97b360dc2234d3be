package controller

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/readmodel"
	"github.com/dispatch-tool/dispatch/store"
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
	h.ctl.nodes["local"].tr = counter
	h.tickUntil("project to finish", func() bool {
		p, _ := h.st.Project(context.Background(), "p")
		return p.State == store.ProjectDone
	})
	if p, _ := h.st.Project(context.Background(), "p"); p.Result != store.ResultPassed {
		t.Fatalf("result %s: %s", p.Result, h.dump())
	}
	runs := readmodel.RunsDir(h.home, "p")
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
