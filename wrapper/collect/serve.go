package collect

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/errkind"
	"github.com/dispatch-tool/dispatch/wrapper/nodestatus"
)

// Serve answers collect requests, one a line of in, until in ends or stop
// is closed (`collect --serve`, the controller's conversation held per
// node): each answer on out is Write's tar stream in frames and an end
// saying how it went (see wire.CollectFrameWriter for why frames). A
// request in hand when stop closes is answered whole under ctx (which no
// signal cancels); the next is not read. A request that is refused (not a
// request, a task directory that is not absolute) is answered with its
// error, and the next is read. What breaks the conversation ends it, with
// the error: a request over MaxRequest or cut short by in's end (what
// follows cannot be told from it), out failing, ctx ending.
func Serve(ctx context.Context, stop <-chan struct{}, in io.Reader, out io.Writer) error {
	next, end := nodestatus.Requests(stop, in, readRequestLine)
	defer end()
	for {
		line, err, stopped := next()
		if stopped || errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		fw := wire.NewCollectFrameWriter(out)
		req, err := parseRequest(line)
		if err == nil {
			err = Write(ctx, req, fw)
		}
		if fw.Err() != nil {
			return errkind.IO(fmt.Errorf("collect: write the answer: %w", fw.Err()))
		}
		var done wire.CollectDone
		if err != nil {
			done = wire.CollectDone{Error: err.Error(), Kind: errkind.Of(err)}
		}
		if err := fw.End(done); err != nil {
			return errkind.IO(fmt.Errorf("collect: write the answer: %w", err))
		}
		if err := ctx.Err(); err != nil {
			return &errkind.Error{Kind: wire.KindInternal, Err: fmt.Errorf("collect interrupted: %w", err)}
		}
	}
}

// readRequestLine reads one request line of br, without its newline; a
// line that in's end cut short is an error, not a request.
func readRequestLine(br *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if len(line)+len(chunk) > MaxRequest+1 {
			return nil, errkind.Usagef("collect: a request of more than %d MiB", MaxRequest>>20)
		}
		line = append(line, chunk...)
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(line) > 0:
			return nil, errkind.Usagef("collect: stdin ended inside a request (%d bytes without a newline)", len(line))
		case errors.Is(err, io.EOF):
			return nil, io.EOF
		case err != nil:
			return nil, errkind.IO(fmt.Errorf("collect: read a request: %w", err))
		}
		return line[:len(line)-1], nil
	}
}
