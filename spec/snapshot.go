package spec

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// ChangedError is Project.Snapshot's error when a spec file no longer
// holds the text Load read from it: it changed, or went, since.
type ChangedError struct {
	File    string // the spec file
	Problem string // what reading it again found wrong; "" when it reads but differs
}

func (e *ChangedError) Error() string {
	msg := fmt.Sprintf("%s changed while dispatch was reading the project", e.File)
	if e.Problem != "" {
		msg += " (" + e.Problem + ")"
	}
	return msg + ": run the command again once the file is saved"
}

// Snapshot returns the text given to the tool for t, a task of p (see
// Task.Hash for its format). Load keeps only each spec's hash, so that a
// project of 10,000 specs does not hold their text: Snapshot reads t's
// spec file again and makes its snapshot as Load did, with the shared
// contexts Load read. It fails with *ChangedError when the result is not
// what Load hashed. Callers read one task's snapshot at a time, when
// they store it, and drop it.
func (p *Project) Snapshot(t *Task) ([]byte, error) {
	if t.text != nil {
		return t.text, nil
	}
	if t.File == "" {
		return nil, fmt.Errorf("task %s of %s has no spec file to read its text from", t.ID, p.Name)
	}
	// The project's directory as Load resolved it: the one Load read,
	// whatever the working directory is now.
	l := &loader{dir: p.Dir, abs: p.Dir, project: &Project{Name: p.Name, Dir: p.Dir, Config: p.Config},
		shared: p.shared, sections: p.sections}
	ps := l.parseTask(taskFile{name: filepath.Base(t.File), id: cmpOr(t.Parent, t.ID), slug: t.Slug})
	if ps == nil {
		why := "it cannot be read as text"
		if len(l.errs) > 0 {
			why = l.errs[0].Msg
		}
		return nil, &ChangedError{File: t.File, Problem: why}
	}
	body := ps.body
	if t.Vars != nil {
		body = make([]string, len(ps.body))
		for i, line := range ps.body {
			body[i] = substitute(line, t.Vars)
		}
	}
	snap := snapshotOf(body, ps.sections)
	if len(snap) != t.Size || hashOf(snap) != t.Hash {
		return nil, &ChangedError{File: t.File}
	}
	return snap, nil
}

// setHash sets t's Hash and Size from its body and contexts; the snapshot
// itself is garbage at once (see Project.Snapshot).
func setHash(t *Task, body []string, sections []section) {
	snap := snapshotOf(body, sections)
	t.Hash, t.Size = hashOf(snap), len(snap)
}

// snapshotOf builds a snapshot in a buffer of its final size: the body
// lines, each ending in LF, then "\n" and each context section.
func snapshotOf(body []string, sections []section) []byte {
	size := 0
	for _, line := range body {
		size += len(line) + 1
	}
	for _, sec := range sections {
		size += 1 + len(sec.text)
	}
	snap := make([]byte, 0, size)
	for _, line := range body {
		snap = append(append(snap, line...), '\n')
	}
	for _, sec := range sections {
		snap = append(append(snap, '\n'), sec.text...)
	}
	return snap
}

func hashOf(snap []byte) string {
	sum := sha256.Sum256(snap)
	return hex.EncodeToString(sum[:])
}

// ReadIntegrationSpec reads p's integration_spec file as Load checked it
// (regular, at most 8 MiB, inside the specs directory), not what a writer
// of the specs directory put in its place since: a link out is not
// followed, a FIFO not waited on. Its error is a *ChangedError.
func (p *Project) ReadIntegrationSpec() ([]byte, error) {
	l := &loader{dir: p.Dir, abs: p.Dir, project: &Project{Name: p.Name, Dir: p.Dir, Config: p.Config}}
	path := l.path(filepath.FromSlash(p.Config.IntegrationSpec))
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, &ChangedError{File: path, Problem: "it was removed"}
	}
	var raw []byte
	if err == nil {
		raw, err = l.readChecked(path, fi)
	}
	if err != nil {
		l.readProblem(path, err)
		return nil, &ChangedError{File: path, Problem: l.errs[0].Msg}
	}
	return raw, nil
}
