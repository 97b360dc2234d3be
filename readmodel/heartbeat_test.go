package readmodel

import (
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/domain"
)

// TestHeartbeatOutputAt: a running task's output_at is when its tool last
// wrote: the controller's time of the heartbeat less the quiet time the
// heartbeat states; "" when it states none.
func TestHeartbeatOutputAt(t *testing.T) {
	at := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct{ hb, want string }{
		{"4 1764331200000000000 3000000000\n", "2026-11-28T11:59:57Z"},
		{"4 1764331200000000000\n", ""},
		{"forged text", ""},
	} {
		hbAt, out, _ := heartbeat(domain.Task{Heartbeat: tc.hb, HeartbeatAt: at}, domain.Project{}, nil)
		if hbAt != "2026-11-28T12:00:00Z" || out != tc.want {
			t.Errorf("heartbeat %q: heartbeat_at %q, output_at %q; want output_at %q", tc.hb, hbAt, out, tc.want)
		}
	}
}
