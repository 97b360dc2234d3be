// Package wire holds the documents the controller and the node's wrapper
// exchange — launch.json, status.json, the replies of `wrapper status`,
// `watch` and the other subcommands — and their constants. It has no
// behaviour beyond the encoding and validation helpers both sides need
// (Status.Clamp, IsCommitID, EnforcementControllers, the frames of a
// collect conversation: CollectFrameWriter, CollectFrameReader): the wrapper writes
// these documents and the controller reads them, and neither needs the
// other's code to do so.
package wire
