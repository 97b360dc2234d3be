// Package spec reads a project's task specs from specs/<project>/ and checks
// them before anything runs.
//
// A project is a directory of task files named <ID>[-slug].md, an optional
// SHARED_CONTEXT.md whose "## " sections tasks pull in by name, and an
// optional project.yaml with project-wide defaults. [Load] parses all of it,
// reports every problem it finds at once as [Errors] (file, line and a fix
// for each), and produces for every task the normalised snapshot that is
// shipped to a node and hashed. Load only reads; it never writes.
//
// Names of projects and tasks are restricted by [ValidName] so that no name
// taken from the specs directory can escape a path or mean anything to a
// shell.
package spec
