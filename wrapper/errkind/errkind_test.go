package errkind

import (
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/dispatch-tool/dispatch/wire"
)

// TestOf: the kind a reply carries is the one the failing layer gave, even
// wrapped; an untyped missing file is not_found, anything else io.
func TestOf(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"usage", Usagef("run: --dir is required"), wire.KindUsage},
		{"io", IO(errors.New("disk full")), wire.KindIO},
		{"typed", &Error{Kind: wire.KindTooLarge, Err: errors.New("big")}, wire.KindTooLarge},
		{"wrapped", fmt.Errorf("untar: %w", Usagef("bad entry")), wire.KindUsage},
		{"missing file", fmt.Errorf("open: %w", os.ErrNotExist), wire.KindNotFound},
		{"untyped", errors.New("something"), wire.KindIO},
	}
	for _, tc := range tests {
		if got := Of(tc.err); got != tc.want {
			t.Errorf("%s: Of(%v) = %q, want %q", tc.name, tc.err, got, tc.want)
		}
	}
	if got := Usagef("a %d", 1).Error(); got != "a 1" {
		t.Errorf("Usagef message %q", got)
	}
}
