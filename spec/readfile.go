package spec

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// ErrNotRegular is ReadFile's error for a FIFO, device, socket or
// directory.
var ErrNotRegular = errors.New("not a regular file")

// TooLargeError is ReadFile's error for a file over its limit.
type TooLargeError struct {
	Limit int64
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("file is larger than %s", SizeString(e.Limit))
}

// SizeString writes a byte count as the operator would: 8 MiB, 64 KiB.
func SizeString(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

// ReadFile reads the regular file at path, at most limit bytes of it. It
// opens the file without blocking, so that a FIFO put in its place is
// reported (ErrNotRegular) instead of hanging the reader, and checks the
// type of what it opened, not of what a check before the open saw. A file
// over limit yields *TooLargeError without reading more than limit+1 bytes.
func ReadFile(path string, limit int64) ([]byte, error) {
	f, err := os.OpenFile(path, openReadFlags, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, ErrNotRegular
	}
	if fi.Size() > limit {
		return nil, &TooLargeError{Limit: limit}
	}
	// Sized from the file, with one byte more to see it grew meanwhile:
	// io.ReadAll would grow its buffer by doubling.
	raw := make([]byte, 0, min(fi.Size(), limit)+1)
	for {
		n, err := f.Read(raw[len(raw):cap(raw)])
		raw = raw[:len(raw)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		if len(raw) == cap(raw) {
			if int64(len(raw)) > limit {
				break
			}
			raw = append(raw, 0)[:len(raw)]
		}
	}
	if int64(len(raw)) > limit {
		return nil, &TooLargeError{Limit: limit}
	}
	return raw, nil
}
