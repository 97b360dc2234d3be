package nodes

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestParsePreemption: controller.preemption is off by default; a value
// is read with its default grace; a bad one is refused at its line, with
// what is wrong and the fix.
func TestParsePreemption(t *testing.T) {
	const base = "nodes:\n  - name: local\n"
	tests := []struct {
		name, yaml string
		want       Preemption
		line       int
		problem    string
	}{
		{"absent", "", Preemption{}, 0, ""},
		{"gap only", "controller:\n  preemption: {priority_gap: 3}\n", Preemption{PriorityGap: 3, Grace: DefaultPreemptionGrace}, 0, ""},
		{"gap and grace", "controller:\n  preemption:\n    priority_gap: 1\n    grace: 5s\n", Preemption{PriorityGap: 1, Grace: 5 * time.Second}, 0, ""},
		{"gap zero", "controller:\n  preemption: {priority_gap: 0}\n", Preemption{}, 2, "priority_gap must be a whole number from 1 to 8, not 0"},
		{"gap nine", "controller:\n  preemption:\n    priority_gap: 9\n", Preemption{}, 3, "priority_gap must be a whole number from 1 to 8, not 9"},
		{"gap missing", "controller:\n  preemption: {grace: 10s}\n", Preemption{}, 2, "preemption needs priority_gap"},
		{"grace no unit", "controller:\n  preemption: {priority_gap: 2, grace: 30}\n", Preemption{}, 2, "grace must be a duration, not 30"},
		{"grace zero", "controller:\n  preemption: {priority_gap: 2, grace: 0s}\n", Preemption{}, 2, "must be positive"},
		{"grace too long", "controller:\n  preemption:\n    priority_gap: 2\n    grace: 1h\n", Preemption{}, 4, "grace 1h0m0s is longer than 10m0s"},
		{"unknown key", "controller:\n  preemption: {priority_gap: 2, gap: 3}\n", Preemption{}, 2, `unknown key "gap"`},
		{"not a mapping", "controller:\n  preemption: 3\n", Preemption{}, 2, "must be a mapping"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Parse("nodes.yaml", []byte(tc.yaml+base))
			if tc.problem == "" {
				if err != nil {
					t.Fatal(err)
				}
				if cfg.Controller.Preemption != tc.want || cfg.Controller.Preemption.On() != (tc.want.PriorityGap > 0) {
					t.Errorf("preemption = %+v, want %+v", cfg.Controller.Preemption, tc.want)
				}
				return
			}
			var errs ConfigErrors
			if !errors.As(err, &errs) || len(errs) == 0 {
				t.Fatalf("err = %v, want a problem %q", err, tc.problem)
			}
			if !strings.Contains(errs[0].Msg, tc.problem) || errs[0].Line != tc.line || errs[0].Fix == "" {
				t.Errorf("problem = line %d %q (fix %q), want line %d %q with a fix", errs[0].Line, errs[0].Msg, errs[0].Fix, tc.line, tc.problem)
			}
		})
	}
}
