package gitcmd

import "testing"

// TestRepoFlag: --repo must be an absolute, clean path ending in repo.git.
func TestRepoFlag(t *testing.T) {
	for _, tc := range []struct {
		repo string
		ok   bool
	}{
		{"/w/p/repo.git", true},
		{"", false},
		{"/w/p/other.git", false},
		{"/w/p/../q/repo.git", false},
		{"/w/p/repo.git/", false},
	} {
		_, err := repoFlag("git-have", tc.repo)
		if (err == nil) != tc.ok {
			t.Errorf("%q: %v, want ok=%v", tc.repo, err, tc.ok)
		}
	}
}
