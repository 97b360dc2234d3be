package collect

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/errkind"
)

// TestReadRequest: what the controller may ask for, and what is refused as
// a usage error before anything is sent.
func TestReadRequest(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     int    // attempts read
		refused  string // part of the usage error; "" for none
	}{
		{"two attempts", `{"attempts":[{"dir":"/w/p/tasks/S01","attempt":1},{"dir":"/w/p/tasks/S02","attempt":3}]}`, 2, ""},
		{"none", `{"attempts":[]}`, 0, ""},
		{"not json", "not json", 0, "not a collect request"},
		{"relative dir", `{"attempts":[{"dir":"rel/x","attempt":1}]}`, 0, "absolute, clean"},
		{"dir with ..", `{"attempts":[{"dir":"/a/../b","attempt":1}]}`, 0, "absolute, clean"},
		{"attempt 0", `{"attempts":[{"dir":"/a/b","attempt":0}]}`, 0, "attempt of 1 or more"},
		{"too large", `{"attempts":[` + strings.Repeat(" ", MaxRequest) + `]}`, 0, "larger than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := ReadRequest(strings.NewReader(tc.in))
			if tc.refused == "" {
				if err != nil || len(req.Attempts) != tc.want {
					t.Fatalf("got %d attempts, %v; want %d", len(req.Attempts), err, tc.want)
				}
				return
			}
			var ce *errkind.Error
			if !errors.As(err, &ce) || ce.Kind != wire.KindUsage || !strings.Contains(err.Error(), tc.refused) {
				t.Fatalf("err %v; want a usage error saying %q", err, tc.refused)
			}
		})
	}
}

// TestSendOutputAsListed: output/ is sent as listOutput listed it,
// whatever changes before each file is sent: a file that grew is sent up
// to its listed size, one removed is not sent, one made after the listing
// is not seen, one replaced by a link is not followed; the end says what
// was sent and what changed.
func TestSendOutputAsListed(t *testing.T) {
	src := t.TempDir()
	out := filepath.Join(src, "output")
	for name, body := range map[string]string{"grew.txt": "first\n", "gone.txt": "x\n", "same.txt": "same\n", "linked.txt": "l\n"} {
		if err := os.MkdirAll(out, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(out, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var head wire.CollectHead
	root, listed := listOutput(src, wire.CollectItem{MaxFiles: 10, MaxBytes: 1 << 20}, &head)
	if root == nil {
		t.Fatalf("output/ not opened: %+v", head)
	}
	defer root.Close()
	if head.Files != 4 || head.Bytes != 15 {
		t.Fatalf("head %+v, want 4 files, 15 bytes", head)
	}
	f, err := os.OpenFile(filepath.Join(out, "grew.txt"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("more\n")
	f.Close()
	os.Remove(filepath.Join(out, "gone.txt"))
	os.Remove(filepath.Join(out, "linked.txt"))
	if err := os.Symlink("same.txt", filepath.Join(out, "linked.txt")); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(out, "new.txt"), []byte("new\n"), 0o644)

	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	end, err := sendOutput(tw, "0", root, listed)
	if err != nil {
		t.Fatal(err)
	}
	tw.Close()
	got := entriesOf(t, &b)
	want := map[string]string{"0/output/grew.txt": "first\n", "0/output/same.txt": "same\n"}
	if !maps.Equal(got, want) {
		t.Errorf("sent %q, want %q", got, want)
	}
	wantEnd := wire.CollectEnd{Files: 2, Bytes: 11, Changed: []wire.CollectChange{
		{Path: "gone.txt", Listed: 2, Now: -1}, {Path: "grew.txt", Listed: 6, Now: 11}, {Path: "linked.txt", Listed: 2, Now: -1}}}
	if end.Files != wantEnd.Files || end.Bytes != wantEnd.Bytes || !slices.Equal(end.Changed, wantEnd.Changed) {
		t.Errorf("end %+v, want %+v", end, wantEnd)
	}
}

// TestCollectEndNamesAtMostTen: the end entry names at most
// wire.CollectMaxChanged changed files and counts the rest.
func TestCollectEndNamesAtMostTen(t *testing.T) {
	var end wire.CollectEnd
	for i := range wire.CollectMaxChanged + 4 {
		end.Change(wire.CollectChange{Path: fmt.Sprint(i)})
	}
	if len(end.Changed) != wire.CollectMaxChanged || end.More != 4 {
		t.Errorf("%d named, %d more; want %d and 4", len(end.Changed), end.More, wire.CollectMaxChanged)
	}
}

// TestSendTaskLogAsRead: task.log is sent as the head counted it, whatever
// is appended to it between Open and Send (a process the task left behind
// still writing there), and the end entry says how much it grew by. It was
// sent as it was then, past the head's size: the controller took the
// honest node for one sending more than it announced.
func TestSendTaskLogAsRead(t *testing.T) {
	got, end := sendChangedLog(t, func(p string) error {
		f, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = f.WriteString("written after the head\n")
		return err
	})
	if got != "read\n" {
		t.Errorf("task.log sent %q, want %q: as the head counted it", got, "read\n")
	}
	if end.LogGrew != 23 || end.LogShrank != 0 {
		t.Errorf("end %+v, want it to say task.log grew by 23 bytes", end)
	}
}

// TestSendTaskLogShrankBeforeSend: task.log is truncated between Open and
// Send: what it holds then is sent, and the end entry says how many bytes
// short of the head's size (as output/'s files that shrink before they are
// sent are named in its changed list). It was sent short, the head's
// 5 bytes counted and 2 sent, and nothing in the stream said so.
func TestSendTaskLogShrankBeforeSend(t *testing.T) {
	got, end := sendChangedLog(t, func(p string) error { return os.Truncate(p, 2) })
	if got != "re" {
		t.Errorf("task.log sent %q, want %q: what it held when it was sent", got, "re")
	}
	if end.LogShrank != 3 || end.LogGrew != 0 {
		t.Errorf("end %+v, want it to say task.log shrank by 3 bytes", end)
	}
}

// sendChangedLog opens an attempt whose task.log is "read\n", changes
// the log with change, sends the attempt and returns the task.log it sent
// and its end entry.
func sendChangedLog(t *testing.T, change func(logPath string) error) (string, wire.CollectEnd) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "status.json"), []byte(`{"task":"S01","attempt":1,"status":"completed"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "task.log")
	if err := os.WriteFile(logPath, []byte("read\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	a := Open(wire.CollectItem{Dir: dir, Attempt: 1, MaxFiles: 10, MaxBytes: 1 << 20})
	if err := change(logPath); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	if err := a.Send(tw, "0"); err != nil {
		t.Fatal(err)
	}
	tw.Close()
	got := entriesOf(t, &b)
	var head wire.CollectHead
	if err := json.Unmarshal([]byte(got["0/collect.json"]), &head); err != nil || head.Log != wire.CollectSent || head.LogSize != 5 {
		t.Fatalf("head %+v (%v), want task.log sent, 5 bytes", head, err)
	}
	var end wire.CollectEnd
	if err := json.Unmarshal([]byte(got["0/collect.end"]), &end); err != nil {
		t.Fatalf("end %q: %v", got["0/collect.end"], err)
	}
	return got["0/task.log"], end
}

// entriesOf is the entries of the tar stream in b, by name.
func entriesOf(t *testing.T, b *bytes.Buffer) map[string]string {
	t.Helper()
	got := map[string]string{}
	tr := tar.NewReader(b)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return got
		}
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(tr)
		got[h.Name] = string(body)
	}
}
