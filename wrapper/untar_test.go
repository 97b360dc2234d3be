package wrapper

import (
	"archive/tar"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/errkind"
)

type tarEntry struct {
	name, body, link string
	typ              byte
	mode             int64
}

func writeArchive(t *testing.T, path string, entries []tarEntry) {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: e.mode, Size: int64(len(e.body)), Linkname: e.link}
		if e.typ != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if e.typ == tar.TypeReg {
			tw.Write([]byte(e.body))
		}
	}
	tw.Close()
	if err := os.WriteFile(path, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
}

func runUntar(archive, dir string) (string, error) {
	var out bytes.Buffer
	err := cmdUntar(context.Background(), []string{"--archive", archive, "--dir", dir}, nil, &out)
	return out.String(), err
}

func TestUntar(t *testing.T) {
	task := t.TempDir()
	outside := t.TempDir()
	victim := filepath.Join(outside, "victim.txt")
	if err := os.WriteFile(victim, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(task, "base")
	// The task planted a link where the tree goes: it is replaced, and
	// what it names is left alone.
	if err := os.Symlink(outside, dir); err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(task, "base.tar")
	writeArchive(t, archive, []tarEntry{
		{name: "README.md", body: "# r\n", typ: tar.TypeReg, mode: 0o644},
		{name: "src/", typ: tar.TypeDir, mode: 0o755},
		{name: "src/run.sh", body: "#!/bin/sh\n", typ: tar.TypeReg, mode: 0o755},
		{name: "deep/a/b/c.txt", body: "c", typ: tar.TypeReg, mode: 0o444},
		{name: "link", link: "/etc/passwd", typ: tar.TypeSymlink},
	})
	out, err := runUntar(archive, dir)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, `"files":3`) {
		t.Errorf("reply %s", out)
	}
	if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() {
		t.Fatalf("base is not a directory: %v %v", fi, err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "keep" {
		t.Error("the planted link's target changed")
	}
	if fi, err := os.Stat(filepath.Join(dir, "src", "run.sh")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("src/run.sh: %v %v", fi, err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "deep", "a", "b", "c.txt")); err != nil || fi.Mode().Perm() != 0o444 {
		t.Errorf("deep/a/b/c.txt: %v %v", fi, err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "link")); !os.IsNotExist(err) {
		t.Errorf("a link entry was unpacked: %v", err)
	}
	if _, err := os.Stat(archive); !os.IsNotExist(err) {
		t.Errorf("the archive is left: %v", err)
	}

	// A second tree replaces the first whole.
	writeArchive(t, archive, []tarEntry{{name: "only.txt", body: "x", typ: tar.TypeReg, mode: 0o644}})
	if _, err := runUntar(archive, dir); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 || entries[0].Name() != "only.txt" {
		t.Errorf("after the second untar: %v", entries)
	}
}

func TestUntarRefusesEscapes(t *testing.T) {
	for _, name := range []string{"../escape.txt", "/abs.txt", "a/../../escape.txt"} {
		t.Run(name, func(t *testing.T) {
			task := t.TempDir()
			dir := filepath.Join(task, "base")
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "old.txt"), []byte("old"), 0o644); err != nil {
				t.Fatal(err)
			}
			archive := filepath.Join(task, "base.tar")
			writeArchive(t, archive, []tarEntry{{name: name, body: "x", typ: tar.TypeReg, mode: 0o644}})
			_, err := runUntar(archive, dir)
			if err == nil || !strings.Contains(err.Error(), "outside the directory") {
				t.Fatalf("untar of %q: %v", name, err)
			}
			if _, err := os.Stat(filepath.Join(filepath.Dir(task), "escape.txt")); err == nil {
				t.Error("a file was written outside")
			}
			// The old tree stays when the new one cannot be built.
			if b, _ := os.ReadFile(filepath.Join(dir, "old.txt")); string(b) != "old" {
				t.Error("the old tree is gone")
			}
			left, _ := filepath.Glob(dir + ".new.*")
			if len(left) > 0 {
				t.Errorf("left behind: %v", left)
			}
		})
	}
}

func TestUntarRefusesALinkedArchive(t *testing.T) {
	task := t.TempDir()
	real := filepath.Join(task, "real.tar")
	writeArchive(t, real, []tarEntry{{name: "a.txt", body: "x", typ: tar.TypeReg, mode: 0o644}})
	link := filepath.Join(task, "base.tar")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	if _, err := runUntar(link, filepath.Join(task, "base")); err == nil {
		t.Fatal("untar followed a link to its archive")
	}
}

func TestTar(t *testing.T) {
	task := t.TempDir()
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(task, "output")
	for name, body := range map[string]string{"a.txt": "a", "src/b.go": "package b\n", "deep/x/y/z.txt": "z"} {
		p := filepath.Join(out, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	// Links the task made: to a file and to a directory outside.
	os.Symlink(filepath.Join(outside, "secret"), filepath.Join(out, "link"))
	os.Symlink(outside, filepath.Join(out, "dirlink"))
	archive := filepath.Join(task, ".collect.tar")
	// A link planted at the archive's name is replaced, not written through.
	os.Symlink(filepath.Join(outside, "secret"), archive)
	var reply bytes.Buffer
	if err := cmdTar(context.Background(), []string{"--dir", out, "--out", archive}, &reply); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(outside, "secret")); string(b) != "secret" {
		t.Fatal("the planted link's target was written")
	}
	if !strings.Contains(reply.String(), `"files":3`) {
		t.Errorf("reply %s", reply.String())
	}
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got := map[string]string{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		var b bytes.Buffer
		b.ReadFrom(tr)
		got[h.Name] = b.String()
		if h.Mode != 0o640 {
			t.Errorf("%s mode %o", h.Name, h.Mode)
		}
	}
	want := map[string]string{"a.txt": "a", "src/b.go": "package b\n", "deep/x/y/z.txt": "z"}
	if len(got) != len(want) {
		t.Errorf("archive holds %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}

	// Past --max-bytes: too_large, and no archive left.
	err = cmdTar(context.Background(), []string{"--dir", out, "--out", archive, "--max-bytes", "5"}, &reply)
	if errkind.Of(err) != wire.KindTooLarge {
		t.Errorf("over the limit: %v (kind %s)", err, errkind.Of(err))
	}
	if _, err := os.Lstat(archive); !os.IsNotExist(err) {
		t.Errorf("archive left after a failure: %v", err)
	}
	// The directory itself a link: refused.
	if err := cmdTar(context.Background(), []string{"--dir", filepath.Join(out, "dirlink"), "--out", archive}, &reply); err == nil {
		t.Error("tar followed a link given as the directory")
	}
}

// TestUntarFromStdin: --archive - unpacks the tree streamed on standard
// input (the controller sends it so, without a file on the node first).
func TestUntarFromStdin(t *testing.T) {
	task := t.TempDir()
	archive := filepath.Join(t.TempDir(), "a.tar")
	writeArchive(t, archive, []tarEntry{
		{name: "S01/data.txt", body: "made by S01\n", typ: tar.TypeReg, mode: 0o444},
	})
	body, err := os.ReadFile(archive)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(task, "S02", "inputs") // its task directory is not made yet
	var out bytes.Buffer
	if err := cmdUntar(context.Background(), []string{"--archive", "-", "--dir", dir}, bytes.NewReader(body), &out); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "S01", "data.txt")); err != nil || string(b) != "made by S01\n" {
		t.Fatalf("streamed tree: %q, %v", b, err)
	}
	if !strings.Contains(out.String(), `"files":1`) {
		t.Errorf("reply %s", out.String())
	}
	// A stream cut inside a file leaves no tree. (One cut between two
	// entries reads as a shorter tree: the controller, which fails the
	// launch when its stream breaks, is what makes a tree whole.)
	cut := filepath.Join(task, "cut")
	if err := cmdUntar(context.Background(), []string{"--archive", "-", "--dir", cut}, bytes.NewReader(body[:520]), &out); err == nil {
		t.Fatal("a cut stream was unpacked")
	}
	if _, err := os.Lstat(cut); err == nil {
		t.Fatal("a cut stream left a tree")
	}
}
