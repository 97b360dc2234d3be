package main

import (
	"errors"
	"fmt"
	"testing"

	"github.com/dispatch-tool/dispatch/control"
	"github.com/dispatch-tool/dispatch/home"
	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/plan"
	"github.com/dispatch-tool/dispatch/spec"
	"github.com/dispatch-tool/dispatch/store"
)

// TestExitTwoIsOnePredicate: every kind of bad input, wrapped as the
// commands wrap it, answers the one predicate that picks exit 2; the
// failures of the work do not.
func TestExitTwoIsOnePredicate(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("dispatch start p: %w", err) }
	_, nodesErr := nodes.Parse("nodes.yaml", []byte("nodes: 3\n"))
	_, specErr := spec.Load(t.TempDir(), "nope")
	bad := map[string]error{
		"nodes.yaml":      nodesErr,
		"one config line": &nodes.ConfigError{File: "nodes.yaml", Line: 1, Msg: "x"},
		"specs":           spec.Errors{&spec.Error{File: "S01.md", Msg: "x"}},
		"one spec":        &spec.Error{File: "S01.md", Msg: "x"},
		"unknown project": specErr,
		"name":            &spec.NameError{},
		"plan":            &plan.Error{Problems: []string{"x"}},
		"socket":          &control.SocketError{},
		"locked home":     home.ErrLocked,
		"no database":     store.ErrNoDatabase,
		"no project":      store.ErrNotFound,
	}
	for name, err := range bad {
		if err == nil {
			t.Fatalf("%s: no error to test", name)
		}
		if !isConfigError(wrap(err)) {
			t.Errorf("%s (%T) is not taken for bad input", name, err)
		}
	}
	for name, err := range map[string]error{
		"unreachable node": nodes.ErrUnreachable,
		"work failed":      &workFailed{msg: "2 tasks failed"},
		"plain":            errors.New("disk full"),
	} {
		if isConfigError(wrap(err)) {
			t.Errorf("%s is taken for bad input", name)
		}
	}
}
