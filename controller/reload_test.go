package controller

import (
	"reflect"
	"testing"

	"github.com/dispatch-tool/dispatch/nodes"
)

func TestDecideReload(t *testing.T) {
	a := nodes.Node{Name: "a", SSH: "a.example", Slots: 2}
	b := nodes.Node{Name: "b", Slots: 1}
	moreSlots := a
	moreSlots.Slots = 4
	moved := a
	moved.SSH = "a2.example"
	renamed := a
	renamed.Name = "a2"
	tests := []struct {
		name    string
		current map[string]nodes.Node
		next    []nodes.Node
		work    map[string]int
		want    map[string]nodeStep
	}{
		{name: "unchanged", current: map[string]nodes.Node{"a": a}, next: []nodes.Node{a},
			want: map[string]nodeStep{"a": stepKeep}},
		{name: "slots: same connection", current: map[string]nodes.Node{"a": a}, next: []nodes.Node{moreSlots}, work: map[string]int{"a": 1},
			want: map[string]nodeStep{"a": stepUpdate}},
		{name: "renamed with an attempt running: the old name drains", current: map[string]nodes.Node{"a": a}, next: []nodes.Node{renamed},
			work: map[string]int{"a": 1}, want: map[string]nodeStep{"a2": stepOpen, "a": stepDrain}},
		{name: "removed and idle: closed", current: map[string]nodes.Node{"a": a, "b": b}, next: []nodes.Node{b},
			want: map[string]nodeStep{"a": stepClose, "b": stepKeep}},
		{name: "moved with work: drains", current: map[string]nodes.Node{"a": a}, next: []nodes.Node{moved}, work: map[string]int{"a": 2},
			want: map[string]nodeStep{"a": stepDrain}},
		{name: "moved and idle: reopened", current: map[string]nodes.Node{"a": a}, next: []nodes.Node{moved},
			want: map[string]nodeStep{"a": stepReopen}},
		{name: "a drained node back as it was", current: map[string]nodes.Node{"a": a}, next: []nodes.Node{a}, work: map[string]int{"a": 1},
			want: map[string]nodeStep{"a": stepKeep}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := map[string]nodeStep{}
			for _, d := range decideReload(tc.current, tc.next, tc.work) {
				got[d.name] = d.step
				if (d.step == stepDrain) != (d.why != "") {
					t.Errorf("%s: step %s with reason %q", d.name, d.step, d.why)
				}
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("decideReload = %v, want %v", got, tc.want)
			}
		})
	}
}
