// Package policy says how a task may run on a node, for the controller
// that launches it and for plan, which checks before a start that every
// task can: which nodes may take it (Eligible), under which sandbox and
// network (TaskLaunch, DefaultNetwork), whether a node's api_mode can be used with the
// controller's environment (ModeProblem), with what command (ToolFor,
// ToolCommand, IsBuiltinTool, NetworkAllow, ResumePrompt), and what a
// wrapper's failed reply says (ReplyError). It decides over nodes.yaml and
// a task, and never talks to a node.
package policy
