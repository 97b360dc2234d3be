package wrapper

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/dispatch-tool/dispatch/wire"
)

// TestWhich: `which` finds executables the way the supervisor finds a
// tool: in PATH, overlaid by the PATH of the env map on stdin; directories
// and files without an execute bit do not count.
func TestWhich(t *testing.T) {
	dir := t.TempDir()
	for name, mode := range map[string]os.FileMode{"agent": 0o755, "notexec": 0o644} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"), mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "adir"), 0o755); err != nil {
		t.Fatal(err)
	}
	env, _ := json.Marshal(map[string]string{"PATH": dir + ":/bin"})
	out, code := runWrapper(t, string(env), "which", "agent", "notexec", "adir", "sh", "no-such-tool-xyz")
	var r wire.WhichReply
	if err := json.Unmarshal(out, &r); err != nil || code != 0 {
		t.Fatalf("which: exit %d: %s", code, out)
	}
	if r.Found["agent"] != filepath.Join(dir, "agent") || r.Found["sh"] != "/bin/sh" || len(r.Found) != 2 {
		t.Fatalf("found = %v; want agent in %s and sh in /bin only", r.Found, dir)
	}
	out, code = runWrapper(t, "", "which")
	wantError(t, out, code, wire.KindUsage)
}
