package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/control"
	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/store"
)

// runIn runs dispatch in dir as its working directory.
func runIn(t *testing.T, dir string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	cmd, stdout, stderr := dispatchCmd(ctx, nil, args...)
	cmd.Dir = dir
	return wait(t, ctx, cmd, stdout, stderr)
}

// waitDetachedDone waits for the background controller of home to finish
// project p and exit.
func waitDetachedDone(t *testing.T, home, p string) {
	t.Helper()
	pollUntil(t, 60*time.Second, "the detached controller to finish "+p, func() bool {
		st, err := store.OpenReadOnly(context.Background(), filepath.Join(home, "dispatch.db"))
		if err != nil {
			return false
		}
		defer st.Close()
		proj, err := st.Project(context.Background(), p)
		return err == nil && proj.State == domain.ProjectDone
	})
	pollUntil(t, 30*time.Second, "the background controller to exit", func() bool {
		_, err := os.Stat(filepath.Join(home, "dispatch.pid"))
		return os.IsNotExist(err) && !control.Running(home)
	})
}

// TestDetachRelativeHome: `start --detach` with the home as the current
// directory (no --home) or given as a relative --home runs the project to
// the end in the background (the background controller runs in "/").
func TestDetachRelativeHome(t *testing.T) {
	t.Run("cwd", func(t *testing.T) {
		home, _ := opsHome(t, map[string]map[string]string{"p": {"S01-a.md": "echo a > a.txt\n"}})
		r := runIn(t, home, "start", "p", "--detach")
		if r.code != 0 || !strings.Contains(r.stdout, "in the background") {
			t.Fatalf("start --detach in the home: %s", r)
		}
		waitDetachedDone(t, home, "p")
		if got := readFile(t, filepath.Join(home, "runs", "p", "S01", "output", "a.txt")); got != "a\n" {
			t.Fatalf("a.txt = %q\n%s", got, readFile(t, filepath.Join(home, "dispatch.log")))
		}
	})
	t.Run("relative --home and --config", func(t *testing.T) {
		home, _ := opsHome(t, map[string]map[string]string{"p": {"S01-a.md": "echo a > a.txt\n"}})
		if err := os.Rename(filepath.Join(home, "nodes.yaml"), filepath.Join(home, "cluster.yaml")); err != nil {
			t.Fatal(err)
		}
		parent := filepath.Dir(home)
		rel := filepath.Base(home)
		r := runIn(t, parent, "--home", rel, "--config", filepath.Join(rel, "cluster.yaml"), "start", "p", "--detach", "--poll", "200ms")
		if r.code != 0 || !strings.Contains(r.stdout, "in the background") {
			t.Fatalf("start --detach --home %s: %s", rel, r)
		}
		waitDetachedDone(t, home, "p")
		if got := readFile(t, filepath.Join(home, "runs", "p", "S01", "output", "a.txt")); got != "a\n" {
			t.Fatalf("a.txt = %q\n%s", got, readFile(t, filepath.Join(home, "dispatch.log")))
		}
	})
}

// TestProjectsNamedLikeHelp: projects named h and help are projects, not
// requests for help, in every command that takes a project.
func TestProjectsNamedLikeHelp(t *testing.T) {
	home, _ := opsHome(t, map[string]map[string]string{
		"h":    {"S01-a.md": "echo h > h.txt\n"},
		"help": {"S01-a.md": "echo help > help.txt\n"},
	})
	for _, p := range []string{"h", "help"} {
		if r := runDispatch(t, nil, "--home", home, "validate", p); r.code != 0 || !strings.Contains(r.stdout, p+": 1 tasks") {
			t.Errorf("validate %s: %s", p, r)
		}
		if r := runDispatch(t, nil, "--home", home, "start", p); r.code != 0 || !strings.Contains(r.stdout, "report:") {
			t.Errorf("start %s: %s", p, r)
		}
		if got := readFile(t, filepath.Join(home, "runs", p, "S01", "output", p+".txt")); got != p+"\n" {
			t.Errorf("%s.txt = %q", p, got)
		}
		if r := runDispatch(t, nil, "--home", home, "status", p); r.code != 0 || !strings.HasPrefix(r.stdout, p+" — phase") {
			t.Errorf("status %s: %s", p, r)
		}
		if r := runDispatch(t, nil, "--home", home, "report", p); r.code != 0 || !strings.Contains(r.stdout, "S01") || strings.Contains(r.stdout, "USAGE") {
			t.Errorf("report %s: %s", p, r)
		}
		for _, cmd := range [][]string{{"events", p}, {"logs", p, "S01"}, {"retry", p, "S01"}, {"cancel", p, "S01"}, {"stop", p}, {"cleanup", p, "--yes"}} {
			r := runDispatch(t, nil, append([]string{"--home", home}, cmd...)...)
			if strings.Contains(r.stdout, "USAGE:") || strings.Contains(r.stdout, "NAME:") {
				t.Errorf("%s printed help: %s", strings.Join(cmd, " "), r)
			}
		}
	}
	// --help and -h still show a command's help.
	for _, flag := range []string{"--help", "-h"} {
		if r := runDispatch(t, nil, "validate", flag); r.code != 0 || !strings.Contains(r.stdout, "dispatch validate [command options] <project>") {
			t.Errorf("validate %s: %s", flag, r)
		}
	}
}

// TestConcurrentStarts: two starts launched together on one home both
// succeed: one becomes the controller, the other hands its project to it,
// even when it asks before the controller listens on its socket.
func TestConcurrentStarts(t *testing.T) {
	for round := range 3 {
		home, _ := opsHome(t, map[string]map[string]string{
			"a": {"S01-a.md": "sleep 1; echo a > a.txt\n"},
			"b": {"S01-b.md": "sleep 1; echo b > b.txt\n"},
		})
		waitA := startBackground(t, nil, "--home", home, "start", "a")
		waitB := startBackground(t, nil, "--home", home, "start", "b")
		ra, rb := waitA(), waitB()
		if ra.code != 0 || rb.code != 0 {
			t.Fatalf("round %d: start a: %s\nstart b: %s", round, ra, rb)
		}
		handed := 0
		for _, r := range []result{ra, rb} {
			if strings.Contains(r.stdout, "handed to the running controller") {
				handed++
			}
		}
		if handed != 1 {
			t.Fatalf("round %d: want exactly one start handed off\nstart a: %s\nstart b: %s", round, ra, rb)
		}
		for _, p := range []string{"a", "b"} {
			if got := readFile(t, filepath.Join(home, "runs", p, "S01", "output", p+".txt")); got != p+"\n" {
				t.Errorf("round %d: %s.txt = %q", round, p, got)
			}
		}
	}
}

// TestBadLocalFiles: a nodes.yaml that is a FIFO or too large, and a spec
// that is a symbolic link out of the specs directory, stop validate and
// start with exit 2, a message naming the file, and nothing written.
func TestBadLocalFiles(t *testing.T) {
	tests := []struct {
		name string
		make func(t *testing.T, home string)
		want []string
	}{
		{"nodes.yaml is a FIFO", func(t *testing.T, home string) {
			path := filepath.Join(home, "nodes.yaml")
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			if err := syscall.Mkfifo(path, 0o644); err != nil {
				t.Skipf("mkfifo: %v", err)
			}
		}, []string{"nodes.yaml: not a regular file", "fix:"}},
		{"nodes.yaml is 25 MB", func(t *testing.T, home string) {
			path := filepath.Join(home, "nodes.yaml")
			f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, err := f.WriteString(strings.Repeat("# filler line of a huge file\n", 25<<20/29)); err != nil {
				t.Fatal(err)
			}
		}, []string{"nodes.yaml: the file is larger than 1 MiB", "fix:"}},
		{"spec links to a private key", func(t *testing.T, home string) {
			key := filepath.Join(t.TempDir(), "id_ed25519")
			writeFile(t, key, "PRIVATE KEY\n")
			if err := os.Symlink(key, filepath.Join(home, "specs", "p", "S02-key.md")); err != nil {
				t.Fatal(err)
			}
		}, []string{"S02-key.md: is a symbolic link to " + "", "outside the specs directory", "fix:"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			home, work := opsHome(t, map[string]map[string]string{"p": {"S01-a.md": "echo a\n"}})
			tc.make(t, home)
			before := tree(t, home)
			for _, cmd := range []string{"validate", "start"} {
				r := runDispatch(t, nil, "--home", home, cmd, "p")
				if r.code != 2 {
					t.Errorf("%s: want exit 2: %s", cmd, r)
				}
				for _, w := range tc.want {
					if !strings.Contains(r.stderr, w) {
						t.Errorf("%s: stderr lacks %q: %s", cmd, w, r)
					}
				}
				if strings.Contains(r.stdout+r.stderr, "PRIVATE") {
					t.Errorf("%s printed the link's target: %s", cmd, r)
				}
			}
			assertTreeUnchanged(t, home, before)
			if _, err := os.Stat(work); !os.IsNotExist(err) {
				t.Errorf("the node's work_dir was created: %v", err)
			}
		})
	}
}
