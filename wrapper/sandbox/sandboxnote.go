package sandbox

import (
	"path/filepath"
	"strings"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/taskfiles"
)

// A sandboxed task that fails writing outside what it may write sees only
// the system's words ("Read-only file system"; "No such file or
// directory" for a path under the node's /tmp, which the sandbox replaces
// with the attempt's own). Its error then says that it ran sandboxed, what
// it could write there and how to open more (issue 32 item 9).

// NoteApplies reports whether a failed attempt's error gets the
// sandbox's note: where setup, the tool or the gate ran confined
// (confined) and failed by its own exit, a signal or the gate's verdict,
// as a refused write makes it fail. A timeout, a stall, a limit, a kill,
// an agent's rate limit or login, or a start that ran nothing is not one.
func NoteApplies(status, class string, confined bool) bool {
	if status != wire.StatusFailed || !confined {
		return false
	}
	switch class {
	case wire.ClassExit, wire.ClassCrash, wire.ClassGate, wire.ClassStart:
		return true
	}
	return false
}

// Writable are the places a process under sp may write, in words: its
// working directory, its HOME, its own /tmp, and the node's sandbox_paths
// rw that exist on the node (as nodes.yaml writes them).
func (sp *Spec) Writable() []string {
	var out []string
	for _, p := range sp.Rw {
		switch filepath.Base(p) {
		case taskfiles.DirOutput:
			out = append(out, "output/ (its workspace)")
		case taskfiles.DirGate:
			out = append(out, "the gate's copy of the result (its working directory)")
		case taskfiles.DirHome, taskfiles.DirGateHome:
			out = append(out, "its own $HOME ("+p+")")
		default:
			out = append(out, p)
		}
	}
	out = append(out, "its own /tmp (new for each attempt, not the node's)")
	for _, b := range sp.Paths {
		if b.rw && b.name != "" && !b.missing {
			out = append(out, b.name+" (sandbox_paths rw)")
		}
	}
	return out
}

// Note is what the error of a failed sandboxed attempt on node
// adds: who ("it", "its gate") ran under bwrap, where it may write, and
// the two ways to let it write more.
func Note(who, node string, writable []string) string {
	return "; " + who + " ran sandboxed (bwrap) on node " + node + ", where it may write only to " + strings.Join(writable, ", ") +
		`: the rest of the file system is read-only ("Read-only file system"), and the node user's home, the work_dir and the node's /tmp are hidden ("No such file or directory"); ` +
		"to let the task write a path, add it to the node's sandbox_paths: {rw: [path]} in nodes.yaml (~/path for one under the home), " +
		"or set sandbox: off in the spec's front matter or project.yaml (where the node's sandbox is auto) or on the node in nodes.yaml (see docs/SANDBOX.md)"
}
