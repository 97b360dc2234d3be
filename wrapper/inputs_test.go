package wrapper

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/taskfiles"
)

// depTask makes a finished dependency's task directory under root: its
// status.json names attempt, its output/ holds files; it returns the
// directory and the manifest the controller would have recorded.
func depTask(t *testing.T, root, id string, attempt int, files map[string]string) (string, []wire.InputFile) {
	t.Helper()
	dir := filepath.Join(root, id)
	var manifest []wire.InputFile
	for name, body := range files {
		p := filepath.Join(dir, "output", name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256([]byte(body))
		manifest = append(manifest, wire.InputFile{Path: name, Size: int64(len(body)), SHA256: hex.EncodeToString(sum[:])})
	}
	st, _ := json.Marshal(wire.Status{Task: id, Attempt: attempt, Status: wire.StatusCompleted})
	if err := os.WriteFile(filepath.Join(dir, taskfiles.FileStatus), st, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, manifest
}

func runInputs(t *testing.T, dir string, req wire.InputsRequest) wire.InputsReply {
	t.Helper()
	doc, _ := json.Marshal(req)
	var out bytes.Buffer
	if err := cmdInputs(context.Background(), []string{"--dir", dir}, bytes.NewReader(doc), &out); err != nil {
		t.Fatalf("inputs: %v", err)
	}
	var reply wire.InputsReply
	if err := json.Unmarshal(out.Bytes(), &reply); err != nil {
		t.Fatalf("reply %q: %v", out.String(), err)
	}
	return reply
}

// TestInputsCopiesVerified: `inputs` copies a dependency's collected
// output from its attempt directory on the node (there, or moved aside to
// attempts/<n>/), each file a copy of its own, never a link to the
// dependency's; a dependency whose files differ from the manifest in any
// way is left out with the reason, for the controller to send, and the
// others are copied. What was in inputs/ before goes.
func TestInputsCopiesVerified(t *testing.T) {
	root := t.TempDir()
	files := map[string]string{"a.txt": "alpha\n", "sub/b.bin": "beta"}
	good, manifest := depTask(t, root, "S01", 1, files)
	moved, movedManifest := depTask(t, root, "S05", 2, files)
	// A later attempt of S05 runs there now: attempt 2 is under attempts/2/.
	aside := filepath.Join(moved, taskfiles.DirAttempts, "2")
	if err := os.MkdirAll(aside, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"output", taskfiles.FileStatus} {
		if err := os.Rename(filepath.Join(moved, name), filepath.Join(aside, name)); err != nil {
			t.Fatal(err)
		}
	}
	now, _ := json.Marshal(wire.Status{Task: "S05", Attempt: 3, Status: wire.StatusRunning})
	if err := os.WriteFile(filepath.Join(moved, taskfiles.FileStatus), now, 0o644); err != nil {
		t.Fatal(err)
	}
	changed, changedManifest := depTask(t, root, "S02", 1, files)
	os.WriteFile(filepath.Join(changed, "output", "a.txt"), []byte("ALPHA\n"), 0o644) // same size
	grown, grownManifest := depTask(t, root, "S03", 1, files)
	os.WriteFile(filepath.Join(grown, "output", "sub", "b.bin"), []byte("beta!"), 0o644)
	gone, goneManifest := depTask(t, root, "S04", 1, files)
	os.Remove(filepath.Join(gone, "output", "a.txt"))
	rerun, rerunManifest := depTask(t, root, "S06", 1, files)
	st, _ := json.Marshal(wire.Status{Task: "S06", Attempt: 2, Status: wire.StatusRunning})
	os.WriteFile(filepath.Join(rerun, taskfiles.FileStatus), st, 0o644)
	linked, linkedManifest := depTask(t, root, "S07", 1, files)
	outside := filepath.Join(t.TempDir(), "a.txt")
	os.WriteFile(outside, []byte(files["a.txt"]), 0o644)
	os.Remove(filepath.Join(linked, "output", "a.txt"))
	os.Symlink(outside, filepath.Join(linked, "output", "a.txt")) // same bytes, through a link

	dir := filepath.Join(t.TempDir(), "task", wire.InputsDir)
	if err := os.MkdirAll(filepath.Join(dir, "stale"), 0o755); err != nil {
		t.Fatal(err)
	}
	reply := runInputs(t, dir, wire.InputsRequest{Copy: []wire.NodeInput{
		{Name: "S01", Dir: good, Attempt: 1, Files: manifest},
		{Name: "S02", Dir: changed, Attempt: 1, Files: changedManifest},
		{Name: "S03", Dir: grown, Attempt: 1, Files: grownManifest},
		{Name: "S04", Dir: gone, Attempt: 1, Files: goneManifest},
		{Name: "S05", Dir: moved, Attempt: 2, Files: movedManifest},
		{Name: "S06", Dir: rerun, Attempt: 1, Files: rerunManifest},
		{Name: "S07", Dir: linked, Attempt: 1, Files: linkedManifest},
		{Name: "../S08", Dir: good, Attempt: 1, Files: manifest},
	}})
	if strings.Join(reply.Copied, ",") != "S01,S05" || reply.Files != 4 || reply.Bytes != 20 {
		t.Errorf("copied %v (%d files, %d bytes), want S01,S05 (4 files, 20 bytes); failed %v", reply.Copied, reply.Files, reply.Bytes, reply.Failed)
	}
	for id, want := range map[string]string{"S02": "differs", "S03": "bytes", "S04": "no such file", "S06": "no longer on this node",
		"S07": "a.txt", "../S08": "not a dependency's name"} {
		if !strings.Contains(reply.Failed[id], want) {
			t.Errorf("%s failed with %q, want it to say %q", id, reply.Failed[id], want)
		}
	}
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if strings.Join(names, ",") != "S01,S05" {
		t.Errorf("inputs/ holds %v, want S01 and S05 only (nothing stale, nothing partial)", names)
	}
	for _, id := range []string{"S01", "S05"} {
		for name, body := range files {
			p := filepath.Join(dir, id, name)
			b, err := os.ReadFile(p)
			if string(b) != body {
				t.Errorf("%s/%s = %q (%v), want %q", id, name, b, err, body)
			}
			var st syscall.Stat_t
			if err := syscall.Stat(p, &st); err != nil || st.Nlink != 1 || st.Mode&0o777 != 0o444 {
				t.Errorf("%s/%s has %d links, mode %o (%v): want a copy of its own, read-only", id, name, st.Nlink, st.Mode&0o777, err)
			}
		}
	}
	// Writing into the copy leaves the dependency's output as it was.
	os.Chmod(filepath.Join(dir, "S01", "a.txt"), 0o644)
	if err := os.WriteFile(filepath.Join(dir, "S01", "a.txt"), []byte("tampered"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(good, "output", "a.txt")); string(b) != files["a.txt"] {
		t.Errorf("the dependency's output changed with its copy: %q", b)
	}
}

// TestUntarMerge: with --merge, the archive's top-level entries replace
// those of the same name in the directory and the others stay (inputs the
// node copied itself); without, the whole directory is replaced.
func TestUntarMerge(t *testing.T) {
	for _, merge := range []bool{true, false} {
		task := t.TempDir()
		dir := filepath.Join(task, wire.InputsDir)
		for _, p := range []string{"S01/kept.txt", "S02/old.txt"} {
			os.MkdirAll(filepath.Join(dir, filepath.Dir(p)), 0o755)
			os.WriteFile(filepath.Join(dir, p), []byte("x"), 0o644)
		}
		archive := filepath.Join(task, "inputs.tar")
		writeArchive(t, archive, []tarEntry{
			{name: "S02/", typ: tar.TypeDir, mode: 0o755},
			{name: "S02/new.txt", body: "new", typ: tar.TypeReg, mode: 0o644},
			{name: "S03/", typ: tar.TypeDir, mode: 0o755},
		})
		args := []string{"--archive", archive, "--dir", dir}
		if merge {
			args = append(args, "--merge")
		}
		var out bytes.Buffer
		if err := cmdUntar(context.Background(), args, nil, &out); err != nil {
			t.Fatal(err)
		}
		var got []string
		filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
			if err == nil && p != dir {
				rel, _ := filepath.Rel(dir, p)
				got = append(got, rel)
			}
			return err
		})
		want := "S02,S02/new.txt,S03"
		if merge {
			want = "S01,S01/kept.txt," + want
		}
		if strings.Join(got, ",") != want {
			t.Errorf("merge %v: %s holds %v, want %s", merge, dir, got, want)
		}
		if entries, _ := os.ReadDir(task); len(entries) != 1 {
			t.Errorf("merge %v: the task directory holds %d entries, want inputs/ alone (no temporary left)", merge, len(entries))
		}
	}
}
