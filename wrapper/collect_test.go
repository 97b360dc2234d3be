package wrapper

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/errkind"
	"github.com/dispatch-tool/dispatch/wrapper/taskfiles"
)

// collectTask makes a finished attempt in dir: status.json, task.log and
// the output/ files given (a value "->X" makes a link to X).
func collectTask(t *testing.T, dir string, attempt int, log string, files map[string]string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, "output"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := taskfiles.WriteStatusDurable(dir, &wire.Status{Attempt: attempt, Status: wire.StatusCompleted}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "task.log"), []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, body := range files {
		p := filepath.Join(dir, "output", name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if target, ok := strings.CutPrefix(body, "->"); ok {
			if err := os.Symlink(target, p); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.WriteFile(p, []byte(body), 0o640); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCollectCommand: `collect` sends, in one tar stream and in request
// order, each attempt's head, task.log and the regular files of output/
// (a link in it left out, counted); it finds an attempt moved to
// attempts/<n>/, says when one is gone, and never follows a link: not an
// output/ that is one, not a task.log that is one. An output/ over the
// quotas is listed and not sent.
func TestCollectCommand(t *testing.T) {
	root := t.TempDir()
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	a := filepath.Join(root, "A")
	collectTask(t, a, 1, "log A\n", map[string]string{"x.txt": "x\n", "d/y.txt": "yy\n", "passwd": "->" + secret})
	b := filepath.Join(root, "B") // attempt 1 moved aside by attempt 2
	collectTask(t, filepath.Join(b, "attempts", "1"), 1, "log B1\n", map[string]string{"old.txt": "o\n"})
	collectTask(t, b, 2, "log B2\n", nil)
	c := filepath.Join(root, "C") // output/ and task.log are links
	collectTask(t, c, 1, "", nil)
	for _, p := range []string{filepath.Join(c, "output"), filepath.Join(c, "task.log")} {
		os.RemoveAll(p)
		if err := os.Symlink(filepath.Dir(secret), p); err != nil {
			t.Fatal(err)
		}
	}
	big := filepath.Join(root, "Big")
	collectTask(t, big, 1, "big\n", map[string]string{"1": "1234", "2": "5678"})
	req := wire.CollectRequest{Attempts: []wire.CollectItem{
		{Dir: a, Attempt: 1, Output: true, MaxFiles: 10, MaxBytes: 100},
		{Dir: b, Attempt: 1, Output: true, MaxFiles: 10, MaxBytes: 100},
		{Dir: b, Attempt: 3, Output: true, MaxFiles: 10, MaxBytes: 100},
		{Dir: c, Attempt: 1, Output: true, MaxFiles: 10, MaxBytes: 100},
		{Dir: big, Attempt: 1, Output: true, MaxFiles: 10, MaxBytes: 7},
		{Dir: a, Attempt: 1, MaxFiles: 10, MaxBytes: 100}, // task.log only
	}}
	in, _ := json.Marshal(req)
	var out, errOut bytes.Buffer
	if code := Main([]string{"collect"}, bytes.NewReader(in), &out, &errOut); code != 0 {
		t.Fatalf("collect: exit %d: %s %s", code, out.String(), errOut.String())
	}
	heads := map[string]wire.CollectHead{}
	files := map[string]string{}
	var order []string
	tr := tar.NewReader(&out)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(tr)
		order = append(order, h.Name)
		if i, ok := strings.CutSuffix(h.Name, "/"+wire.CollectHeadName); ok {
			var head wire.CollectHead
			if err := json.Unmarshal(body, &head); err != nil {
				t.Fatal(err)
			}
			heads[i] = head
			continue
		}
		if strings.HasSuffix(h.Name, "/"+wire.CollectEndName) {
			continue
		}
		files[h.Name] = string(body)
	}
	last := map[string]string{} // each attempt's last entry: its end
	for _, name := range order {
		i, _, _ := strings.Cut(name, "/")
		last[i] = name
	}
	for i := range 6 {
		if want := fmt.Sprintf("%d/%s", i, wire.CollectEndName); last[fmt.Sprint(i)] != want {
			t.Errorf("attempt %d's last entry is %q, want %q", i, last[fmt.Sprint(i)], want)
		}
	}
	for i, want := range map[string]wire.CollectHead{
		"0": {Found: true, Log: wire.CollectSent, LogSize: 6, Output: wire.CollectSent, Files: 3, Bytes: 5},
		"1": {Found: true, Moved: true, Log: wire.CollectSent, LogSize: 7, Output: wire.CollectSent, Files: 1, Bytes: 2},
		"2": {},
		"3": {Found: true, Log: wire.CollectNotFollowed, Output: wire.CollectNotFollowed},
		"4": {Found: true, Log: wire.CollectSent, LogSize: 4, Output: wire.CollectOverQuota, Files: 2, Bytes: 8},
		"5": {Found: true, Log: wire.CollectSent, LogSize: 6},
	} {
		if heads[i] != want {
			t.Errorf("head %s = %+v, want %+v", i, heads[i], want)
		}
	}
	want := map[string]string{"0/task.log": "log A\n", "0/output/x.txt": "x\n", "0/output/d/y.txt": "yy\n",
		"1/task.log": "log B1\n", "1/output/old.txt": "o\n", "4/task.log": "big\n", "5/task.log": "log A\n"}
	if len(files) != len(want) {
		t.Errorf("files sent %v, want %v", files, want)
	}
	for name, body := range want {
		if files[name] != body {
			t.Errorf("%s = %q, want %q", name, files[name], body)
		}
	}
	if order[0] != "0/"+wire.CollectHeadName || order[len(order)-1] != "5/"+wire.CollectEndName {
		t.Errorf("entries out of order: %v", order)
	}
}

// TestCollectCommandRefusesABadRequest: a request that is not one, or
// that names a relative task directory, is a usage error before anything
// is sent.
func TestCollectCommandRefusesABadRequest(t *testing.T) {
	for _, in := range []string{"not json", `{"attempts":[{"dir":"rel/x","attempt":1}]}`, `{"attempts":[{"dir":"/a/../b","attempt":1}]}`} {
		var out, errOut bytes.Buffer
		err := cmdCollect(context.Background(), nil, strings.NewReader(in), &out, &errOut)
		var ce *errkind.Error
		if !errors.As(err, &ce) || ce.Kind != wire.KindUsage || out.Len() != 0 || !strings.Contains(errOut.String(), `"kind":"usage"`) {
			t.Errorf("collect of %q: %v, %d bytes out, stderr %q; want a usage error said on stderr and nothing sent", in, err, out.Len(), errOut.String())
		}
	}
}
