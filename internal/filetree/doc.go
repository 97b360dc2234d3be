// Package filetree copies and checksums files and trees on the controller's
// disk: what the controller does when it collects and integrates outputs,
// and what plan does when it archives a run or hashes a project's base tree.
package filetree
