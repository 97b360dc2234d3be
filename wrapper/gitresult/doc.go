// Package gitresult owns a git-native attempt's repositories on a node: the
// project's bare repository the bases arrive in (InitRepo, BaseRefPrefix),
// the attempt's workspace checked out from a base or taken from a spare
// checkout made ahead (PrepareRepoWorkspace, MakeSpare), and the result
// recorded as one commit in a private git directory out of the task's
// reach (SnapshotDir, SnapshotWorkspace), which git-pack sends back. Every
// git runs with no system or global config, no hooks and no prompt (RunGit).
//
// The git subcommands and their flags are package wrapper's; when to
// snapshot is the supervisor's. It imports wire and wrapper/proc (for the
// private directory beside the process records).
package gitresult
