// Package launchfile owns reading and checking a task directory's
// launch.json on a node (Read, Normalize): defaults filled in, every field
// the controller may send checked (the base tree's path, the limits, the
// git repository, the sandbox paths, the network allow list: AllowList),
// and a bad document refused as a usage error saying which field is wrong;
// and the secret environment `run` and the supervisor get on stdin (ReadEnv,
// CheckEnv), never quoted in an error.
//
// What the launch means is the supervisor's. It imports wire,
// internal/netallow and the wrapper packages errkind, limits, taskfiles and
// tree.
package launchfile
