package wrapper

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
)

// TreeReply is the reply of `tar` and `untar`: the regular files of the
// tree and their bytes of content.
type TreeReply struct {
	Files int   `json:"files"`
	Bytes int64 `json:"bytes"`
}

// cmdUntar replaces the directory --dir with the regular files of the tar
// archive --archive, then removes the archive. The controller sends a
// whole tree (a task's base/) as one archive over one transfer instead of
// one transfer per file. The tree is built beside --dir and renamed over
// it only once complete, so an interrupted untar leaves the old one (or
// none), never a mix. Entries other than regular files and directories
// are skipped, as a per-file copy of the tree skipped them; an entry
// naming a path outside --dir is refused. The task can write in the
// directory that holds --dir: no link there is ever followed.
func cmdUntar(ctx context.Context, args []string, stdin io.Reader, stdout io.Writer) error {
	fs := newFlagSet("untar")
	archive := fs.String("archive", "", "the tar archive to unpack (removed afterwards), or - for standard input")
	dirFlag := fs.String("dir", "", "the directory to replace with the archive's tree")
	merge := fs.Bool("merge", false, "replace only the entries of --dir the archive's top level names")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *archive == "" {
		return usageErrorf("untar: --archive is required")
	}
	dir, err := taskDirFlag("untar", *dirFlag)
	if err != nil {
		return err
	}
	var in io.Reader = stdin
	if *archive != "-" {
		f, err := openArchive(*archive)
		if err != nil {
			return err
		}
		defer f.Close()
		in = f
	}
	tmp, err := newTreeDir(dir)
	if err != nil {
		return err
	}
	reply, err := unpack(ctx, in, tmp)
	if err == nil {
		err = placeTree(tmp, dir, *merge)
	}
	if err != nil {
		os.RemoveAll(tmp)
		return err
	}
	return printJSON(stdout, reply)
}

// newTreeDir makes the empty directory beside dir in which a new tree for
// dir is built (placeTree then moves it over dir). dir's parents are made
// private if missing: a tree streamed on stdin, or the inputs copied on the
// node, may be the first thing to reach its task directory (a file sent by
// Put made its parents the same way).
func newTreeDir(dir string) (string, error) {
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return "", ioError(err)
	}
	tmp := dir + ".new." + strconv.Itoa(os.Getpid())
	if err := os.RemoveAll(tmp); err != nil {
		return "", ioError(err)
	}
	if err := os.Mkdir(tmp, 0o755); err != nil {
		return "", ioError(fmt.Errorf("create %s: %w", tmp, err))
	}
	return tmp, nil
}

// openArchive opens the archive file of --archive (never through a link),
// to be removed once unpacked.
func openArchive(arg string) (*os.File, error) {
	src, err := taskDirFlag("untar", arg)
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(src, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	os.Remove(src)
	if err != nil {
		return nil, ioError(fmt.Errorf("open %s: %w", src, err))
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, ioError(fmt.Errorf("%s is not a regular file", src))
	}
	return f, nil
}

// placeTree moves the tree built in tmp to dir: in dir's place, or with
// merge into an existing directory dir, each top-level entry of tmp in
// place of dir's entry of that name, dir's other entries kept (the inputs
// the node copied itself stay beside those the controller sends).
func placeTree(tmp, dir string, merge bool) error {
	if fi, err := os.Lstat(dir); merge && err == nil && fi.IsDir() {
		entries, err := os.ReadDir(tmp)
		if err != nil {
			return ioError(err)
		}
		for _, e := range entries {
			to := filepath.Join(dir, e.Name())
			if err := os.RemoveAll(to); err != nil {
				return ioError(fmt.Errorf("replace %s: %w", to, err))
			}
			if err := os.Rename(filepath.Join(tmp, e.Name()), to); err != nil {
				return ioError(fmt.Errorf("replace %s: %w", to, err))
			}
		}
		if err := os.Remove(tmp); err != nil {
			return ioError(err)
		}
		return nil
	}
	// RemoveAll removes a link in dir's place, never what it names.
	err := os.RemoveAll(dir)
	if err == nil {
		err = os.Rename(tmp, dir)
	}
	if err != nil {
		return ioError(fmt.Errorf("replace %s: %w", dir, err))
	}
	return nil
}

// unpack writes the regular files and directories of the archive r under
// dir, through an os.Root: no entry and no link can reach outside it.
func unpack(ctx context.Context, r io.Reader, dir string) (TreeReply, error) {
	var reply TreeReply
	root, err := os.OpenRoot(dir)
	if err != nil {
		return reply, ioError(err)
	}
	defer root.Close()
	tr := tar.NewReader(r)
	for {
		if err := ctx.Err(); err != nil {
			return reply, &cmdError{wire.KindInternal, fmt.Errorf("untar interrupted: %w", err)}
		}
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return reply, nil
		}
		if err != nil {
			return reply, usageErrorf("untar: read the archive: %v", err)
		}
		name := filepath.FromSlash(h.Name)
		if !filepath.IsLocal(name) {
			return reply, usageErrorf("untar: entry %q is outside the directory", h.Name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := root.MkdirAll(name, 0o755); err != nil {
				return reply, ioError(err)
			}
		case tar.TypeReg:
			if parent := filepath.Dir(name); parent != "." {
				if err := root.MkdirAll(parent, 0o755); err != nil {
					return reply, ioError(err)
				}
			}
			out, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, os.FileMode(h.Mode).Perm())
			if err != nil {
				return reply, ioError(err)
			}
			n, err := io.Copy(out, tr)
			if cerr := out.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return reply, ioError(fmt.Errorf("write %s: %w", h.Name, err))
			}
			reply.Files++
			reply.Bytes += n
		}
	}
}

// cmdTar writes the regular files under --dir (a task's output/) to the new
// tar archive --out, with their permissions: the controller fetches a
// large output as one transfer instead of one per file. Nothing is
// followed: --dir must be a directory itself, and the walk goes through an
// os.Root, so a link the task made inside reaches nothing outside. Links
// and other special files are left out, as they always were. Past
// --max-bytes of content it stops with kind too_large. A file that changes
// size while it is read fails the tar (the controller tries again later).
func cmdTar(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlagSet("tar")
	dirFlag := fs.String("dir", "", "the directory to archive")
	outFlag := fs.String("out", "", "the archive to create (replaced)")
	maxBytes := fs.Int64("max-bytes", 0, "fail past this many bytes of content (0: no limit)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	dir, err := taskDirFlag("tar", *dirFlag)
	if err != nil {
		return err
	}
	if *outFlag == "" {
		return usageErrorf("tar: --out is required")
	}
	out, err := taskDirFlag("tar", *outFlag)
	if err != nil {
		return err
	}
	if fi, err := os.Lstat(dir); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return &cmdError{wire.KindNotFound, fmt.Errorf("no directory %s", dir)}
		}
		return ioError(err)
	} else if !fi.IsDir() {
		return usageErrorf("tar: %s is not a directory (a link is never followed)", dir)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return ioError(err)
	}
	defer root.Close()
	// Whatever the task left at the archive's name goes; the archive is
	// created anew, never through a link.
	if err := os.RemoveAll(out); err != nil {
		return ioError(err)
	}
	f, err := os.OpenFile(out, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return ioError(err)
	}
	reply, err := pack(ctx, root, f, *maxBytes)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(out)
		return err
	}
	return printJSON(stdout, reply)
}

func pack(ctx context.Context, root *os.Root, w io.Writer, maxBytes int64) (TreeReply, error) {
	var reply TreeReply
	tw := tar.NewWriter(w)
	err := fs.WalkDir(root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return ioError(err)
		}
		if err := ctx.Err(); err != nil {
			return &cmdError{wire.KindInternal, fmt.Errorf("tar interrupted: %w", err)}
		}
		if !d.Type().IsRegular() {
			return nil
		}
		f, err := root.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK, 0)
		if err != nil {
			return ioError(err)
		}
		defer f.Close()
		fi, err := f.Stat()
		if err != nil {
			return ioError(err)
		}
		if !fi.Mode().IsRegular() {
			return nil // replaced since the walk saw it
		}
		if maxBytes > 0 && reply.Bytes+fi.Size() > maxBytes {
			return &cmdError{wire.KindTooLarge, fmt.Errorf("the files under the directory pass %d bytes", maxBytes)}
		}
		h := &tar.Header{Typeflag: tar.TypeReg, Name: p, Mode: int64(fi.Mode().Perm()), Size: fi.Size(),
			ModTime: fi.ModTime(), Format: tar.FormatPAX}
		if err := tw.WriteHeader(h); err != nil {
			return ioError(err)
		}
		n, err := io.Copy(tw, io.LimitReader(f, fi.Size()))
		if err == nil && n < fi.Size() {
			err = fmt.Errorf("%s shrank while it was read", p)
		}
		if err != nil {
			return ioError(err)
		}
		reply.Files++
		reply.Bytes += n
		return nil
	})
	if err != nil {
		return reply, err
	}
	if err := tw.Close(); err != nil {
		return reply, ioError(err)
	}
	return reply, nil
}
