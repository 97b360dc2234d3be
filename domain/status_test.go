package domain

import "testing"

func TestStateMachine(t *testing.T) {
	for from, tos := range legal {
		for _, to := range Statuses {
			want := false
			for _, x := range tos {
				want = want || x == to
			}
			if got := Legal(from, to); got != want {
				t.Errorf("Legal(%s, %s) = %v, want %v", from, to, got, want)
			}
		}
	}
	// No status may move to itself: that would be an event that says nothing.
	for _, st := range Statuses {
		if Legal(st, st) {
			t.Errorf("Legal(%s, %s) is true", st, st)
		}
	}
}
