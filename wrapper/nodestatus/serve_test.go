package nodestatus

import (
	"bytes"
	"io"
	"strings"
	"sync/atomic"
	"testing"
)

// TestServeLinesStopsAfterTheRequestInHand: a stop while a request is
// being handled (a launch document whose attempts are being handed to
// their supervisors) lets it finish and writes its reply, then ends the
// serving without reading another; a stop while waiting for a request
// ends it at once; stdin's end still ends it, a last line without its
// newline answered.
func TestServeLinesStopsAfterTheRequestInHand(t *testing.T) {
	t.Parallel()
	t.Run("in hand", func(t *testing.T) {
		inR, inW := io.Pipe()
		defer inW.Close()
		stop := make(chan struct{})
		started, release := make(chan struct{}), make(chan struct{})
		var calls atomic.Int32
		var out bytes.Buffer
		ended := make(chan error, 1)
		go func() {
			ended <- ServeLines(stop, inR, &out, "run", 1<<10, func(line []byte) (any, error) {
				if calls.Add(1) == 1 {
					close(started)
					<-release
				}
				return map[string]string{"got": string(line)}, nil
			})
		}()
		go inW.Write([]byte("first\nsecond\n"))
		<-started
		close(stop)
		close(release)
		if err := <-ended; err != nil {
			t.Fatalf("ServeLines after a stop: %v", err)
		}
		if got := out.String(); got != `{"got":"first"}`+"\n" {
			t.Errorf("replies %q, want the one to the request in hand", got)
		}
		if n := calls.Load(); n != 1 {
			t.Errorf("%d requests handled, want 1", n)
		}
	})
	t.Run("waiting", func(t *testing.T) {
		inR, inW := io.Pipe()
		defer inW.Close()
		stop := make(chan struct{})
		close(stop)
		err := ServeLines(stop, inR, io.Discard, "status", 1<<10, func([]byte) (any, error) {
			t.Error("a request handled after the stop")
			return nil, nil
		})
		if err != nil {
			t.Errorf("ServeLines stopped while waiting: %v", err)
		}
	})
	t.Run("stdin ends", func(t *testing.T) {
		var out bytes.Buffer
		err := ServeLines(make(chan struct{}), strings.NewReader("a\nb"), &out, "status", 1<<10, func(line []byte) (any, error) {
			return string(line), nil
		})
		if err != nil || out.String() != "\"a\"\n\"b\"\n" {
			t.Errorf("ServeLines to stdin's end: %q, %v; want both answered", out.String(), err)
		}
	})
}
