//go:build unix

package nodes_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/internal/sshdtest"
	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/nodes/sshnode"
)

// otherUID stands for another user of the node.
const otherUID = 12345

// TestUnsafeWorkDirIsRefused: a work_dir, .bin or wrapper that another user
// could have written is refused before anything in it runs, on the local
// node and over SSH; a fresh work_dir is created private.
func TestUnsafeWorkDirIsRefused(t *testing.T) {
	version, err := testWrappers.Version()
	if err != nil {
		t.Fatal(err)
	}
	type setup func(t *testing.T, work, bin string)
	cases := []struct {
		name  string
		setup setup
		want  string
	}{
		{"work_dir open to everyone", func(t *testing.T, work, bin string) { chmod(t, work, 0o777) }, "writable by its group or by others (mode 0777)"},
		{".bin made by another user", func(t *testing.T, work, bin string) { chown(t, filepath.Dir(bin), otherUID) }, fmt.Sprintf("belongs to uid %d", otherUID)},
		{"wrapper writable by its group", func(t *testing.T, work, bin string) { chmod(t, bin, 0o775) }, "writable by its group or by others"},
		{".bin is a link", func(t *testing.T, work, bin string) {
			other := t.TempDir()
			if err := os.Rename(filepath.Dir(bin), filepath.Join(other, ".bin")); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(filepath.Join(other, ".bin"), filepath.Dir(bin)); err != nil {
				t.Fatal(err)
			}
		}, "is a symbolic link"},
	}
	cases = append(cases, struct {
		name  string
		setup setup
		want  string
	}{"work_dir links to a directory open to everyone", func(t *testing.T, work, bin string) {
		target := filepath.Join(filepath.Dir(work), "target")
		if err := os.Rename(work, target); err != nil {
			t.Fatal(err)
		}
		chmod(t, target, 0o777)
		if err := os.Symlink(target, work); err != nil {
			t.Fatal(err)
		}
	}, "writable by its group or by others (mode 0777)"})
	run := func(t *testing.T, open func(t *testing.T) (nodes.Transport, string)) {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				tr, root := open(t)
				work := filepath.Join(root, "work")
				bin := filepath.Join(work, ".bin", "dispatch-wrapper-"+version)
				// Someone else's wrapper sits where ours goes: it must never run.
				marker := filepath.Join(root, "planted-wrapper-ran")
				if err := os.MkdirAll(filepath.Dir(bin), 0o700); err != nil {
					t.Fatal(err)
				}
				chmod(t, work, 0o700)
				script := fmt.Sprintf("#!/bin/sh\ntouch '%s'\necho '{\"version\":\"%s\",\"os\":\"linux\",\"arch\":\"amd64\"}'\n", marker, version)
				if err := os.WriteFile(bin, []byte(script), 0o700); err != nil {
					t.Fatal(err)
				}
				tc.setup(t, work, bin)
				_, err := nodes.EnsureWrapper(t.Context(), tr, work, testWrappers)
				var ue *nodes.UnsafeWorkDirError
				if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "fix:") {
					t.Fatalf("EnsureWrapper: %v; want an unsafe work_dir error saying %q and the fix", err, tc.want)
				}
				if _, err := os.Stat(marker); err == nil {
					t.Fatal("the planted wrapper ran")
				}
			})
		}
		t.Run("work_dir is the user's link to a private directory", func(t *testing.T) {
			tr, root := open(t)
			target := filepath.Join(root, "data")
			if err := os.Mkdir(target, 0o700); err != nil {
				t.Fatal(err)
			}
			work := filepath.Join(root, "work")
			if err := os.Symlink(target, work); err != nil {
				t.Fatal(err)
			}
			if _, err := nodes.EnsureWrapper(t.Context(), tr, work, testWrappers); err != nil {
				t.Fatalf("a work_dir linked to a private directory: %v", err)
			}
		})
		t.Run("fresh work_dir is private", func(t *testing.T) {
			tr, root := open(t)
			work := filepath.Join(root, "a", "work")
			inst, err := nodes.EnsureWrapper(t.Context(), tr, work, testWrappers)
			if err != nil {
				t.Fatal(err)
			}
			for path, want := range map[string]os.FileMode{work: 0o700, filepath.Dir(inst.Path): 0o700, inst.Path: 0o700} {
				if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != want {
					t.Errorf("%s: mode %v (%v), want %04o", path, fi.Mode().Perm(), err, want)
				}
			}
		})
	}
	t.Run("local", func(t *testing.T) {
		run(t, func(t *testing.T) (nodes.Transport, string) { return nodes.NewLocal(), t.TempDir() })
	})
	t.Run("ssh", func(t *testing.T) {
		sshdtest.Require(t)
		c := sshdtest.NewClient(t)
		s := c.StartServer(t, "workdir")
		c.Trust(t, s)
		run(t, func(t *testing.T) (nodes.Transport, string) {
			dir := filepath.Join(s.WorkDir, strings.ReplaceAll(t.Name(), "/", "_"))
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			return sshTo(t, c, s), dir
		})
	})
}

// sshTo is the SSH transport from client c to server s; this file does not
// share the helpers of the SSH client's own tests.
func sshTo(t *testing.T, c *sshdtest.Client, s *sshdtest.Server) nodes.Transport {
	t.Helper()
	tr, err := sshnode.New(sshnode.Config{Node: "n1", Target: fmt.Sprintf("%s@127.0.0.1:%d", c.User, s.Port),
		Env: sshnode.Env{Home: c.Home, ConfigFile: c.SSHConfig, User: c.User}, ConnectTimeout: 3 * time.Second, AgentSocket: "/nonexistent"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

func chmod(t *testing.T, path string, mode os.FileMode) {
	t.Helper()
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

func chown(t *testing.T, path string, uid int) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to give a directory to another user")
	}
	if err := os.Lchown(path, uid, uid); err != nil {
		t.Fatal(err)
	}
}
