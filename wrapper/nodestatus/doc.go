// Package nodestatus owns what a node says about its task directories:
// one task's status as `status` reports it (status.json, whether its
// supervisor holds the lock, its private record's session), the whole
// node's (NodeStatus, with the node's facts), the live index under
// .live/ that lets `status --live` look only at the attempts under way
// (MarkLive, UnmarkLive, LiveStatus), the `watch` stream of changes
// (Watch: inotify on Linux, a scan elsewhere) and following task.log
// (LogReader).
//
// The subcommands and their flags are package wrapper's (statuscmd.go).
// It does not start, stop or decide anything. It imports wire,
// wrapper/errkind, wrapper/proc and wrapper/taskfiles.
package nodestatus
