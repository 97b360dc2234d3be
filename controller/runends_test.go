package controller

import "testing"

// TestRunEnds: a foreground start's controller ends once its own project
// and those handed to it are finished, though an interrupted start's
// project stays active (issue 32: `start B` ran until A, left by a
// Ctrl-C, was finished too); any other controller ends with nothing left
// to serve, a daemon only on a shutdown request.
func TestRunEnds(t *testing.T) {
	tests := []struct {
		name     string
		served   []string
		own      string
		handed   map[string]bool
		daemon   bool
		shutdown bool
		want     bool
	}{
		{name: "nothing served", want: true},
		{name: "a project served", served: []string{"a"}, want: false},
		{name: "daemon with nothing served", daemon: true, want: false},
		{name: "daemon asked to stop", served: []string{"a"}, daemon: true, shutdown: true, want: true},
		{name: "own project runs", served: []string{"a", "b"}, own: "b", want: false},
		{name: "own project finished, an adopted one active", served: []string{"a"}, own: "b", want: true},
		{name: "own project finished, a handed one active", served: []string{"a", "c"}, own: "b", handed: map[string]bool{"c": true}, want: false},
		{name: "own and handed finished", served: []string{"a"}, own: "b", handed: map[string]bool{"c": true}, want: true},
		{name: "own project finished, nothing else", own: "b", want: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := runEnds(tc.served, tc.own, tc.handed, tc.daemon, tc.shutdown); got != tc.want {
				t.Errorf("runEnds(%v, %q, %v, daemon %v, shutdown %v) = %v, want %v",
					tc.served, tc.own, tc.handed, tc.daemon, tc.shutdown, got, tc.want)
			}
		})
	}
}
