package gitrepo

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/dispatch-tool/dispatch/internal/textfence"
)

// Stacked work (issue 33): a task with dependencies starts on the base
// with its dependencies' results merged onto it. The start is computed
// here, in the operator's repository, as the integration merge is, and is
// a function of the results alone: the same dependencies give the same
// commit, so a retry (or a sibling with the same dependencies) starts on
// a commit the node already has.

// Stack returns where a task whose dependencies' results are deps (in the
// order given: dependency order, then ID) starts: base, moved forward to
// each result that contains it, and merged with git's 3-way merge with
// each result that does not. A result the start contains already (a
// dependency of another dependency) adds nothing. A single dependency's
// result is so the start itself, with no merge commit. Conflicts are
// committed with git's markers and listed, as Integrate does; the merge
// commits have a fixed date (the later of their parents'), so that they
// do not depend on when they were made. Only objects are written.
func Stack(ctx context.Context, dir, base string, deps []TaskBranch) (*Merge, error) {
	changed, err := changedBy(ctx, dir, base, deps)
	if err != nil {
		return nil, err
	}
	m := &Merge{Commit: base}
	merged := map[string]string{}
	for _, d := range deps {
		switch in, err := isAncestor(ctx, dir, d.Commit, m.Commit); {
		case err != nil:
			return nil, fmt.Errorf("stack %s: %w", d.ID, err)
		case in:
			merged[d.ID] = d.Commit
			continue
		}
		switch on, err := isAncestor(ctx, dir, m.Commit, d.Commit); {
		case err != nil:
			return nil, fmt.Errorf("stack %s: %w", d.ID, err)
		case on:
			m.Commit, merged[d.ID] = d.Commit, d.Commit
			continue
		}
		tree, paths, err := mergeTree(ctx, dir, m.Commit, d.Commit)
		if err != nil {
			return nil, fmt.Errorf("merge %s: %w", d.ID, err)
		}
		commit, err := fixedMerge(ctx, dir, tree, m.Commit, d, paths)
		if err != nil {
			return nil, fmt.Errorf("record the merge of %s: %w", d.ID, err)
		}
		m.Commit = commit
		pairs := map[string][]string{}
		for _, p := range paths {
			m.Conflicts = append(m.Conflicts, Conflict{Path: p, Tasks: conflictTasks(ctx, dir, p, d, changed[p], merged, pairs)})
		}
		merged[d.ID] = d.Commit
	}
	return m, nil
}

// changedBy maps each file the tasks changed (each from its own Base, else
// base) to the tasks that changed it, in the order given.
func changedBy(ctx context.Context, dir, base string, tasks []TaskBranch) (map[string][]string, error) {
	changed := map[string][]string{}
	for _, t := range tasks {
		from := base
		if t.Base != "" {
			from = t.Base
		}
		out, err := git(ctx, dir, nil, "diff", "--name-only", "-z", "--no-renames", from, t.Commit, "--")
		if err != nil {
			return nil, fmt.Errorf("changes of %s: %w", t.ID, err)
		}
		for _, p := range strings.Split(string(out), "\x00") {
			if p != "" {
				changed[p] = append(changed[p], t.ID)
			}
		}
	}
	return changed, nil
}

// isAncestor reports whether commit a is b or an ancestor of b.
func isAncestor(ctx context.Context, dir, a, b string) (bool, error) {
	_, err := git(ctx, dir, nil, "merge-base", "--is-ancestor", a, b)
	if err != nil && exitCode(err) == 1 {
		return false, nil
	}
	return err == nil, err
}

// fixedMerge records tree as the merge of d onto cur, dated the later of
// the two parents' commit dates.
func fixedMerge(ctx context.Context, dir, tree, cur string, d TaskBranch, conflicts []string) (string, error) {
	out, err := git(ctx, dir, nil, "show", "-s", "--format=%ct", cur, d.Commit)
	if err != nil {
		return "", err
	}
	var when int64
	for _, f := range strings.Fields(string(out)) {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return "", errors.New("git show printed no commit date")
		}
		when = max(when, n)
	}
	date := fmt.Sprintf("@%d +0000", when)
	msg := "Merge " + d.ID
	if len(conflicts) > 0 {
		msg += " (conflicts: " + textfence.Paths(conflicts) + ")"
	}
	env := []string{"GIT_AUTHOR_NAME=" + identity, "GIT_AUTHOR_EMAIL=" + identity + "@localhost", "GIT_AUTHOR_DATE=" + date,
		"GIT_COMMITTER_NAME=" + identity, "GIT_COMMITTER_EMAIL=" + identity + "@localhost", "GIT_COMMITTER_DATE=" + date}
	c, err := gitEnv(ctx, dir, env, "commit-tree", "--no-gpg-sign", tree, "-p", cur, "-p", d.Commit, "-m", msg)
	if err != nil {
		return "", err
	}
	return line(c), nil
}

// subsumed names the tasks whose commit another task's commit contains (a
// dependency a dependent was stacked on): merged through that task, they
// need no merge of their own, and a conflict between them, resolved by
// the dependent, is not met again. A commit equal to base is never
// subsumed. One `git merge-base --independent` decides for all.
func subsumed(ctx context.Context, dir, base string, tasks []TaskBranch) (map[string]bool, error) {
	var commits []string
	for _, t := range tasks {
		if t.Commit != base {
			commits = append(commits, t.Commit)
		}
	}
	if len(commits) < 2 {
		return nil, nil
	}
	out, err := git(ctx, dir, nil, append([]string{"merge-base", "--independent"}, commits...)...)
	if err != nil {
		return nil, err
	}
	independent := map[string]bool{}
	for _, c := range strings.Fields(string(out)) {
		independent[c] = true
	}
	skip := map[string]bool{}
	for _, t := range tasks {
		if t.Commit != base && !independent[t.Commit] {
			skip[t.ID] = true
		}
	}
	return skip, nil
}
