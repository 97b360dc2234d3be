package wrapper

import (
	"archive/tar"
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dispatch-tool/dispatch/wire"
)

// answer is what one answer of a collect conversation held: its tar
// entries (name=content) and its end's error ("" for none).
type answer struct {
	entries []string
	done    string
}

// readAnswers reads the answers of a collect conversation's output until
// it ends, and the error that ended it (nil for ErrCollectNoAnswer: the
// command ended between answers).
func readAnswers(t *testing.T, out []byte) ([]answer, error) {
	t.Helper()
	br := bufio.NewReader(bytes.NewReader(out))
	var got []answer
	for {
		fr := wire.NewCollectFrameReader(br)
		var a answer
		tr := tar.NewReader(fr)
		for {
			h, err := tr.Next()
			if err != nil {
				break // the tar's end, or the answer's: read below
			}
			body, _ := io.ReadAll(tr)
			if strings.HasSuffix(h.Name, "/"+wire.CollectHeadName) || strings.HasSuffix(h.Name, "/"+wire.CollectEndName) {
				body = nil
			}
			a.entries = append(a.entries, h.Name+"="+string(body))
		}
		_, err := io.Copy(io.Discard, fr)
		switch {
		case errors.Is(err, wire.ErrCollectNoAnswer):
			return got, nil
		case err != nil:
			return got, err
		}
		a.done = fr.Done().Error
		got = append(got, a)
	}
}

// failAfter is stdout that breaks after n bytes.
type failAfter struct {
	bytes.Buffer
	n int
}

func (f *failAfter) Write(p []byte) (int, error) {
	if f.Len()+len(p) > f.n {
		k := f.n - f.Len()
		f.Buffer.Write(p[:k])
		return k, errors.New("broken pipe")
	}
	return f.Buffer.Write(p)
}

// TestCollectServe: `collect --serve` answers each request line with its
// tar stream in frames and an end; a request it refuses is answered with
// the error and the next is served; one cut short by stdin's end, or an
// answer that cannot be written, ends the conversation with an error. A
// task's files that look like frames or ends are data.
func TestCollectServe(t *testing.T) {
	root := t.TempDir()
	a, b := filepath.Join(root, "A"), filepath.Join(root, "B")
	collectTask(t, a, 1, "log A\n", map[string]string{"x.txt": "x\n"})
	forged := "0\n{\"error\":\"forged\"}\n5\nhello\n"
	collectTask(t, b, 2, forged, map[string]string{"frames.txt": forged})
	req := func(dir string, attempt int) string {
		b, _ := json.Marshal(wire.CollectRequest{Attempts: []wire.CollectItem{{Dir: dir, Attempt: attempt, Output: true, MaxFiles: 10, MaxBytes: 1 << 20}}})
		return string(b) + "\n"
	}
	ansA := answer{entries: []string{"0/collect.json=", "0/task.log=log A\n", "0/output/x.txt=x\n", "0/collect.end="}}
	ansB := answer{entries: []string{"0/collect.json=", "0/task.log=" + forged, "0/output/frames.txt=" + forged, "0/collect.end="}}
	for _, tc := range []struct {
		name    string
		stdin   string
		failAt  int // stdout breaks after this many bytes (0: never)
		want    []answer
		exit    int
		readErr string // how the output ends, "" for between answers
	}{
		{name: "nothing asked", stdin: "", exit: 0},
		{name: "two requests, a refused one between", stdin: req(a, 1) + "not json\n" + req(b, 2),
			want: []answer{ansA, {done: "collect: stdin is not a collect request"}, ansB}},
		{name: "a relative task directory refused", stdin: req("rel/A", 1) + req(a, 1),
			want: []answer{{done: "want an absolute, clean task directory"}, ansA}},
		{name: "an attempt gone is found missing", stdin: req(a, 7),
			want: []answer{{entries: []string{"0/collect.json=", "0/collect.end="}}}},
		{name: "a request cut by stdin's end", stdin: req(a, 1) + `{"attempts":[`, want: []answer{ansA}, exit: 1},
		{name: "a request too large", stdin: `{"x":"` + strings.Repeat("x", 4<<20) + "\"}\n" + req(a, 1), exit: 1},
		{name: "an answer cut by stdout", stdin: req(b, 2) + req(a, 1), failAt: 700, exit: 1, readErr: "stopped inside a frame"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := &failAfter{n: 1 << 30}
			if tc.failAt > 0 {
				out.n = tc.failAt
			}
			var stderr bytes.Buffer
			code := Main([]string{"collect", "--serve"}, strings.NewReader(tc.stdin), out, &stderr)
			if code != tc.exit {
				t.Errorf("exit %d (%s), want %d", code, stderr.String(), tc.exit)
			}
			got, err := readAnswers(t, out.Bytes())
			if tc.readErr == "" && err != nil || tc.readErr != "" && (err == nil || !strings.Contains(err.Error(), tc.readErr)) {
				t.Errorf("the output ends with %v, want %q", err, tc.readErr)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("%d answers %+v, want %d", len(got), got, len(tc.want))
			}
			for i, w := range tc.want {
				if !slices.Equal(got[i].entries, w.entries) || w.done == "" && got[i].done != "" || !strings.Contains(got[i].done, w.done) {
					t.Errorf("answer %d: %q, done %q; want %q, done %q", i, got[i].entries, got[i].done, w.entries, w.done)
				}
			}
		})
	}
}
