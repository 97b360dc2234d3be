package gitresult

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestGitCommandName: an error names the git command run, never one of
// the -c settings put before it.
func TestGitCommandName(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"status"}, "status"},
		{[]string{"-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false", "commit-tree", "x"}, "commit-tree"},
		{[]string{"-c", "a=b"}, ""},
		{nil, ""},
	}
	for _, tc := range tests {
		if got := gitCommandName(tc.args); got != tc.want {
			t.Errorf("gitCommandName(%q) = %q, want %q", tc.args, got, tc.want)
		}
	}
}

// TestSnapshotDirOf: `dispatch cleanup` finds a task directory's private
// git directory beside the wrapper, the same one however the directory
// is spelled, and another directory's elsewhere.
func TestSnapshotDirOf(t *testing.T) {
	t.Parallel()
	const bin = "/home/u/.dispatch/wrapper/v1/dispatch-wrapper"
	a := SnapshotDirOf(bin, "/w/demo/tasks/T1")
	tests := []struct {
		dir  string
		same bool
	}{
		{"/w/demo/tasks/T1/", true},
		{"/w/demo/./tasks/T1", true},
		{"/w/demo/tasks/T2", false},
	}
	if !strings.HasPrefix(a, filepath.Join(filepath.Dir(bin), ".ctl")+"/") || !strings.HasSuffix(a, ".git") {
		t.Fatalf("SnapshotDirOf = %s, want <wrapper dir>/.ctl/<hash>.git", a)
	}
	for _, tc := range tests {
		if got := SnapshotDirOf(bin, tc.dir); (got == a) != tc.same {
			t.Errorf("SnapshotDirOf(%s) = %s; same as T1's: %v, want %v", tc.dir, got, got == a, tc.same)
		}
	}
}
