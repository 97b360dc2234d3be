package spec

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/dispatch-tool/dispatch/internal/yamlval"
)

// Error is one problem in a project's files: its file (as built from the
// specsDir given to Load), line, what is wrong and how to fix it.
type Error = yamlval.Problem

// Errors is every problem Load found, ordered by file and line.
type Errors = yamlval.Problems

// UnknownProjectError is returned by Load when specs/<Name> is not a
// project directory.
type UnknownProjectError struct {
	Name     string   // the requested project
	SpecsDir string   // where it was looked for
	Known    []string // the projects that do exist, sorted; see Projects
}

// Error names the project and lists the known ones, or says how to create
// a project when there are none.
// BadInput marks an unknown project as the operator's to fix (exit 2).
func (e *UnknownProjectError) BadInput() bool { return true }

func (e *UnknownProjectError) Error() string {
	if len(e.Known) == 0 {
		return fmt.Sprintf("unknown project %q: %s has no projects; create one by writing %s",
			e.Name, e.SpecsDir, examplePath(e.SpecsDir, e.Name))
	}
	msg := fmt.Sprintf("unknown project %q in %s; known projects: %s",
		e.Name, e.SpecsDir, strings.Join(e.Known, ", "))
	if s := yamlval.Suggest(e.Name, e.Known); s != "" {
		msg += fmt.Sprintf(" (did you mean %q?)", s)
	}
	return msg
}

func examplePath(specsDir, name string) string {
	return filepath.Join(specsDir, name, "S01-<title>.md")
}
