package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/dispatch-tool/dispatch/store"
)

// collectAll pulls the files of every finished attempt not yet collected to
// runs/<project>/<ID>/, so results are on the operator's machine even if the
// node disappears later: every attempt's task.log goes to attempts/<n>/, and
// the latest attempt's output/ and task.log to the top of the task's
// directory, with the manifest in the database.
func (c *Controller) collectAll(ctx context.Context, projects []string, pulls map[string]*pull) error {
	current := map[string]int{}
	byNode := map[string][]store.Run{}
	for _, project := range projects {
		tasks, err := c.st.Tasks(ctx, project)
		if err != nil {
			return err
		}
		for _, t := range tasks {
			current[taskKey(project, t.ID)] = t.Attempt
		}
		runs, err := c.st.Runs(ctx, project, "")
		if err != nil {
			return err
		}
		for _, r := range runs { // by task, then attempt
			if !r.CollectedAt.IsZero() || (r.Status != store.Completed && r.Status != store.Failed && r.Status != "killed") {
				continue
			}
			if p := pulls[r.Node]; p == nil || p.err != nil {
				continue // not reachable in this tick; try again next tick
			}
			byNode[r.Node] = append(byNode[r.Node], r)
		}
	}
	var mu sync.Mutex
	var errs []error
	names := make([]string, 0, len(byNode))
	for name := range byNode {
		names = append(names, name)
	}
	c.onNodes(names, c.callTimeout(), func(n *nodeRuntime) {
		for _, r := range byNode[n.cfg.Name] {
			if err := c.collect(ctx, n, r, r.Attempt == current[taskKey(r.Project, r.Task)]); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("collect %s/%s attempt %d from %s: %w", r.Project, r.Task, r.Attempt, r.Node, err))
				mu.Unlock()
			}
		}
	})
	mu.Lock()
	defer mu.Unlock()
	return errors.Join(errs...)
}

// collect copies one finished attempt. inPlace says its files are still in
// the task directory on the node; once a later attempt has started they are
// in attempts/<n>/ there.
func (c *Controller) collect(ctx context.Context, n *nodeRuntime, r store.Run, inPlace bool) error {
	ctx, cancel := context.WithTimeout(ctx, c.callTimeout())
	defer cancel()
	src := taskDir(n, r.Project, r.Task)
	if !inPlace {
		src = path.Join(src, "attempts", strconv.Itoa(r.Attempt))
	}
	dest := filepath.Join(RunsDir(c.opts.Home, r.Project), r.Task)
	tmp := filepath.Join(RunsDir(c.opts.Home, r.Project), "."+r.Task+".collecting")
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	defer os.RemoveAll(tmp)

	var manifest []store.File
	files, err := n.tr.Walk(ctx, path.Join(src, "output"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	for _, f := range files {
		if !f.Mode.IsRegular() {
			continue // symlinks and the like are not copied off a node
		}
		local, err := safeJoin(filepath.Join(tmp, "output"), f.Path)
		if err != nil {
			return err
		}
		sum, size, err := c.fetch(ctx, n, path.Join(src, "output", f.Path), local, f.Mode.Perm())
		if err != nil {
			return err
		}
		manifest = append(manifest, store.File{Project: r.Project, Task: r.Task, Attempt: r.Attempt, Path: f.Path, Size: size, SHA256: sum})
	}
	attemptLog := filepath.Join(dest, "attempts", strconv.Itoa(r.Attempt), "task.log")
	if err := os.MkdirAll(filepath.Dir(attemptLog), 0o755); err != nil {
		return err
	}
	if _, _, err := c.fetch(ctx, n, path.Join(src, "task.log"), attemptLog, 0o644); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	// The latest attempt replaces the task's output/ and task.log.
	if err := os.MkdirAll(filepath.Join(tmp, "output"), 0o755); err != nil {
		return err
	}
	if err := os.RemoveAll(filepath.Join(dest, "output")); err != nil {
		return err
	}
	if err := os.Rename(filepath.Join(tmp, "output"), filepath.Join(dest, "output")); err != nil {
		return err
	}
	if err := copyFile(attemptLog, filepath.Join(dest, "task.log")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return c.st.Update(ctx, func(tx *store.Tx) error {
		if err := tx.ReplaceFiles(ctx, r.Project, r.Task, r.Attempt, manifest); err != nil {
			return err
		}
		return tx.SetRun(ctx, r.Project, r.Task, r.Attempt, store.Set{"collected_at": tx.Now()})
	})
}

func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o644)
}

// fetch copies one file off the node, returning its sha256 and size.
func (c *Controller) fetch(ctx context.Context, n *nodeRuntime, remote, local string, perm fs.FileMode) (string, int64, error) {
	if err := os.MkdirAll(filepath.Dir(local), 0o755); err != nil {
		return "", 0, err
	}
	f, err := os.OpenFile(local, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, perm|0o200)
	if err != nil {
		return "", 0, err
	}
	h := sha256.New()
	cw := &countWriter{w: io.MultiWriter(f, h)}
	err = n.tr.Get(ctx, remote, cw)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(local)
		return "", 0, err
	}
	return hex.EncodeToString(h.Sum(nil)), cw.n, nil
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// safeJoin joins a node-supplied relative path under dir, refusing any path
// that would escape it.
func safeJoin(dir, rel string) (string, error) {
	clean := path.Clean("/" + rel)
	if clean == "/" || strings.Contains(rel, "\x00") {
		return "", fmt.Errorf("refusing file name %q from node", rel)
	}
	return filepath.Join(dir, filepath.FromSlash(clean[1:])), nil
}
