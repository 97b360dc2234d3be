package wire

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"testing"
)

// TestCollectFrames: the frame reader takes what the writer wrote, in
// frames of at most CollectFrameMax, and refuses what is not its
// framing: a header that is no length, a frame over the bound, an answer
// that stops inside a frame or before its end, an end that is not JSON.
func TestCollectFrames(t *testing.T) {
	big := bytes.Repeat([]byte("0\n"), CollectFrameMax) // two frames
	var whole bytes.Buffer
	fw := NewCollectFrameWriter(&whole)
	fw.Write(big)
	fw.End(CollectDone{Error: "why", Kind: KindIO})
	for _, tc := range []struct {
		name, in string
		data     string // what is read
		done     string // its end's error
		err      string // the reader's error, "" for its end
	}{
		{name: "whole", in: whole.String(), data: string(big), done: "why"},
		{name: "empty and ended", in: "0\n{}\n"},
		{name: "nothing", in: "", err: ErrCollectNoAnswer.Error()},
		{name: "not a length", in: "x1\nabc", err: "not a length"},
		{name: "negative", in: "-1\n", err: "not a length"},
		{name: "over the bound", in: fmt.Sprintf("%d\n", CollectFrameMax+1), err: "not a length"},
		{name: "a header without end", in: strings.Repeat("1", 30), err: "over its limit of 20 bytes"},
		{name: "a short reply without its newline", in: "usage", err: ErrCollectNoAnswer.Error()},
		{name: "an older wrapper's reply", in: `{"error":"flag provided but not defined: -serve","kind":"usage"}` + "\n", err: "ended before its answer began"},
		{name: "a header not a length, after a frame", in: "1\na{}\n", data: "a", err: "not a length"},
		{name: "cut inside a frame", in: "5\nab", data: "ab", err: "stopped inside a frame"},
		{name: "cut before the end", in: "2\nab", data: "ab", err: "stopped before its end frame"},
		{name: "cut inside the end", in: "2\nab0\n{}", data: "ab", err: "the collect answer's end"},
		{name: "an end not JSON", in: "0\nfin\n", err: "not JSON"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fr := NewCollectFrameReader(strings.NewReader(tc.in))
			data, err := io.ReadAll(fr)
			if string(data) != tc.data {
				t.Errorf("read %d bytes, want %d", len(data), len(tc.data))
			}
			if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
				t.Fatalf("err %v, want %q", err, tc.err)
			}
			if tc.err == "" && (fr.Done() == nil || fr.Done().Error != tc.done) {
				t.Errorf("done %+v, want error %q", fr.Done(), tc.done)
			}
		})
	}
}
