package tree

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/errkind"
)

// TreeReply is the reply of `tar` and `untar`: the regular files of the
// tree and their bytes of content.
type TreeReply struct {
	Files int   `json:"files"`
	Bytes int64 `json:"bytes"`
}

// NewTreeDir makes the empty directory beside dir in which a new tree for
// dir is built (PlaceTree then moves it over dir). dir's parents are made
// private if missing: a tree streamed on stdin, or the inputs copied on the
// node, may be the first thing to reach its task directory (a file sent by
// Put made its parents the same way).
func NewTreeDir(dir string) (string, error) {
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return "", errkind.IO(err)
	}
	tmp := dir + ".new." + strconv.Itoa(os.Getpid())
	if err := os.RemoveAll(tmp); err != nil {
		return "", errkind.IO(err)
	}
	if err := os.Mkdir(tmp, 0o755); err != nil {
		return "", errkind.IO(fmt.Errorf("create %s: %w", tmp, err))
	}
	return tmp, nil
}

// PlaceTree moves the tree built in tmp to dir: in dir's place, or with
// merge into an existing directory dir, each top-level entry of tmp in
// place of dir's entry of that name, dir's other entries kept (the inputs
// the node copied itself stay beside those the controller sends).
func PlaceTree(tmp, dir string, merge bool) error {
	if fi, err := os.Lstat(dir); merge && err == nil && fi.IsDir() {
		entries, err := os.ReadDir(tmp)
		if err != nil {
			return errkind.IO(err)
		}
		for _, e := range entries {
			to := filepath.Join(dir, e.Name())
			if err := os.RemoveAll(to); err != nil {
				return errkind.IO(fmt.Errorf("replace %s: %w", to, err))
			}
			if err := os.Rename(filepath.Join(tmp, e.Name()), to); err != nil {
				return errkind.IO(fmt.Errorf("replace %s: %w", to, err))
			}
		}
		if err := os.Remove(tmp); err != nil {
			return errkind.IO(err)
		}
		return nil
	}
	// RemoveAll removes a link in dir's place, never what it names.
	err := os.RemoveAll(dir)
	if err == nil {
		err = os.Rename(tmp, dir)
	}
	if err != nil {
		return errkind.IO(fmt.Errorf("replace %s: %w", dir, err))
	}
	return nil
}

// Unpack writes the regular files and directories of the archive r under
// dir, through an os.Root: no entry and no link can reach outside it.
func Unpack(ctx context.Context, r io.Reader, dir string) (TreeReply, error) {
	var reply TreeReply
	root, err := os.OpenRoot(dir)
	if err != nil {
		return reply, errkind.IO(err)
	}
	defer root.Close()
	tr := tar.NewReader(r)
	for {
		if err := ctx.Err(); err != nil {
			return reply, &errkind.Error{Kind: wire.KindInternal, Err: fmt.Errorf("untar interrupted: %w", err)}
		}
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return reply, nil
		}
		if err != nil {
			return reply, errkind.Usagef("untar: read the archive: %v", err)
		}
		name := filepath.FromSlash(h.Name)
		if !filepath.IsLocal(name) {
			return reply, errkind.Usagef("untar: entry %q is outside the directory", h.Name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := root.MkdirAll(name, 0o755); err != nil {
				return reply, errkind.IO(err)
			}
		case tar.TypeReg:
			if parent := filepath.Dir(name); parent != "." {
				if err := root.MkdirAll(parent, 0o755); err != nil {
					return reply, errkind.IO(err)
				}
			}
			out, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, os.FileMode(h.Mode).Perm())
			if err != nil {
				return reply, errkind.IO(err)
			}
			n, err := io.Copy(out, tr)
			if cerr := out.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return reply, errkind.IO(fmt.Errorf("write %s: %w", h.Name, err))
			}
			reply.Files++
			reply.Bytes += n
		}
	}
}

func Pack(ctx context.Context, root *os.Root, w io.Writer, maxBytes int64) (TreeReply, error) {
	var reply TreeReply
	tw := tar.NewWriter(w)
	err := fs.WalkDir(root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return errkind.IO(err)
		}
		if err := ctx.Err(); err != nil {
			return &errkind.Error{Kind: wire.KindInternal, Err: fmt.Errorf("tar interrupted: %w", err)}
		}
		if !d.Type().IsRegular() {
			return nil
		}
		f, err := root.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK, 0)
		if err != nil {
			return errkind.IO(err)
		}
		defer f.Close()
		fi, err := f.Stat()
		if err != nil {
			return errkind.IO(err)
		}
		if !fi.Mode().IsRegular() {
			return nil // replaced since the walk saw it
		}
		if maxBytes > 0 && reply.Bytes+fi.Size() > maxBytes {
			return &errkind.Error{Kind: wire.KindTooLarge, Err: fmt.Errorf("the files under the directory pass %d bytes", maxBytes)}
		}
		h := &tar.Header{Typeflag: tar.TypeReg, Name: p, Mode: int64(fi.Mode().Perm()), Size: fi.Size(),
			ModTime: fi.ModTime(), Format: tar.FormatPAX}
		if err := tw.WriteHeader(h); err != nil {
			return errkind.IO(err)
		}
		n, err := io.Copy(tw, io.LimitReader(f, fi.Size()))
		if err == nil && n < fi.Size() {
			err = fmt.Errorf("%s shrank while it was read", p)
		}
		if err != nil {
			return errkind.IO(err)
		}
		reply.Files++
		reply.Bytes += n
		return nil
	})
	if err != nil {
		return reply, err
	}
	if err := tw.Close(); err != nil {
		return reply, errkind.IO(err)
	}
	return reply, nil
}

// OpenArchive opens the archive file src (never through a link, nor a
// FIFO or a device) and removes its name: it is read once, then gone.
func OpenArchive(src string) (*os.File, error) {
	f, err := os.OpenFile(src, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	os.Remove(src)
	if err != nil {
		return nil, errkind.IO(fmt.Errorf("open %s: %w", src, err))
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, errkind.IO(fmt.Errorf("%s is not a regular file", src))
	}
	return f, nil
}
