package sandbox

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestSandboxRefusals: what the sandbox of an attempt cannot run is
// known to `which` before any attempt: an executable under /tmp, or
// lying directly in a directory the sandbox hides (the home); one in a
// directory of its own under the home, or in the system's, runs (issue 32
// item 4).
func TestSandboxRefusals(t *testing.T) {
	home, work := "/home/u", "/home/u/.dispatch/work"
	bin := filepath.Join(work, ".bin")
	found := map[string]string{
		"tmptool":  "/tmp/x/tmptool",
		"hometool": "/home/u/hometool",
		"local":    "/home/u/.local/bin/local",
		"sh":       "/bin/sh",
	}
	got := Refusals(found, bin, []string{home})
	want := map[string]string{
		"tmptool":  "under /tmp, which the sandbox replaces with the attempt's own; install it elsewhere",
		"hometool": "lies directly in /home/u, which the sandbox hides",
	}
	if len(got) != len(want) {
		t.Fatalf("refusals = %q; want only %v", got, want)
	}
	for name, w := range want {
		if !strings.Contains(got[name], w) {
			t.Errorf("refusal of %s = %q; want it to say %q", name, got[name], w)
		}
	}
	if got := Refusals(found, "/opt/wrapper", []string{home}); got != nil {
		t.Errorf("a wrapper outside a work_dir's .bin: refusals %q, want none (no work_dir known)", got)
	}
}
