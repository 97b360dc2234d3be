package wire

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// A collect conversation (`wrapper collect --serve`) takes one
// CollectRequest a line on stdin and answers each on stdout with the tar
// stream `collect` writes, cut into frames:
//
//	<n>\n<n bytes of the stream>   a data frame, 0 < n <= CollectFrameMax
//	0\n<CollectDone as JSON>\n     the answer's end, and how it went
//
// The frames are counted, not scanned: whatever bytes a task's files hold,
// the controller reads exactly n of them as data, so no file can end an
// answer early or forge its end. The tar's own end marker followed by a
// trailer line was the other way, and was not taken: a node that fails
// while a file is under way could not end the answer there without first
// padding the entry out, and where the answer ends would depend on the
// controller's tar reader stopping exactly at the two zero blocks. With
// frames the node ends an answer wherever it is, saying why; the
// controller knows where the next one starts whatever the tar held, and an
// answer that stops short of its end frame is a conversation broken
// mid-answer (nothing of its unfinished attempt is collected).

// CollectFrameMax bounds a data frame of a collect conversation.
const CollectFrameMax = 1 << 20

// CollectDoneMax bounds the end line of an answer.
const CollectDoneMax = 64 << 10

// CollectDone ends an answer of a collect conversation: empty when the
// node sent the whole stream, else why it did not (Kind one of the Kind
// words: usage for a request it refused).
type CollectDone struct {
	Error string `json:"error,omitempty"`
	Kind  string `json:"kind,omitempty"`
}

// Err is the error the node ended the answer with, or nil.
func (d CollectDone) Err() error {
	switch {
	case d.Error != "":
		return errors.New(ClampMessage(d.Error))
	case d.Kind != "":
		return fmt.Errorf("the wrapper ended the answer with an error of kind %q", ClampMessage(d.Kind))
	}
	return nil
}

// CollectFrameWriter cuts what is written to it into data frames on w.
type CollectFrameWriter struct {
	w   io.Writer
	buf []byte
	err error
}

// NewCollectFrameWriter returns a writer of one answer's frames on w.
func NewCollectFrameWriter(w io.Writer) *CollectFrameWriter { return &CollectFrameWriter{w: w} }

// Write writes p as data frames, each in one write to w.
func (f *CollectFrameWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 && f.err == nil {
		chunk := p[:min(len(p), CollectFrameMax)]
		f.buf = strconv.AppendInt(f.buf[:0], int64(len(chunk)), 10)
		f.buf = append(append(f.buf, '\n'), chunk...)
		if _, err := f.w.Write(f.buf); err != nil {
			f.err = err
			break
		}
		n += len(chunk)
		p = p[len(chunk):]
	}
	return n, f.err
}

// End writes the answer's end frame and done.
func (f *CollectFrameWriter) End(done CollectDone) error {
	if f.err != nil {
		return f.err
	}
	b, err := json.Marshal(done)
	if err != nil {
		return err
	}
	f.buf = append(append(append(f.buf[:0], "0\n"...), b...), '\n')
	_, f.err = f.w.Write(f.buf)
	return f.err
}

// Err is the first error writing to w: the stream is broken, no end can
// follow.
func (f *CollectFrameWriter) Err() error { return f.err }

// ErrCollectNoAnswer is wrapped by a CollectFrameReader's error when the
// stream ended before the answer's first frame, or began with what is no
// frame: the command ended between answers, or is not a collect
// conversation (an older wrapper without --serve refuses the flag).
var ErrCollectNoAnswer = errors.New("the collect conversation ended before its answer began")

// CollectFrameReader reads the stream of one answer of a collect
// conversation out of its frames: io.EOF at its end frame, an error when
// the frames are malformed or stop short of it.
type CollectFrameReader struct {
	r     io.Reader
	left  int64 // bytes of the data frame under way
	began bool
	done  *CollectDone
	err   error
}

// NewCollectFrameReader returns a reader of the answer that r starts with.
// It reads no further than the answer's end: its headers and end byte by
// byte (a few bytes a frame; r is the conversation's buffered reader),
// its data frames as asked for, up to their end.
func NewCollectFrameReader(r io.Reader) *CollectFrameReader { return &CollectFrameReader{r: r} }

// Done is the answer's end, nil until it was read.
func (f *CollectFrameReader) Done() *CollectDone { return f.done }

// Read reads the answer's stream.
func (f *CollectFrameReader) Read(p []byte) (int, error) {
	for f.left == 0 && f.err == nil {
		f.err = f.header()
	}
	if f.err != nil {
		return 0, f.err
	}
	n, err := f.r.Read(p[:min(int64(len(p)), f.left)])
	f.left -= int64(n)
	if err != nil && f.left > 0 {
		f.err = fmt.Errorf("the collect answer stopped inside a frame: %w", unexpected(err))
		if n == 0 {
			return 0, f.err
		}
	}
	return n, nil
}

// header reads the next frame's header: a data frame's length, or the end
// and its done line (io.EOF then).
func (f *CollectFrameReader) header() error {
	line, err := readLine(f.r, 20)
	n, perr := strconv.ParseInt(string(line), 10, 64)
	switch {
	case err != nil && !f.began:
		// Nothing, or what a command other than `collect --serve` prints
		// (an older wrapper's error reply refusing the flag, long or short,
		// with or without its newline): no frame began, so nothing of the
		// request was answered.
		return fmt.Errorf("%w (%v)", ErrCollectNoAnswer, err)
	case err != nil:
		return fmt.Errorf("the collect answer stopped before its end frame: %w", unexpected(err))
	case perr != nil || n < 0 || n > CollectFrameMax:
		err := fmt.Errorf("the collect answer holds a frame header %q, not a length of at most %d", ClampMessage(string(line)), CollectFrameMax)
		if !f.began {
			err = fmt.Errorf("%w: %w", ErrCollectNoAnswer, err)
		}
		return err
	}
	f.began = true
	if n > 0 {
		f.left = n
		return nil
	}
	line, err = readLine(f.r, CollectDoneMax)
	if err != nil {
		return fmt.Errorf("the collect answer's end: %w", unexpected(err))
	}
	var done CollectDone
	if err := json.Unmarshal(line, &done); err != nil {
		return fmt.Errorf("the collect answer's end is not JSON: %v", err)
	}
	f.done = &done
	return io.EOF
}

// errLongLine is readLine's error for a line over its limit.
var errLongLine = errors.New("a line over its limit")

// readLine reads one line of r, without its newline, of at most limit
// bytes, a byte at a time: nothing past the newline is read.
func readLine(r io.Reader, limit int) ([]byte, error) {
	var line []byte
	var b [1]byte
	for {
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return line, err
		}
		if b[0] == '\n' {
			return line, nil
		}
		if len(line) == limit {
			return nil, fmt.Errorf("%w of %d bytes", errLongLine, limit)
		}
		line = append(line, b[0])
	}
}

// unexpected is err, an io.EOF inside an answer named for what it is.
func unexpected(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}
