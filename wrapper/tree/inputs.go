package tree

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/taskfiles"
)

// CopyInput copies the files of in into into/<in.Name>, each verified;
// on any error nothing of in is left there.
func CopyInput(ctx context.Context, in wire.NodeInput, into string) (files int, bytes int64, err error) {
	if !filepath.IsLocal(in.Name) || filepath.Base(in.Name) != in.Name {
		return 0, 0, fmt.Errorf("%q is not a dependency's name", in.Name)
	}
	src, err := inputSource(in.Dir, in.Attempt)
	if err != nil {
		return 0, 0, err
	}
	from, err := os.OpenRoot(src)
	if err != nil {
		return 0, 0, err
	}
	defer from.Close()
	dst := filepath.Join(into, in.Name)
	if err := os.Mkdir(dst, 0o755); err != nil {
		return 0, 0, err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(dst)
		}
	}()
	to, err := os.OpenRoot(dst)
	if err != nil {
		return 0, 0, err
	}
	defer to.Close()
	for _, f := range in.Files {
		if err := ctx.Err(); err != nil {
			return 0, 0, err
		}
		if err := copyVerified(from, to, f); err != nil {
			return 0, 0, fmt.Errorf("%s: %w", f.Path, err)
		}
		files++
		bytes += f.Size
	}
	return files, bytes, nil
}

// inputSource is the output/ of attempt in the task directory dir: there,
// or moved aside to attempts/<attempt>/ by a later attempt. status.json
// says which attempt a directory holds.
func inputSource(dir string, attempt int) (string, error) {
	if !filepath.IsAbs(dir) {
		return "", fmt.Errorf("the task directory %q is not an absolute path", dir)
	}
	for _, cand := range []string{dir, filepath.Join(dir, taskfiles.DirAttempts, strconv.Itoa(attempt))} {
		st, err := taskfiles.ReadStatus(cand)
		if err != nil || st.Attempt != attempt {
			continue
		}
		out := filepath.Join(cand, taskfiles.DirOutput)
		if fi, err := os.Lstat(out); err != nil || !fi.IsDir() {
			return "", fmt.Errorf("attempt %d's output/ is not a directory on this node", attempt)
		}
		return out, nil
	}
	return "", fmt.Errorf("attempt %d's files are no longer on this node", attempt)
}

// copyVerified copies the regular file f.Path of from to the new file of
// that name in to, with its permission bits less the write bits, and fails unless the bytes
// written are f.Size bytes of sha256 f.SHA256. Through os.Root: no link
// leads out of either tree.
func copyVerified(from, to *os.Root, f wire.InputFile) error {
	name := filepath.FromSlash(f.Path)
	if !filepath.IsLocal(name) {
		return errors.New("the path is outside output/")
	}
	in, err := from.OpenFile(name, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return err
	}
	defer in.Close()
	fi, err := in.Stat()
	switch {
	case err != nil:
		return err
	case !fi.Mode().IsRegular():
		return errors.New("not a regular file")
	case fi.Size() != f.Size:
		return fmt.Errorf("%d bytes, %d when collected", fi.Size(), f.Size)
	}
	if parent := filepath.Dir(name); parent != "." {
		if err := to.MkdirAll(parent, 0o755); err != nil {
			return err
		}
	}
	out, err := to.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(out, h), io.LimitReader(in, f.Size+1))
	if err == nil {
		// Read-only, as the controller sends inputs; Chmod, not
		// OpenFile's mode, so the umask does not apply.
		err = out.Chmod(fi.Mode().Perm() &^ 0o222)
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	switch {
	case err != nil:
		return err
	case n != f.Size:
		return fmt.Errorf("changed size while copied (%d bytes, %d when collected)", n, f.Size)
	case hex.EncodeToString(h.Sum(nil)) != f.SHA256:
		return errors.New("its content differs from what the controller collected")
	}
	return nil
}
