//go:build linux

package wrapper

import (
	"os"
	"strings"
	"testing"

	"github.com/dispatch-tool/dispatch/wire"
)

// TestStartPermanent: a start failure that no retry mends (a tool the
// sandbox cannot run, a launch asking for network limits without the
// sandbox) is classed start_permanent with the fix in its error; one that
// another attempt may mend (a failing setup) stays start (issue 32 item 4).
func TestStartPermanent(t *testing.T) {
	n := newSandboxNode(t, "")
	f, err := os.CreateTemp("/tmp", "dispatch-tool-under-tmp")
	if err != nil {
		t.Fatal(err)
	}
	tool := f.Name()
	t.Cleanup(func() { os.Remove(tool) })
	if _, err := f.WriteString("#!/bin/sh\necho ran\n"); err != nil || f.Chmod(0o755) != nil || f.Close() != nil {
		t.Fatalf("write %s: %v", tool, err)
	}
	tests := []struct {
		id        string
		launch    wire.Launch
		class     string
		wantError string
	}{
		{"TMPTOOL", wire.Launch{Command: []string{tool}, Sandbox: wire.SandboxBwrap}, wire.ClassStartPermanent,
			"under /tmp, which the sandbox replaces with the attempt's own; install it elsewhere"},
		{"NONET", wire.Launch{Command: shell("echo ran"), Network: wire.NetworkNone}, wire.ClassStartPermanent,
			"network: none needs the sandbox, and launch.json does not ask for it"},
		{"SETUP", wire.Launch{Command: shell("echo ran"), Setup: "exit 1", Sandbox: wire.SandboxBwrap}, wire.ClassStart,
			"setup failed"},
	}
	var items []wire.LaunchItem
	for _, tc := range tests {
		items = append(items, n.item(tc.id, tc.launch))
	}
	n.launch(t, items...)
	for _, tc := range tests {
		st := n.final(t, tc.id)
		if st.Status != wire.StatusFailed || st.ErrorClass != tc.class || !strings.Contains(st.Error, tc.wantError) {
			t.Errorf("%s: %s, class %q, error %q; want failed, %s, %q", tc.id, st.Status, st.ErrorClass, st.Error, tc.class, tc.wantError)
		}
	}
}
