package wrapper

// The tree subcommands: untar, tar and inputs, over package tree.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/dispatch-tool/dispatch/wrapper/subcmd"
	"io"
	"os"
	"syscall"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/errkind"
	"github.com/dispatch-tool/dispatch/wrapper/tree"
)

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
	fs := subcmd.FlagSet("untar")
	archive := fs.String("archive", "", "the tar archive to unpack (removed afterwards), or - for standard input")
	dirFlag := fs.String("dir", "", "the directory to replace with the archive's tree")
	merge := fs.Bool("merge", false, "replace only the entries of --dir the archive's top level names")
	if err := subcmd.Parse(fs, args); err != nil {
		return err
	}
	if *archive == "" {
		return errkind.Usagef("untar: --archive is required")
	}
	dir, err := subcmd.DirFlag("untar", *dirFlag)
	if err != nil {
		return err
	}
	var in io.Reader = stdin
	if *archive != "-" {
		src, err := subcmd.DirFlag("untar", *archive)
		if err != nil {
			return err
		}
		f, err := tree.OpenArchive(src)
		if err != nil {
			return err
		}
		defer f.Close()
		in = f
	}
	tmp, err := tree.NewTreeDir(dir)
	if err != nil {
		return err
	}
	reply, err := tree.Unpack(ctx, in, tmp)
	if err == nil {
		err = tree.PlaceTree(tmp, dir, *merge)
	}
	if err != nil {
		os.RemoveAll(tmp)
		return err
	}
	return subcmd.PrintJSON(stdout, reply)
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
	fs := subcmd.FlagSet("tar")
	dirFlag := fs.String("dir", "", "the directory to archive")
	outFlag := fs.String("out", "", "the archive to create (replaced)")
	maxBytes := fs.Int64("max-bytes", 0, "fail past this many bytes of content (0: no limit)")
	if err := subcmd.Parse(fs, args); err != nil {
		return err
	}
	dir, err := subcmd.DirFlag("tar", *dirFlag)
	if err != nil {
		return err
	}
	if *outFlag == "" {
		return errkind.Usagef("tar: --out is required")
	}
	out, err := subcmd.DirFlag("tar", *outFlag)
	if err != nil {
		return err
	}
	if fi, err := os.Lstat(dir); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return &errkind.Error{Kind: wire.KindNotFound, Err: fmt.Errorf("no directory %s", dir)}
		}
		return errkind.IO(err)
	} else if !fi.IsDir() {
		return errkind.Usagef("tar: %s is not a directory (a link is never followed)", dir)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return errkind.IO(err)
	}
	defer root.Close()
	// Whatever the task left at the archive's name goes; the archive is
	// created anew, never through a link.
	if err := os.RemoveAll(out); err != nil {
		return errkind.IO(err)
	}
	f, err := os.OpenFile(out, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return errkind.IO(err)
	}
	reply, err := tree.Pack(ctx, root, f, *maxBytes)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(out)
		return err
	}
	return subcmd.PrintJSON(stdout, reply)
}

// cmdInputs replaces the directory --dir (a task's inputs/) with the
// outputs of the dependencies named on stdin (wire.InputsRequest), copied
// from their attempt directories on this node, one directory each: the
// controller does not send again what the node already holds.
//
// Each file is copied, never linked: a hard link shares the inode, so an
// unsandboxed dependent (the same user) could chmod it and write into the
// dependency's output. Each copy is checked as it is written against the
// manifest recorded when the controller collected the attempt (size and
// sha256 of the bytes written): a dependency with a file missing, changed
// or not regular is left out, with the reason in the reply, for the
// controller to send itself. The tree is built beside --dir and renamed
// over it once complete.
func cmdInputs(ctx context.Context, args []string, stdin io.Reader, stdout io.Writer) error {
	fs := subcmd.FlagSet("inputs")
	dirFlag := fs.String("dir", "", "the directory to replace with the dependencies' outputs")
	if err := subcmd.Parse(fs, args); err != nil {
		return err
	}
	dir, err := subcmd.DirFlag("inputs", *dirFlag)
	if err != nil {
		return err
	}
	data, err := io.ReadAll(io.LimitReader(stdin, maxLaunchBatch+1))
	if err != nil {
		return errkind.IO(fmt.Errorf("read the request from stdin: %w", err))
	}
	if len(data) > maxLaunchBatch {
		return errkind.Usagef("inputs: the document on stdin is larger than %d bytes", maxLaunchBatch)
	}
	var req wire.InputsRequest
	if err := json.Unmarshal(data, &req); err != nil {
		return errkind.Usagef("inputs: stdin: %v", err)
	}
	tmp, err := tree.NewTreeDir(dir)
	if err != nil {
		return err
	}
	reply := wire.InputsReply{Copied: []string{}}
	for _, in := range req.Copy {
		if err := ctx.Err(); err != nil {
			os.RemoveAll(tmp)
			return &errkind.Error{Kind: wire.KindInternal, Err: fmt.Errorf("inputs interrupted: %w", err)}
		}
		files, bytes, err := tree.CopyInput(ctx, in, tmp)
		if err != nil {
			if reply.Failed == nil {
				reply.Failed = map[string]string{}
			}
			reply.Failed[in.Name] = err.Error()
			continue
		}
		reply.Copied = append(reply.Copied, in.Name)
		reply.Files += files
		reply.Bytes += bytes
	}
	// RemoveAll removes a link in dir's place, never what it names.
	if err := os.RemoveAll(dir); err != nil {
		os.RemoveAll(tmp)
		return errkind.IO(fmt.Errorf("replace %s: %w", dir, err))
	}
	if err := os.Rename(tmp, dir); err != nil {
		os.RemoveAll(tmp)
		return errkind.IO(fmt.Errorf("replace %s: %w", dir, err))
	}
	return subcmd.PrintJSON(stdout, reply)
}
