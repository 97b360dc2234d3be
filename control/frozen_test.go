package control

import "testing"

// TestStatStopped: a /proc/<pid>/stat line says stopped by its state after
// the command's last closing parenthesis, whatever the command holds.
func TestStatStopped(t *testing.T) {
	for _, tc := range []struct {
		name string
		stat string
		want bool
	}{
		{"running", "4242 (dispatch) R 1 4242 4242 0 -1", false},
		{"sleeping", "4242 (dispatch) S 1 4242 4242 0 -1", false},
		{"stopped by a signal", "4242 (dispatch) T 1 4242 4242 0 -1", true},
		{"stopped by a tracer", "4242 (dispatch) t 1 4242 4242 0 -1", true},
		{"a command with ) T in its name", "4242 (a) T (b) S 1 4242", false},
		{"a command with spaces, stopped", "4242 (my dispatch) T 1", true},
		{"zombie", "4242 (dispatch) Z 1", false},
		{"no parenthesis", "4242 dispatch T 1", false},
		{"cut after the command", "4242 (dispatch)", false},
		{"empty", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := statStopped([]byte(tc.stat)); got != tc.want {
				t.Errorf("statStopped(%q) = %v, want %v", tc.stat, got, tc.want)
			}
		})
	}
}
