package controller

import (
	"bytes"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"text/template"

	"github.com/dispatch-tool/dispatch/gitrepo"
	"github.com/dispatch-tool/dispatch/notify"
	"github.com/dispatch-tool/dispatch/readmodel"
	"github.com/dispatch-tool/dispatch/store"
)

//go:embed templates/*.md
var templateFS embed.FS

// templates are the readable sources of the generated S99, V and F specs.
var templates = template.Must(template.ParseFS(templateFS, "templates/*.md"))

func verifyID(round int) string { return fmt.Sprintf("V%02d", round) }
func fixID(round int) string    { return fmt.Sprintf("F%02d", round) }

// advance moves a project through its phases (SPEC §8) once the tasks of the
// current phase are finished and collected, and finishes it at the end.
func (c *Controller) advance(ctx context.Context, p store.Project) (bool, error) {
	// Every phase waits for its tasks to end and be collected: while one
	// has not, nothing moves, and the tick reads no more than a count.
	if n, err := c.st.Unsettled(ctx, p.Name); err != nil || n > 0 {
		return false, err
	}
	tasks, err := c.st.Tasks(ctx, p.Name)
	if err != nil {
		return false, err
	}
	runs, err := c.st.Runs(ctx, p.Name, "")
	if err != nil {
		return false, err
	}
	collected := map[string]bool{}
	for _, r := range runs {
		if !r.CollectedAt.IsZero() {
			collected[fmt.Sprintf("%s#%d", r.Task, r.Attempt)] = true
		}
	}
	done := func(t store.Task) bool {
		return store.Terminal(t.Status) && (t.Status != store.Completed || collected[fmt.Sprintf("%s#%d", t.ID, t.Attempt)])
	}
	byID := map[string]store.Task{}
	var author []store.Task
	for _, t := range tasks {
		byID[t.ID] = t
		if !store.IsPhaseID(t.ID) {
			author = append(author, t)
		}
	}
	allCompleted := true
	for _, t := range author {
		if !done(t) {
			return false, nil
		}
		allCompleted = allCompleted && t.Status == store.Completed
	}
	opts, err := p.ParseOptions()
	if err != nil {
		return false, err
	}
	runsDir := readmodel.RunsDir(c.opts.Home, p.Name)
	result := func(ok bool) string {
		if ok && allCompleted {
			return store.ResultPassed
		}
		return store.ResultFailed
	}

	// A phase task that would start past the budget does not: the project
	// ends with what it has.
	overBudget := func() (bool, error) {
		why, stop, err := c.budgetStop(ctx, p, opts)
		if err != nil || !stop {
			return err != nil, err
		}
		c.sendNotice(ctx, p.Name, notify.BudgetStopped, "", why+"; no further phase task starts")
		return true, c.finish(ctx, p, store.ResultFailed, why)
	}

	switch p.Phase {
	case store.PhaseImplementation:
		if !opts.Integration {
			return true, c.finish(ctx, p, result(true), "")
		}
		if !allCompleted {
			// Tasks the budget canceled: say so rather than that the
			// integration was skipped.
			if stop, err := overBudget(); stop {
				return err == nil, err
			}
		}
		if !allCompleted && !opts.IntegratePartial {
			return true, c.finish(ctx, p, store.ResultFailed, "integration skipped: not every task completed (dispatch start --integrate-partial runs it anyway)")
		}
		if stop, err := overBudget(); stop {
			return err == nil, err
		}
		var from taskBase
		var files []string
		var overlaps, conflicts []store.Conflict
		if opts.Repo != nil {
			m, err := c.mergeBranches(ctx, p.Name, opts.Repo, author, runs)
			if err != nil {
				return false, fmt.Errorf("merge the task branches of %s: %w", p.Name, err)
			}
			// The merge is checked out on the integration's node and is
			// its result's start: held to the quotas each result is.
			var over *gitrepo.Problem
			if err := gitrepo.CheckTree(ctx, opts.Repo.Dir, m.Commit, c.limits()); errors.As(err, &over) && errors.Is(err, gitrepo.ErrOverLimit) {
				return true, c.finish(ctx, p, store.ResultFailed, fmt.Sprintf("integration not started: the merge of the task branches (%s): %s"+
					"\n  fix: raise collect_max_bytes/collect_max_files under controller: in nodes.yaml, or have the tasks commit less; then run the project again",
					strings.TrimPrefix(MergeRef(p.Name), "refs/heads/"), over.Msg))
			} else if err != nil {
				return false, fmt.Errorf("merge the task branches of %s: %w", p.Name, err)
			}
			from, files, overlaps, conflicts = taskBase{Commit: m.Commit}, m.Changed, m.Overlaps, m.Conflicts
		} else {
			merged := filepath.Join(runsDir, "merged")
			files, conflicts, err = c.merge(ctx, p.Name, author, merged)
			if err != nil {
				return false, fmt.Errorf("merge outputs of %s: %w", p.Name, err)
			}
			from = taskBase{Dir: merged}
		}
		var buf bytes.Buffer
		if err := templates.ExecuteTemplate(&buf, "integration.md", map[string]any{
			"Project": p.Name, "Tasks": author, "Files": files, "Conflicts": conflicts, "Overlaps": overlaps, "Git": opts.Repo != nil}); err != nil {
			return false, err
		}
		msg := fmt.Sprintf("merged %d files from %d tasks, %d conflicts", len(files), len(author), len(conflicts))
		if opts.Repo != nil {
			msg = fmt.Sprintf("merged the branches of %d tasks (%d files changed, %d by more than one task), %d conflicts",
				len(author), len(files), len(overlaps), len(conflicts))
			for _, o := range overlaps {
				msg += fmt.Sprintf("; %s changed by %s", o.Path, strings.Join(o.Tasks, ", "))
			}
		}
		return false, c.startPhaseTask(ctx, p, opts, store.IntegrationID, "integration", "Integrate the outputs", buf.Bytes(), from, store.PhaseIntegration,
			msg,
			func(tx *store.Tx) error { return tx.PutConflicts(ctx, p.Name, conflicts) })

	case store.PhaseIntegration:
		s99, ok := byID[store.IntegrationID]
		if !ok || !done(s99) {
			return false, nil
		}
		if s99.Status != store.Completed {
			return true, c.finish(ctx, p, store.ResultFailed, "integration task "+store.IntegrationID+" "+s99.Status)
		}
		tree := resultOf(runsDir, s99, runs)
		if !opts.Verification {
			if err := c.final(ctx, p, opts, tree); err != nil {
				return false, err
			}
			return true, c.finish(ctx, p, result(true), "")
		}
		if stop, err := overBudget(); stop {
			return err == nil, err
		}
		return false, c.startVerification(ctx, p, opts, author, 1, tree, nil)

	case store.PhaseVerification, store.PhaseFix:
		round := 0
		for round+1 < 100 {
			if _, ok := byID[verifyID(round+1)]; !ok {
				break
			}
			round++
		}
		if round == 0 {
			return false, fmt.Errorf("project %s is in phase %s without a verification task", p.Name, p.Phase)
		}
		v := byID[verifyID(round)]
		if p.Phase == store.PhaseFix {
			f, ok := byID[fixID(round)]
			if !ok || !done(f) {
				return false, nil
			}
			if f.Status != store.Completed {
				if err := c.final(ctx, p, opts, baseOf(v)); err != nil {
					return false, err
				}
				return true, c.finish(ctx, p, store.ResultFailed, "fix task "+f.ID+" "+f.Status)
			}
			verdicts, err := c.st.Verdicts(ctx, p.Name)
			if err != nil {
				// A fix round with no issues would verify the same tree again.
				return false, fmt.Errorf("project %s: read the verdict of round %d: %w", p.Name, round, err)
			}
			var issues []string
			if len(verdicts) > 0 {
				issues = verdicts[len(verdicts)-1].Issues
			}
			if stop, err := overBudget(); stop {
				return err == nil, err
			}
			return false, c.startVerification(ctx, p, opts, author, round+1, resultOf(runsDir, f, runs), issues)
		}
		if !done(v) {
			return false, nil
		}
		verdict := readVerdict(v, c.verdictReader(ctx, runsDir, opts, v, runs))
		verdict.Round = round
		if err := c.st.Update(ctx, func(tx *store.Tx) error {
			if err := tx.PutVerdict(ctx, p.Name, verdict); err != nil {
				return err
			}
			msg := "verification passed"
			if !verdict.Pass {
				msg = fmt.Sprintf("verification failed: %d issue(s)", len(verdict.Issues))
			}
			return tx.Event(ctx, store.Event{Project: p.Name, Task: v.ID, Attempt: v.Attempt, Kind: "verdict", Message: msg})
		}); err != nil {
			return false, err
		}
		if verdict.Pass || round > opts.MaxFixRounds {
			// The final tree is the last one verified.
			if err := c.final(ctx, p, opts, baseOf(v)); err != nil {
				return false, err
			}
			note := ""
			if !verdict.Pass {
				note = fmt.Sprintf("verification failed after %d fix round(s) (max_fix_rounds)", opts.MaxFixRounds)
			}
			return true, c.finish(ctx, p, result(verdict.Pass), note)
		}
		if stop, err := overBudget(); stop {
			return err == nil, err
		}
		var buf bytes.Buffer
		if err := templates.ExecuteTemplate(&buf, "fix.md", map[string]any{
			"Project": p.Name, "Round": round, "Issues": verdict.Issues}); err != nil {
			return false, err
		}
		return false, c.startPhaseTask(ctx, p, opts, fixID(round), "fix", fmt.Sprintf("Fix the issues of verification %d", round),
			buf.Bytes(), baseOf(v), store.PhaseFix, fmt.Sprintf("fix round %d of %d", round, opts.MaxFixRounds), nil)
	}
	return false, nil
}

func (c *Controller) startVerification(ctx context.Context, p store.Project, opts store.ProjectOptions, author []store.Task, round int, tree taskBase, previous []string) error {
	var buf bytes.Buffer
	if err := templates.ExecuteTemplate(&buf, "verification.md", map[string]any{
		"Project": p.Name, "Round": round, "Tasks": author, "PreviousIssues": previous}); err != nil {
		return err
	}
	return c.startPhaseTask(ctx, p, opts, verifyID(round), "verification", fmt.Sprintf("Verify the integrated result (round %d)", round),
		buf.Bytes(), tree, store.PhaseVerification, fmt.Sprintf("verification round %d", round), nil)
}

// startPhaseTask adds a phase task (the author's spec for its ID when there
// is one, else the generated one) that starts from tree, and moves the
// project to phase, in one transaction.
func (c *Controller) startPhaseTask(ctx context.Context, p store.Project, opts store.ProjectOptions, id, typ, title string,
	generated []byte, tree taskBase, phase, message string, also func(*store.Tx) error) error {
	t := store.Task{Project: p.Name, ID: id, Title: title, Type: typ, Tool: opts.PhaseTool, Priority: 1,
		DependsOn: []string{}, MaxRetries: c.config().Controller.MaxRetries, SpecFile: "(generated from controller/templates)",
		Snapshot: generated, BaseDir: tree.Dir, BaseCommit: tree.Commit, Sandbox: opts.Sandbox, Network: opts.Network, Limits: opts.Limits}
	if o, ok := opts.Overrides[id]; ok {
		t.Title, t.Tool, t.Model, t.Timeout, t.Tags, t.NodePin = o.Title, o.Tool, o.Model, o.Timeout, o.Tags, o.Node
		t.SpecFile, t.Snapshot = o.File, o.Snapshot
		t.Sandbox, t.Network, t.Limits = o.Sandbox, o.Network, o.Limits
	}
	sum := sha256.Sum256(t.Snapshot)
	t.SpecHash = hex.EncodeToString(sum[:])
	// A copy of the spec next to the outputs, for the operator to read.
	specPath := filepath.Join(readmodel.RunsDir(c.opts.Home, p.Name), id+".md")
	if err := os.MkdirAll(filepath.Dir(specPath), 0o755); err != nil {
		return err
	}
	// Replaced whole: an ended run's archive may link the old one.
	if err := os.WriteFile(specPath+".tmp", t.Snapshot, 0o644); err != nil {
		return err
	}
	if err := os.Rename(specPath+".tmp", specPath); err != nil {
		return err
	}
	return c.st.Update(ctx, func(tx *store.Tx) error {
		if also != nil {
			if err := also(tx); err != nil {
				return err
			}
		}
		if err := tx.InsertTask(ctx, t); err != nil {
			return err
		}
		return tx.SetProject(ctx, p.Name, store.ProjectPatch{Phase: new(phase)}, "phase "+phase+": "+message)
	})
}

// readVerdict reads a verifier's verdict.json with read; anything but a
// valid verdict is a failed verification naming what was wrong.
func readVerdict(v store.Task, read func() ([]byte, error)) store.Verdict {
	out := store.Verdict{Task: v.ID}
	if v.Status != store.Completed {
		out.Issues = []string{fmt.Sprintf("the verifier %s did not complete (%s): %s", v.ID, v.Status, readmodel.ErrorText(v.ErrorClass, v.Error))}
		return out
	}
	b, err := read()
	if errors.Is(err, errTooLarge) {
		out.Issues = []string{fmt.Sprintf("verdict.json is malformed: larger than %d KiB", maxVerdictSize>>10)}
		return out
	}
	if errors.Is(err, fs.ErrNotExist) {
		out.Issues = []string{"verdict.json is missing: the verifier wrote no verdict"}
		return out
	}
	if err != nil {
		out.Issues = []string{"verdict.json cannot be read: " + err.Error()}
		return out
	}
	var raw struct {
		Pass   *bool    `json:"pass"`
		Issues []string `json:"issues"`
	}
	if err := json.Unmarshal(b, &raw); err != nil || raw.Pass == nil {
		why := "it has no boolean \"pass\""
		if err != nil {
			why = err.Error()
		}
		out.Issues = []string{"verdict.json is malformed: " + why}
		return out
	}
	out.Pass, out.Issues = *raw.Pass, raw.Issues
	if out.Issues == nil {
		out.Issues = []string{}
	}
	return out
}

// merge builds runs/<project>/merged/ from the collected outputs of the
// completed author tasks, in ID order. A path two tasks wrote with
// different content is a conflict: the first version stays, the other is
// stored as <path>.<ID>.conflict. Files a task left as the project's base
// gave them do not count as written.
func (c *Controller) merge(ctx context.Context, project string, author []store.Task, merged string) ([]string, []store.Conflict, error) {
	if err := os.RemoveAll(merged); err != nil {
		return nil, nil, err
	}
	if err := os.MkdirAll(merged, 0o755); err != nil {
		return nil, nil, err
	}
	base := map[string]string{}
	var baseDir string
	for _, t := range author {
		if t.BaseDir != "" {
			baseDir = t.BaseDir
			break
		}
	}
	if baseDir != "" {
		if err := copyTree(baseDir, merged); err != nil {
			return nil, nil, fmt.Errorf("copy base: %w", err)
		}
		sums, err := treeSums(baseDir)
		if err != nil {
			return nil, nil, err
		}
		base = sums
	}
	owner := map[string]string{} // path → task whose version is in merged
	sumOf := map[string]string{}
	conflicts := map[string]*store.Conflict{}
	for _, t := range author {
		if t.Status != store.Completed {
			continue
		}
		out := filepath.Join(readmodel.RunsDir(c.opts.Home, project), t.ID, "output")
		sums, err := treeSums(out)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		paths := make([]string, 0, len(sums))
		for p := range sums {
			paths = append(paths, p)
		}
		sort.Strings(paths)
		for _, rel := range paths {
			sum := sums[rel]
			if base[rel] == sum {
				continue // left as the base gave it
			}
			src := filepath.Join(out, filepath.FromSlash(rel))
			dst := filepath.Join(merged, filepath.FromSlash(rel))
			if at := clashAt(merged, rel); at != "" {
				// A file of one task where another has a directory: the
				// later one goes beside it, as for any conflict.
				other := filepath.Join(merged, filepath.FromSlash(at)) + "." + t.ID + ".conflict" + strings.TrimPrefix(rel, at)
				if err := copyFile(src, filepath.FromSlash(other)); err != nil {
					return nil, nil, err
				}
				cf := conflicts[at]
				if cf == nil {
					cf = &store.Conflict{Path: at, Tasks: []string{ownerOf(owner, at)}}
					conflicts[at] = cf
				}
				if !slices.Contains(cf.Tasks, t.ID) {
					cf.Tasks = append(cf.Tasks, t.ID)
				}
				continue
			}
			switch first, taken := owner[rel]; {
			case !taken:
				if err := copyFile(src, dst); err != nil {
					return nil, nil, err
				}
				owner[rel], sumOf[rel] = t.ID, sum
			case sumOf[rel] == sum:
				// Same content from two tasks: no conflict.
			default:
				if err := copyFile(src, dst+"."+t.ID+".conflict"); err != nil {
					return nil, nil, err
				}
				cf := conflicts[rel]
				if cf == nil {
					cf = &store.Conflict{Path: rel, Tasks: []string{first}}
					conflicts[rel] = cf
				}
				cf.Tasks = append(cf.Tasks, t.ID)
			}
		}
	}
	files, err := treeSums(merged)
	if err != nil {
		return nil, nil, err
	}
	var list []string
	for p := range files {
		list = append(list, p)
	}
	sort.Strings(list)
	var cs []store.Conflict
	for _, cf := range conflicts {
		cs = append(cs, *cf)
	}
	sort.Slice(cs, func(i, j int) bool { return cs[i].Path < cs[j].Path })
	return list, cs, nil
}

// maxVerdictSize caps the verdict.json the controller reads: it came from a
// node and may be as large as collect_max_bytes.
const maxVerdictSize = 1 << 20

var errTooLarge = gitrepo.ErrTooLarge

// readCapped reads a file of at most max bytes; a larger one is errTooLarge,
// and is not read.
func readCapped(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, errTooLarge
	}
	return b, nil
}

// clashAt returns the path in merged that keeps the file rel from being
// placed there: an ancestor of rel that is not a directory, or rel itself
// when it is a directory. It returns "" when nothing is in the way.
func clashAt(merged, rel string) string {
	parts := strings.Split(rel, "/")
	for i := range parts {
		at := strings.Join(parts[:i+1], "/")
		fi, err := os.Lstat(filepath.Join(merged, filepath.FromSlash(at)))
		if err != nil {
			return ""
		}
		if last := i == len(parts)-1; last == fi.IsDir() {
			return at
		}
	}
	return ""
}

// ownerOf names the task whose file is at, or under the directory at, in
// the merged tree; "base" when the project's base tree put it there.
func ownerOf(owner map[string]string, at string) string {
	if id, ok := owner[at]; ok {
		return id
	}
	first := ""
	for p, id := range owner {
		if strings.HasPrefix(p, at+"/") && (first == "" || id < first) {
			first = id
		}
	}
	if first == "" {
		return "base"
	}
	return first
}

// treeSums maps every regular file under dir ('/'-separated relative path)
// to its sha256.
func treeSums(dir string) (map[string]string, error) {
	if _, err := os.Stat(dir); err != nil {
		return nil, err
	}
	out := map[string]string{}
	err := walkSums(dir, func(rel string, _ fs.FileMode, sum string) { out[rel] = sum })
	return out, err
}

// walkSums calls fn with the '/'-separated relative path, mode and sha256
// of every regular file under dir.
func walkSums(dir string, fn func(rel string, mode fs.FileMode, sum string)) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		h := sha256.New()
		if _, err := io.Copy(h, f); err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fn(filepath.ToSlash(rel), fi.Mode(), hex.EncodeToString(h.Sum(nil)))
		return nil
	})
}

// copyTree copies the regular files and directories under src into dst,
// replacing dst.
func copyTree(src, dst string) error {
	if err := os.RemoveAll(dst); err != nil {
		return err
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	if src == "" {
		return nil
	}
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(target, 0o755)
		case d.Type().IsRegular():
			return copyFile(p, target)
		}
		return nil
	})
}
