package gitrepo

import (
	"context"
	"errors"
	"os/exec"
	"strings"
)

// BranchProblem says why git would refuse name as a branch name
// (refs/heads/<name>), by the rule of git-check-ref-format(1) it breaks;
// "" when git takes it. git itself decides where it is installed; the same
// rules in Go decide where it is not, and explain git's refusal.
func BranchProblem(ctx context.Context, name string) string {
	rule := BranchRule(name)
	_, err := git(ctx, "", nil, "check-ref-format", "refs/heads/"+name)
	var ee *exec.ExitError
	switch {
	case err == nil:
		return ""
	case !errors.As(err, &ee):
		return rule // no git to ask
	case rule == "":
		return "git check-ref-format refuses it"
	}
	return rule
}

// BranchRule is the rule of git-check-ref-format(1) that a branch name
// breaks, or "": BranchProblem without asking git.
func BranchRule(name string) string {
	switch {
	case name == "":
		return "a branch name cannot be empty"
	case strings.HasPrefix(name, "/") || strings.HasSuffix(name, "/") || strings.Contains(name, "//"):
		return "a ref name cannot begin or end with a slash or hold two in a row"
	case strings.HasSuffix(name, "."):
		return "a ref name cannot end with a dot"
	case strings.Contains(name, ".."):
		return `a ref name cannot hold ".."`
	case strings.Contains(name, "@{"):
		return `a ref name cannot hold "@{"`
	}
	for _, r := range name {
		if r < 0x20 || r == 0x7f || strings.ContainsRune(" ~^:?*[\\", r) {
			return "a ref name cannot hold control characters, spaces or any of ~ ^ : ? * [ \\"
		}
	}
	for _, c := range strings.Split(name, "/") {
		switch {
		case strings.HasPrefix(c, "."):
			return "a component of a ref name (between slashes) cannot begin with a dot"
		case strings.HasSuffix(c, ".lock"):
			return `a component of a ref name (between slashes) cannot end with ".lock"`
		}
	}
	return ""
}
