package proc

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestExitError: how a process ended reads the same on every system, a
// signal by its conventional name, an unknown one by its number.
func TestExitError(t *testing.T) {
	t.Parallel()
	tests := []struct {
		code int
		sig  syscall.Signal
		want string
	}{
		{0, 0, "exit status 0"},
		{3, 0, "exit status 3"},
		{-1, syscall.SIGKILL, "killed by SIGKILL"},
		{-1, syscall.SIGTERM, "killed by SIGTERM"},
		{-1, syscall.SIGXFSZ, "killed by SIGXFSZ"},
		{-1, syscall.Signal(60), "killed by SIG60"},
	}
	for _, tc := range tests {
		if got := ExitError(tc.code, tc.sig); got != tc.want {
			t.Errorf("ExitError(%d, %d) = %q, want %q", tc.code, tc.sig, got, tc.want)
		}
	}
}

// TestOthersTask: a task directory is another node's only when its
// launch.json names another node; no node asked, no launch.json or one
// naming none leaves it to the caller.
func TestOthersTask(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, launch, node string
		want               bool
	}{
		{"same node", `{"node":"box1"}`, "box1", false},
		{"other node", `{"node":"box2"}`, "box1", true},
		{"any node asked", `{"node":"box2"}`, "", false},
		{"names none", `{"task":"T1"}`, "box1", false},
		{"no launch.json", "", "box1", false},
		{"unreadable launch.json", "{", "box1", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if tc.launch != "" {
				if err := os.WriteFile(filepath.Join(dir, "launch.json"), []byte(tc.launch), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if got := OthersTask(tc.node, dir); got != tc.want {
				t.Errorf("OthersTask(%q) = %v, want %v", tc.node, got, tc.want)
			}
		})
	}
}
