// Package nodes describes the machines that run tasks and how to reach them.
//
// Load and Parse read nodes.yaml (SPEC §4) into a Config, reporting every problem
// with its file, line and fix as ConfigErrors; nothing is written. ExpandEnv
// expands the ${VAR} references of api_mode env values at launch time.
//
// Transport is the seam between the controller and one node: run a command, put,
// get, list and remove files. Local implements it for the controller's own
// machine; package nodes/sshnode implements it over SSH for remote nodes. Every
// implementation runs the shared suite in package transporttest.
package nodes
