package nodes

import (
	"errors"
	"fmt"
	"net"
	"testing"
)

// TestUnreachableCauseFirst: an unreachable node's error leads with the
// node and the cause, then where it was dialled and what dispatch was
// doing; a fix stays last; other errors are left as they are.
func TestUnreachableCauseFirst(t *testing.T) {
	dns := &net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "no such host", Name: "bx1", IsNotFound: true}}
	ue := &UnreachableError{Node: "bx1", Addr: "me@bx1:22", Err: dns}
	noKey := &UnreachableError{Node: "bx1", Addr: "me@bx1:22", Err: errors.New("no SSH key to offer\n  fix: create a key")}
	plain := errors.New("check wrapper: exit 1")
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"bare", ue, "node bx1 unreachable: lookup bx1: no such host (ssh me@bx1:22)"},
		{"wrapped", fmt.Errorf("resolving work_dir ~/dispatch: %w", ue),
			"node bx1 unreachable: lookup bx1: no such host (ssh me@bx1:22, while resolving work_dir ~/dispatch)"},
		{"with a fix", fmt.Errorf("resolving work_dir ~/d: %w", noKey),
			"node bx1 unreachable: no SSH key to offer (ssh me@bx1:22, while resolving work_dir ~/d)\n  fix: create a key"},
		{"not a node's", plain, "check wrapper: exit 1"},
	}
	for _, tt := range tests {
		got := CauseFirst(tt.err)
		if got.Error() != tt.want {
			t.Errorf("%s:\n got %q\nwant %q", tt.name, got.Error(), tt.want)
		}
		if tt.err != plain && !errors.Is(got, ErrUnreachable) {
			t.Errorf("%s: no longer ErrUnreachable", tt.name)
		}
	}
}
