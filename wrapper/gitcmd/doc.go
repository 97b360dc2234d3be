// Package gitcmd is the wrapper's git subcommands: git-receive, git-have,
// git-spare and git-pack, over package gitresult.
package gitcmd
