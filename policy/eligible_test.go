package policy

import (
	"testing"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/nodes"
)

// TestEligibleSlurm: a Slurm node takes no task (its executor is not
// built), so its login host never runs one as if it were an SSH node; the
// same node without slurm: does.
func TestEligibleSlurm(t *testing.T) {
	cfg, err := nodes.Parse("nodes.yaml", []byte("nodes:\n  - {name: hpc, ssh: login, sandbox: off, slurm: {partition: gpu}}\n  - {name: login, ssh: login, sandbox: off}\n"))
	if err != nil {
		t.Fatal(err)
	}
	task := &domain.Task{ID: "S01", Type: "implementation", Tool: "shell"}
	if ok, why := Eligible(cfg, task, cfg.Nodes[0]); ok || why != SlurmNotRunning {
		t.Errorf("Slurm node: Eligible = %v %q, want refused: %s", ok, why, SlurmNotRunning)
	}
	if ok, why := Eligible(cfg, task, cfg.Nodes[1]); !ok {
		t.Errorf("SSH node: Eligible = false %q", why)
	}
}
