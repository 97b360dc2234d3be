package nodes

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// TestCappedBufferReadFrom: io.Copy into a CappedBuffer reads straight
// into it (no copy buffer of its own) and keeps what Write would: all of
// an output within the limit, nothing past it, with over called once and
// the rest of the stream drained.
func TestCappedBufferReadFrom(t *testing.T) {
	for _, size := range []int{0, 1, 4095, 4096, 4097, 100_000} {
		var overs int
		b := NewCappedBuffer(200_000, func() { overs++ })
		src := strings.Repeat("x", size)
		n, err := io.Copy(b, iotest.OneByteReader(strings.NewReader(src[:size/2])))
		if err != nil || n != int64(size/2) {
			t.Fatalf("size %d: copied %d, %v", size, n, err)
		}
		if _, err := io.Copy(b, strings.NewReader(src[size/2:])); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b.Bytes(), []byte(src)) || b.Overflowed() || overs != 0 {
			t.Errorf("size %d: kept %d bytes, overflowed %v, over called %d times", size, len(b.Bytes()), b.Overflowed(), overs)
		}
	}
	var overs int
	b := NewCappedBuffer(10_000, func() { overs++ })
	n, err := io.Copy(b, strings.NewReader(strings.Repeat("y", 50_000)))
	if err != nil || n != 50_000 {
		t.Fatalf("over the limit: copied %d, %v; want the stream drained", n, err)
	}
	if !b.Overflowed() || overs != 1 || len(b.Bytes()) > 10_000 {
		t.Errorf("over the limit: overflowed %v, over called %d times, kept %d bytes", b.Overflowed(), overs, len(b.Bytes()))
	}
	var w CappedBuffer
	if _, ok := any(&w).(io.ReaderFrom); !ok {
		t.Fatal("CappedBuffer is no io.ReaderFrom: io.Copy would use a buffer of its own")
	}
}
