package badinput

import (
	"errors"
	"fmt"
	"testing"
)

type bad struct{ yes bool }

func (b bad) Error() string  { return "bad" }
func (b bad) BadInput() bool { return b.yes }

func TestIs(t *testing.T) {
	tests := []struct {
		err  error
		want bool
	}{
		{bad{true}, true},
		{fmt.Errorf("start: %w", bad{true}), true},
		{errors.Join(errors.New("x"), bad{true}), true},
		{bad{false}, false},
		{errors.New("disk full"), false},
		{nil, false},
	}
	for _, tt := range tests {
		if got := Is(tt.err); got != tt.want {
			t.Errorf("Is(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}
