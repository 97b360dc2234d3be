package collect

import (
	"errors"
	"strings"
	"testing"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/errkind"
)

// TestReadRequest: what the controller may ask for, and what is refused as
// a usage error before anything is sent.
func TestReadRequest(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     int    // attempts read
		refused  string // part of the usage error; "" for none
	}{
		{"two attempts", `{"attempts":[{"dir":"/w/p/tasks/S01","attempt":1},{"dir":"/w/p/tasks/S02","attempt":3}]}`, 2, ""},
		{"none", `{"attempts":[]}`, 0, ""},
		{"not json", "not json", 0, "not a collect request"},
		{"relative dir", `{"attempts":[{"dir":"rel/x","attempt":1}]}`, 0, "absolute, clean"},
		{"dir with ..", `{"attempts":[{"dir":"/a/../b","attempt":1}]}`, 0, "absolute, clean"},
		{"attempt 0", `{"attempts":[{"dir":"/a/b","attempt":0}]}`, 0, "attempt of 1 or more"},
		{"too large", `{"attempts":[` + strings.Repeat(" ", MaxRequest) + `]}`, 0, "larger than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := ReadRequest(strings.NewReader(tc.in))
			if tc.refused == "" {
				if err != nil || len(req.Attempts) != tc.want {
					t.Fatalf("got %d attempts, %v; want %d", len(req.Attempts), err, tc.want)
				}
				return
			}
			var ce *errkind.Error
			if !errors.As(err, &ce) || ce.Kind != wire.KindUsage || !strings.Contains(err.Error(), tc.refused) {
				t.Fatalf("err %v; want a usage error saying %q", err, tc.refused)
			}
		})
	}
}
