// Package taskfiles owns the files of a task directory D on a node: their
// names (launch.json, status.json, lock, task.log, output/, attempts/...),
// atomic and durable writes (WriteFileAtomic, WriteStatusDurable), reading a
// control file the task itself may have replaced (regular files only, never
// through a link, never blocking, size-capped), D/lock (LockTask,
// SupervisorAlive), wrapper.log (OpenWrapperLog, LogWrapper) and task.log
// itself: the capped log with its cut marker (TaskLog) and the line
// splitter that watches it (LineWatcher).
//
// It does not know what the files mean: launch.json is parsed and checked by
// package wrapper, the tool's output is read by agentlog, and who may signal
// which process is package proc's. It imports only wire.
package taskfiles
