//go:build unix

package nodes_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dispatch-tool/dispatch/nodes"
)

var testWrappers = nodes.NewWrappers()

// TestMain builds the tests' wrappers into a directory of this run's own:
// a fixed name in /tmp would belong to the first user who ran the tests
// and stop everyone else's.
func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "dispatch-nodes-test-wrappers-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	testWrappers.CacheDir = dir
	return m.Run()
}

func TestEnsureWrapperInstallsAndReplacesAWrongVersion(t *testing.T) {
	ctx := t.Context()
	tr := nodes.NewLocal()
	work := filepath.Join(t.TempDir(), "work")

	inst, err := nodes.EnsureWrapper(ctx, tr, work, testWrappers)
	if err != nil {
		t.Fatal(err)
	}
	if !inst.Reinstalled || inst.OS == "" || !strings.HasPrefix(inst.Path, filepath.Join(work, ".bin", "dispatch-wrapper-")) {
		t.Fatalf("first install: %+v", inst)
	}
	if inst, err = nodes.EnsureWrapper(ctx, tr, work, testWrappers); err != nil || inst.Reinstalled {
		t.Fatalf("second call reinstalled: %+v, %v", inst, err)
	}
	// Something else sits at the versioned path and answers with another
	// version: it is replaced, once.
	if err := os.WriteFile(inst.Path, []byte("#!/bin/sh\necho '{\"version\":\"0.0.1-other\"}'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if inst, err = nodes.EnsureWrapper(ctx, tr, work, testWrappers); err != nil || !inst.Reinstalled {
		t.Fatalf("wrong version not replaced: %+v, %v", inst, err)
	}
}

func TestEnsureWrapperOnAnUnwritableWorkDir(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := nodes.EnsureWrapper(t.Context(), nodes.NewLocal(), filepath.Join(file, "work"), testWrappers)
	if err == nil || !strings.Contains(err.Error(), "install wrapper") || !strings.Contains(err.Error(), "not a directory") {
		t.Fatalf("err = %v, want an install error naming the cause", err)
	}
}
