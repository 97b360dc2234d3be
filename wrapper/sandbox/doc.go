// Package sandbox owns how a tool is confined on a node: the bwrap argv
// (Spec, NewSpec, Args: the task directory writable, the node's homes
// hidden, the tool's own files exposed, OpenPaths), the Seatbelt profile
// generated for macOS (not enabled), whether a sandbox works here (Probe,
// ProbeBwrap) and its answer cached beside the wrapper, the tool's private
// HOME with the node user's git identity (GitIdentity, its answer cached
// too) and the agent's settings copied in and its logins removed
// (AgentSource, CopyAgentFiles, RemoveAgentLogins), and the note a failed
// sandboxed attempt gets (Note, NoteApplies, RefusedNote).
//
// It does not decide whether an attempt is sandboxed or with what network
// (the supervisor does, from launch.json and the probe), nor run the proxy
// (egress). It imports wire, wrapper/egress, wrapper/proc and
// wrapper/taskfiles.
package sandbox
