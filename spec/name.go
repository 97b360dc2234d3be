package spec

import (
	"fmt"
	"regexp"
	"strings"
	"unicode"
)

// namePattern is the rule every project and task name follows.
const namePattern = `^[A-Za-z0-9][A-Za-z0-9._-]*$`

// maxNameLen keeps a name (plus ".md") within the 255-byte file name limit
// of common file systems.
const maxNameLen = 250

var nameRE = regexp.MustCompile(namePattern)

// IDPattern matches a task ID: a capital letter and digits, like S01.
var IDPattern = regexp.MustCompile(`^[A-Z][0-9]+$`)

// idPrefix finds the ID at the start of a task file name.
var idPrefix = regexp.MustCompile(`^[A-Z][0-9]+`)

// shellMeta are the characters that mean something to a POSIX shell or to
// glob expansion; they get their own message because they are the usual
// sign of an injection attempt or a copy-paste accident.
const shellMeta = "$;&|<>*?'\"`(){}[]!#~^%=\\"

// NameError reports a project or task name that breaks the name rule.
type NameError struct {
	Name    string // the rejected name
	Problem string // what is wrong with it, e.g. `contains ".."`
}

// Error says what is wrong with the name and repeats the rule.
// BadInput marks an invalid name as the operator's to fix (exit 2).
func (e *NameError) BadInput() bool { return true }

func (e *NameError) Error() string {
	return fmt.Sprintf("invalid name %q: %s (names match %s and never contain \"..\")", e.Name, e.Problem, namePattern)
}

// ValidName checks a project or task name: it must match
// ^[A-Za-z0-9][A-Za-z0-9._-]*$, must not contain "..", and must be at most
// 250 bytes long. The error is a *NameError saying what is wrong.
func ValidName(name string) error {
	if p := nameProblem(name); p != "" {
		return &NameError{Name: name, Problem: p}
	}
	return nil
}

func nameProblem(name string) string {
	switch {
	case name == "":
		return "empty"
	case strings.Contains(name, "/"):
		return "contains a slash '/'"
	case strings.Contains(name, "\\"):
		return "contains a backslash '\\'"
	case strings.Contains(name, ".."):
		return `contains ".."`
	case len(name) > maxNameLen:
		return fmt.Sprintf("longer than %d bytes", maxNameLen)
	}
	for _, r := range name {
		switch {
		case r < 0x80 && strings.ContainsRune(shellMeta, r):
			return fmt.Sprintf("contains shell metacharacter %q", r)
		case unicode.IsSpace(r):
			return fmt.Sprintf("contains whitespace %q", r)
		case !(r == '.' || r == '_' || r == '-' || r < 0x80 && (unicode.IsLetter(r) || unicode.IsDigit(r))):
			return fmt.Sprintf("contains %q; only ASCII letters, digits, '.', '_' and '-' are allowed", r)
		}
	}
	switch name[0] {
	case '.':
		return "starts with a dot"
	case '-', '_':
		return fmt.Sprintf("starts with %q", name[0])
	}
	if !nameRE.MatchString(name) {
		// Unreachable with the checks above; kept so the regexp stays the
		// single source of truth if the rule ever changes.
		return "does not match the name rule"
	}
	return ""
}

// taskFileName classifies a directory entry name. isTask is false for files
// that are not task files at all (SHARED_CONTEXT.md, README.md, notes.txt).
// For a name that starts with an ID and ends in .md but is otherwise wrong,
// isTask is true and problem says why.
func taskFileName(name string) (id, slug string, isTask bool, problem string) {
	stem, ok := strings.CutSuffix(name, ".md")
	if !ok {
		return "", "", false, ""
	}
	id = idPrefix.FindString(stem)
	if id == "" {
		return "", "", false, ""
	}
	if p := nameProblem(stem); p != "" {
		return id, "", true, p
	}
	rest := stem[len(id):]
	if rest == "" {
		return id, "", true, ""
	}
	if rest[0] != '-' {
		return id, "", true, fmt.Sprintf("the ID %s is followed by %q instead of '-'", id, rest[:1])
	}
	if rest == "-" {
		return id, "", true, "empty slug after '-'"
	}
	return id, rest[1:], true, ""
}
