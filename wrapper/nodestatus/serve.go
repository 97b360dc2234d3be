package nodestatus

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/errkind"
)

// ServeStatus answers status requests (wire.StatusRequest), one a line on
// in, with one reply a line on out, until in ends or stop is closed (see
// ServeLines): the controller's status calls without a new session and a
// new process each. A request that does not parse or names what `status`
// would refuse ends it with that error, which the caller prints as any
// command's.
func ServeStatus(ctx context.Context, stop <-chan struct{}, version, root, node string, in io.Reader, out io.Writer) error {
	return ServeLines(stop, in, out, "status", maxLiveRequest, func(line []byte) (any, error) {
		var req wire.StatusRequest
		dec := json.NewDecoder(bytes.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			return nil, errkind.Usagef("status: a request: want {\"projects\":[…],\"live\":true,\"tasks\":[…],\"tags\":[…]}: %v", err)
		}
		for _, p := range req.Projects {
			if !ValidName(p) {
				return nil, errkind.Usagef("status: invalid project name %q", p)
			}
		}
		if !req.Live {
			return NodeStatus(ctx, version, root, node, req.Projects)
		}
		named, held, err := checkLiveRequest(req.LiveRequest)
		if err != nil {
			return nil, err
		}
		return LiveStatus(ctx, version, root, node, req.Projects, named, held)
	})
}

// ServeLines answers requests, one a line of in of at most limit bytes,
// with one line of JSON each on out (handle's reply), until in ends or
// stop is closed. A request in hand when stop closes is answered first
// (its reply written if out still takes it; a launch handed to a
// supervisor is never left half-done); the next is not read. An error of
// handle ends the serving with it: the caller sees the conversation end
// and says why from the command's exit. what names the command in errors.
func ServeLines(stop <-chan struct{}, in io.Reader, out io.Writer, what string, limit int, handle func(line []byte) (any, error)) error {
	next, end := Requests(stop, in, func(br *bufio.Reader) ([]byte, error) { return readRequestLine(br, what, limit) })
	defer end()
	for {
		line, err, stopped := next()
		if stopped || errors.Is(err, io.EOF) && len(line) == 0 {
			return nil
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		reply, herr := handle(line)
		if herr != nil {
			return herr
		}
		if err := json.NewEncoder(out).Encode(reply); err != nil {
			return errkind.IO(fmt.Errorf("write reply: %w", err))
		}
		if err != nil {
			return nil // the last line, without its newline
		}
	}
}

// Requests reads in's requests with read, in a goroutine of its own so
// that a stop ends a wait for the next: next returns the next request and
// read's error, or stopped once stop is closed. A stop that came while
// the last request was in hand wins over the next request, read
// meanwhile. The reader is left blocked in its read after end (it ends
// with the process); after read's first error, next is not called again.
func Requests(stop <-chan struct{}, in io.Reader, read func(*bufio.Reader) ([]byte, error)) (next func() (line []byte, err error, stopped bool), end func()) {
	type request struct {
		line []byte
		err  error
	}
	requests := make(chan request)
	done := make(chan struct{})
	go func() {
		br := bufio.NewReaderSize(in, 64<<10)
		for {
			line, err := read(br)
			select {
			case requests <- request{line, err}:
			case <-done:
				return
			}
			if err != nil {
				return
			}
		}
	}()
	next = func() ([]byte, error, bool) {
		select {
		case <-stop:
			return nil, nil, true
		default:
		}
		select {
		case <-stop:
			return nil, nil, true
		case r := <-requests:
			return r.line, r.err, false
		}
	}
	return next, func() { close(done) }
}

// readRequestLine reads one line of br, without its newline, of at most
// limit bytes.
func readRequestLine(br *bufio.Reader, what string, limit int) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if len(line)+len(chunk) > limit+1 {
			return nil, errkind.Usagef("%s: a request of more than %d bytes", what, limit)
		}
		line = append(line, chunk...)
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil {
			return line, err
		}
		return bytes.TrimSuffix(line, []byte("\n")), nil
	}
}
