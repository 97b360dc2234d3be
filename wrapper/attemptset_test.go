package wrapper

import (
	"io"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/attempt"
	"github.com/dispatch-tool/dispatch/wrapper/kill"
)

// A supervisor runs each attempt of its batch as soon as that attempt is
// prepared, so an attempt may join the set the signals reach after a
// signal came: one that joins after a SIGTERM, or after `kill` asked for
// it, stops as it joins; a request for an earlier attempt stops nothing.
func TestAttemptSetStopsLateJoiners(t *testing.T) {
	tests := []struct {
		name     string
		sigterm  bool // the set was told to stop everything before the join
		request  int  // attempt a kill request names (0: none)
		wantStop bool
	}{
		{"nothing asked", false, 0, false},
		{"SIGTERM before the join", true, 0, true},
		{"kill asked before the join", false, 1, true},
		{"a request for an earlier attempt", false, -1, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "demo", "tasks", "T1")
			s := &supervisor{dir: dir, launch: wire.Launch{Attempt: 1, GraceSeconds: 1}, logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
			if tc.request != 0 {
				a := max(tc.request, 0)
				if err := kill.WriteRequest(dir, kill.Request{Attempt: a, GraceSeconds: 0}); err != nil {
					t.Fatal(err)
				}
			}
			set := &attemptSet{}
			if tc.sigterm {
				set.attempts(true)
			}
			set.add(s)
			if got := s.stopping(); got != tc.wantStop {
				t.Errorf("stopped %v, want %v", got, tc.wantStop)
			}
			if tc.wantStop && s.stopReason != attempt.ReasonKill {
				t.Errorf("stop reason %q, want %q", s.stopReason, attempt.ReasonKill)
			}
			if got := set.attempts(false); len(got) != 1 || got[0] != s {
				t.Errorf("set holds %v, want the attempt", got)
			}
		})
	}
}
