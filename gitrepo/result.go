package gitrepo

import (
	"bufio"
	"bytes"
	"compress/zlib"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// What a task's result may hold (issue 19): a node may send anything, so
// a result is held to the controller's quotas before it is accepted, and
// to its own history: one commit on its base, made of the objects its
// pack holds and of its base's.

// Error kinds of a refused result or export, for errors.Is.
var (
	// ErrOverLimit: a result's tree, or what its pack inflates to, is over
	// collect_max_bytes or collect_max_files.
	ErrOverLimit = errors.New("over the collection quota")
	// ErrForeign: a result that is not one commit on its base made of the
	// objects its pack holds (a forged history).
	ErrForeign = errors.New("not a result of its base")
	// ErrNoRoom: an export larger than the room it was given on disk.
	ErrNoRoom = errors.New("not enough free space")
)

// Limits are the quotas of a task's result (collect_max_bytes and
// collect_max_files): its tree's files together and its entries, and what
// the objects of its pack inflate to.
type Limits struct {
	MaxBytes int64
	MaxFiles int
}

// quotaFix is how to fix a result over the quotas.
const quotaFix = "have the task commit less (large generated files belong in .gitignore), or raise collect_max_bytes/collect_max_files under controller: in nodes.yaml, then `dispatch retry`"

// forgedFix is what to do about a result no wrapper makes.
const forgedFix = "check the node (its wrapper records a result as one commit on the task's base and sends what it added; something else answered): the task fails and nothing of the result was kept; `dispatch retry` runs it again"

// inflateLimit is how much the objects of a result's pack may inflate to:
// the files (MaxBytes) and, for the trees and the commit, up to
// treeEntryMax bytes per entry and commitMax.
func (l Limits) inflateLimit() int64 {
	return l.MaxBytes + int64(l.MaxFiles)*treeEntryMax + commitMax
}

// maxObjects is how many objects a result's pack may hold: a blob for
// each of its files, a tree for each of its directories (listTree holds
// both to MaxFiles) and for its root, and its commit. More would only have
// git index them, in memory, before the result is refused.
func (l Limits) maxObjects() int64 {
	return 2*int64(l.MaxFiles) + 2
}

const (
	treeEntryMax = 512      // a tree entry: mode, a name of up to 255 bytes, an id, with room to spare
	commitMax    = 64 << 10 // a commit: its headers and message
)

// treeEntry is one entry of `git ls-tree -r -l`.
type treeEntry struct {
	mode, typ, id string
	size          int64 // -1 for a submodule's commit
	path          string
}

// listTree lists commit's tree, recursively, with blob sizes, held to lim
// as it is read: past lim.MaxFiles files, or as many directories, git is
// stopped and the error is a *Problem of kind ErrOverLimit naming the tree
// by what (as it is when its files are past lim.MaxBytes). Trees that name one another
// over and over (a tree bomb: a few kilobytes, billions of paths, files or
// empty directories) are so never listed whole. The entries are the
// files and submodules, not the directories.
func listTree(ctx context.Context, dir string, env []string, commit string, lim Limits, what string) ([]treeEntry, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	args := []string{"ls-tree", "-r", "-t", "-l", "-z", "--full-tree", "--end-of-options", commit}
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), append([]string{"GIT_CONFIG_NOSYSTEM=1", "GIT_TERMINAL_PROMPT=0", "LC_ALL=C"}, env...)...)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	entries, lerr := readTree(bufio.NewReader(out), lim, what)
	if lerr != nil {
		cancel() // the rest is not read
	}
	werr := cmd.Wait()
	if lerr != nil {
		return nil, lerr
	}
	if werr != nil {
		return nil, &gitError{args: args, msg: strings.TrimSpace(errb.String()), err: werr}
	}
	return entries, nil
}

// readTree reads the records of `git ls-tree -r -t -l -z` and holds them
// to lim as they come (listTree).
func readTree(br *bufio.Reader, lim Limits, what string) ([]treeEntry, error) {
	var entries []treeEntry
	var dirs int
	for {
		rec, err := br.ReadString(0)
		if err == io.EOF && rec == "" {
			if n := treeSize(entries); n > lim.MaxBytes {
				return nil, &Problem{Kind: ErrOverLimit, Msg: fmt.Sprintf("%s holds %s in its files, over collect_max_bytes (%s)", what, mib(n), mib(lim.MaxBytes)), Fix: quotaFix}
			}
			return entries, nil
		}
		if err != nil && err != io.EOF {
			return nil, err
		}
		rec = strings.TrimSuffix(rec, "\x00")
		// <mode> SP <type> SP <id> SP+ <size> TAB <path>
		meta, p, ok := strings.Cut(rec, "\t")
		f := strings.Fields(meta)
		if !ok || len(f) != 4 {
			return nil, fmt.Errorf("git ls-tree printed %q", truncate(rec, 80))
		}
		if f[1] == "tree" {
			if dirs++; dirs > lim.MaxFiles {
				return nil, &Problem{Kind: ErrOverLimit, Msg: fmt.Sprintf("%s holds more than %d directories, over collect_max_files (%d)", what, lim.MaxFiles, lim.MaxFiles), Fix: quotaFix}
			}
			continue
		}
		e := treeEntry{mode: f[0], typ: f[1], id: f[2], size: -1, path: p}
		if f[3] != "-" {
			if e.size, err = strconv.ParseInt(f[3], 10, 64); err != nil || e.size < 0 {
				return nil, fmt.Errorf("git ls-tree printed %q", truncate(rec, 80))
			}
		}
		entries = append(entries, e)
		if len(entries) > lim.MaxFiles {
			return nil, &Problem{Kind: ErrOverLimit, Msg: fmt.Sprintf("%s holds more than %d files, over collect_max_files (%d)", what, lim.MaxFiles, lim.MaxFiles), Fix: quotaFix}
		}
	}
}

// treeSize is the entries' files together.
func treeSize(entries []treeEntry) int64 {
	var n int64
	for _, e := range entries {
		n += max(e.size, 0)
	}
	return n
}

// CheckTree holds the tree of commit to lim (a *Problem of kind
// ErrOverLimit when over): what a merge of results, each within lim, may
// not be.
func CheckTree(ctx context.Context, dir, commit string, lim Limits) error {
	_, err := listTree(ctx, dir, nil, commit, lim, "the tree of "+short(commit))
	return err
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// Object types of a pack entry.
const (
	objCommit   = 1
	objTree     = 2
	objBlob     = 3
	objTag      = 4
	objOfsDelta = 6
	objRefDelta = 7
)

// checkInflation reads the count objects of the pack at path (its header
// checked by spoolPack) and refuses it when they inflate to more than
// limit: each whole object's size and each delta's result size, as their
// headers say, before index-pack inflates any of them; a commit sent whole
// is held to commitMax (checkResult holds one made by a delta). An object is
// inflated here only up to the size its header gives (more is a corrupt
// pack), so no more than limit bytes are ever inflated, here or by git.
// hashLen is the length of an object id in bytes (20 for SHA-1).
func checkInflation(path string, count int64, hashLen int, limit int64) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	br := bufio.NewReader(f)
	if _, err := br.Discard(12); err != nil {
		return err
	}
	var inflated, deltas int64 // objects' sizes, deltas' own sizes
	over := func(n int64) error {
		return &Problem{Kind: ErrOverLimit, Msg: fmt.Sprintf("the task's pack inflates to more than %s (%s as sent): over what collect_max_bytes (%s) and collect_max_files allow, nothing of it was unpacked",
			mib(n), mib(fileSize(f)), mib(limit)), Fix: quotaFix}
	}
	corrupt := func(i int64, why string) error {
		return fmt.Errorf("the task's pack is corrupt: object %d of %d: %s", i+1, count, why)
	}
	for i := range count {
		c, err := br.ReadByte()
		if err != nil {
			return corrupt(i, "cut off")
		}
		typ := (c >> 4) & 7
		size := int64(c & 15)
		for shift := 4; c&0x80 != 0; shift += 7 {
			if c, err = br.ReadByte(); err != nil {
				return corrupt(i, "cut off")
			}
			if shift > 56 {
				return corrupt(i, "a size past 2^63")
			}
			size |= int64(c&0x7f) << shift
		}
		if size < 0 {
			return corrupt(i, "a size past 2^63")
		}
		if typ == objCommit && size > commitMax {
			return hugeCommit(fmt.Sprintf("object %d of the task's pack", i+1), strconv.FormatInt(size, 10))
		}
		switch typ {
		case objCommit, objTree, objBlob, objTag:
			if inflated += size; inflated > limit {
				return over(inflated)
			}
		case objOfsDelta:
			for n := 0; ; n++ {
				if c, err = br.ReadByte(); err != nil || n > 9 {
					return corrupt(i, "a bad delta offset")
				}
				if c&0x80 == 0 {
					break
				}
			}
		case objRefDelta:
			if _, err := br.Discard(hashLen); err != nil {
				return corrupt(i, "cut off")
			}
		default:
			return corrupt(i, fmt.Sprintf("unknown type %d", typ))
		}
		delta := typ == objOfsDelta || typ == objRefDelta
		if delta {
			if deltas += size; deltas > limit {
				return over(deltas)
			}
		}
		zr, err := zlib.NewReader(br) // br is a ByteReader: nothing is read past the stream
		if err != nil {
			return corrupt(i, err.Error())
		}
		lr := &io.LimitedReader{R: zr, N: size + 1}
		if delta {
			// A delta starts with its base's size and its result's.
			if _, err := readVarint(lr); err != nil {
				return corrupt(i, "a bad delta")
			}
			result, err := readVarint(lr)
			if err != nil {
				return corrupt(i, "a bad delta")
			}
			if inflated += result; result < 0 || inflated > limit {
				return over(inflated)
			}
		}
		if _, err := io.Copy(io.Discard, lr); err != nil {
			return corrupt(i, err.Error())
		}
		if lr.N != 1 {
			return corrupt(i, "not the size its header gives")
		}
		zr.Close()
	}
	// What git reads is what was checked: the objects, then the
	// checksum, and nothing else.
	if n, _ := io.Copy(io.Discard, br); n != int64(hashLen) {
		return fmt.Errorf("the task's pack is corrupt: %d bytes after its %d objects, not a checksum of %d", n, count, hashLen)
	}
	return nil
}

// hugeCommit is the error for a commit larger than commitMax: a
// wrapper's is a few headers and a line.
func hugeCommit(what, size string) error {
	return &Problem{Kind: ErrOverLimit, Msg: fmt.Sprintf("%s is a commit of %s bytes, more than the %d bytes a commit may be: nothing of it was kept",
		what, size, commitMax), Fix: forgedFix}
}

// readVarint reads a delta header's size: 7 bits a byte, least
// significant first.
func readVarint(r io.Reader) (int64, error) {
	var v int64
	var b [1]byte
	for shift := 0; ; shift += 7 {
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return 0, err
		}
		if shift > 56 {
			return 0, errors.New("a size past 2^63")
		}
		v |= int64(b[0]&0x7f) << shift
		if b[0]&0x80 == 0 {
			return v, nil
		}
	}
}

func fileSize(f *os.File) int64 {
	fi, err := f.Stat()
	if err != nil {
		return 0
	}
	return fi.Size()
}

// checkResult holds the imported commit to what a task's result is: one
// commit whose only parent is base, whose new objects (`rev-list --objects
// commit ^base`) the pack itself holds (not only the operator's repository,
// through which a forged commit could name what the node never had), whose
// pack's deltas used only objects of base's tree as their bases, and whose
// tree is within lim. count is the number of objects the node sent, end
// where they end in its pack; env points git at the quarantine q.
func checkResult(ctx context.Context, dir string, env []string, q string, count, end int64, commit, base string, lim Limits) error {
	inQ := func(args ...string) ([]byte, error) { return gitEnv(ctx, dir, env, args...) }
	// The commit is read whole below: it is first held to what a commit
	// may be, whether it was sent whole (checkInflation) or as a delta.
	sz, err := inQ("cat-file", "-s", "--end-of-options", commit)
	if err != nil {
		return err
	}
	if n, err := strconv.ParseInt(line(sz), 10, 64); err != nil || n > commitMax {
		return hugeCommit("the task's result "+short(commit), line(sz))
	}
	raw, err := inQ("cat-file", "commit", commit)
	if err != nil {
		return err
	}
	var parents []string
	for _, l := range strings.Split(string(raw), "\n") {
		if l == "" {
			break // the message follows
		}
		if p, ok := strings.CutPrefix(l, "parent "); ok {
			parents = append(parents, p)
		}
	}
	if len(parents) != 1 || parents[0] != base {
		return &Problem{Kind: ErrForeign, Msg: fmt.Sprintf("the task's result %s has the parents %s, not its base %s alone: a result is one commit on its base",
			short(commit), shorts(parents), short(base)), Fix: forgedFix}
	}
	sent, appended, err := packObjects(ctx, dir, env, q, count, end)
	if err != nil {
		return err
	}
	if len(appended) > 0 {
		// index-pack --fix-thin completed the pack with the bases of its
		// deltas from the operator's repository: only the base's own
		// objects may be one (the node has no others).
		out, err := inQ("ls-tree", "-r", "-t", "-z", "--full-tree", "--format=%(objectname)", "--end-of-options", base)
		if err != nil {
			return err
		}
		ofBase := map[string]bool{}
		for _, id := range strings.Split(string(out), "\x00") {
			ofBase[id] = true
		}
		if t, err := inQ("rev-parse", "--verify", "--end-of-options", base+"^{tree}"); err == nil {
			ofBase[line(t)] = true
		}
		for _, id := range appended {
			if !ofBase[id] {
				return &Problem{Kind: ErrForeign, Msg: fmt.Sprintf("the task's pack has a delta on object %s, which the task's base %s does not hold: a result may build only on its base",
					short(id), short(base)), Fix: forgedFix}
			}
		}
	}
	out, err := inQ("rev-list", "--objects", "--no-object-names", commit, "^"+base, "--")
	if err != nil {
		return err
	}
	var missing []string
	for _, id := range strings.Fields(string(out)) {
		if !sent[id] {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		return &Problem{Kind: ErrForeign, Msg: fmt.Sprintf("the task's result %s names %d object(s) its pack does not hold and its base %s does not either (%s): a result names only what it sent or its base holds",
			short(commit), len(missing), short(base), shorts(missing[:min(3, len(missing))])), Fix: forgedFix}
	}
	_, err = listTree(ctx, dir, env, commit, lim, "the task's result "+short(commit))
	return err
}

// packObjects reads the index of the one pack index-pack wrote in the
// quarantine q: the objects before offset end (where the pack the node
// sent ends, before its checksum) are those it sent; any after it
// index-pack appended to complete a thin pack. count is how many objects
// the node's pack holds.
func packObjects(ctx context.Context, dir string, env []string, q string, count, end int64) (map[string]bool, []string, error) {
	// Read, not globbed: the repository's path may hold [, * or \.
	var idx []string
	entries, _ := os.ReadDir(filepath.Join(q, "pack"))
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "pack-") && strings.HasSuffix(e.Name(), ".idx") {
			idx = append(idx, filepath.Join(q, "pack", e.Name()))
		}
	}
	if len(idx) != 1 {
		return nil, nil, fmt.Errorf("index-pack wrote %d indexes", len(idx))
	}
	in, err := os.ReadFile(idx[0])
	if err != nil {
		return nil, nil, err
	}
	out, err := gitEnvIn(ctx, dir, env, in, "show-index")
	if err != nil {
		return nil, nil, err
	}
	type obj struct {
		off uint64
		id  string
	}
	var objs []obj
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(l) // <offset> <id> (<crc>)
		if len(f) < 2 {
			return nil, nil, fmt.Errorf("git show-index printed %q", truncate(l, 80))
		}
		off, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			return nil, nil, fmt.Errorf("git show-index printed %q", truncate(l, 80))
		}
		objs = append(objs, obj{off, f[1]})
	}
	slices.SortFunc(objs, func(a, b obj) int { return cmpUint(a.off, b.off) })
	sent := map[string]bool{}
	var appended []string
	for _, o := range objs {
		if o.off < uint64(end) {
			sent[o.id] = true
		} else {
			appended = append(appended, o.id)
		}
	}
	if int64(len(sent)) != count {
		return nil, nil, fmt.Errorf("the pack's index holds %d objects of the %d the pack holds", len(sent), count)
	}
	return sent, appended, nil
}

func cmpUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func short(id string) string { return id[:min(12, len(id))] }

func shorts(ids []string) string {
	if len(ids) == 0 {
		return "(none)"
	}
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = short(id)
	}
	return strings.Join(s, ", ")
}

// gitEnvIn is gitEnv with stdin.
func gitEnvIn(ctx context.Context, dir string, env []string, stdin []byte, args ...string) ([]byte, error) {
	return gitWith(ctx, dir, env, bytes.NewReader(stdin), args...)
}
