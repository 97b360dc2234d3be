package nodes

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestParseSlurm: a node's slurm: block is read with its defaults
// (max_pending = slots); every bad value is refused at its line with what
// is wrong and the fix, and an sbatch option dispatch sets itself is
// refused from extra.
func TestParseSlurm(t *testing.T) {
	node := func(body string) string {
		return "nodes:\n  - name: hpc\n    ssh: login.example.org\n    slots: 4\n" + body
	}
	tests := []struct {
		name, yaml string
		want       *Slurm
		line       int
		problem    string
	}{
		{"absent", node(""), nil, 0, ""},
		{"empty", node("    slurm:\n"), &Slurm{MaxPending: 4}, 0, ""},
		{"all keys", node("    slurm:\n      partition: gpu,cpu\n      account: lab-1\n      qos: normal\n      time: 2h\n      max_pending: 2\n      extra: [--gres=gpu:1, --exclusive]\n"),
			&Slurm{Partition: "gpu,cpu", Account: "lab-1", QOS: map[int]string{1: "normal"}, Time: 2 * time.Hour, MaxPending: 2,
				Extra: []string{"--gres=gpu:1", "--exclusive"}}, 0, ""},
		{"qos by priority", node("    slurm: {qos: {1: urgent, 5: normal, 8: scavenger}}\n"),
			&Slurm{QOS: map[int]string{1: "urgent", 5: "normal", 8: "scavenger"}, MaxPending: 4}, 0, ""},
		{"unknown key", node("    slurm: {partiton: gpu}\n"), nil, 5, `unknown key "partiton"`},
		{"not a mapping", node("    slurm: gpu\n"), nil, 5, "must be a mapping"},
		{"bad duration", node("    slurm:\n      time: 2 hours\n"), nil, 6, `"2 hours" is not a duration`},
		{"time without unit", node("    slurm:\n      time: 120\n"), nil, 6, "time must be a duration, not 120"},
		{"time under a minute", node("    slurm: {time: 30s}\n"), nil, 5, "shorter than a minute"},
		{"max_pending over slots", node("    slurm: {max_pending: 5}\n"), nil, 5, "max_pending must be a whole number from 1 to 4, not 5"},
		{"bad partition", node("    slurm: {partition: \"gpu; rm -rf\"}\n"), nil, 5, "is not a Slurm name"},
		{"qos key not a priority", node("    slurm:\n      qos: {0: urgent}\n"), nil, 6, `qos key "0" is not a priority`},
		{"extra not a list", node("    slurm: {extra: --exclusive}\n"), nil, 5, "extra must be a list"},
		{"extra job name", node("    slurm:\n      extra:\n        - --job-name=x\n"), nil, 7, "--job-name is set by dispatch"},
		{"extra output", node("    slurm: {extra: [--output=/tmp/x]}\n"), nil, 5, "--output is set by dispatch"},
		{"extra wrap", node("    slurm: {extra: [--wrap=true]}\n"), nil, 5, "--wrap is set by dispatch"},
		{"extra short job name", node("    slurm: {extra: [-Jx]}\n"), nil, 5, "sbatch's --job-name"},
		{"extra abbreviation", node("    slurm: {extra: [--job=x]}\n"), nil, 5, "abbreviation of --job-name"},
		{"extra not an option", node("    slurm: {extra: [gpu:1]}\n"), nil, 5, "not a long sbatch option"},
		{"extra mem", node("    slurm: {extra: [--mem=4G]}\n"), nil, 5, "write limits: {memory: ...}"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Parse("nodes.yaml", []byte(tc.yaml))
			if tc.problem == "" {
				if err != nil {
					t.Fatal(err)
				}
				if got := cfg.Nodes[0].Slurm; !reflect.DeepEqual(got, tc.want) {
					t.Errorf("slurm = %+v, want %+v", got, tc.want)
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

// TestSlurmQOSFor: a task's priority takes the QoS of the nearest key at
// or before it; before the first key, none.
func TestSlurmQOSFor(t *testing.T) {
	s := &Slurm{QOS: map[int]string{3: "urgent", 5: "normal", 8: "low"}}
	for prio, want := range map[int]string{1: "", 2: "", 3: "urgent", 4: "urgent", 5: "normal", 7: "normal", 8: "low", 9: "low"} {
		if got := s.QOSFor(prio); got != want {
			t.Errorf("QOSFor(%d) = %q, want %q", prio, got, want)
		}
	}
	if got := (&Slurm{}).QOSFor(1); got != "" {
		t.Errorf("no qos: QOSFor(1) = %q, want none", got)
	}
}
