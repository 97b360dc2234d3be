package nodes

import (
	"time"

	"gopkg.in/yaml.v3"

	"github.com/dispatch-tool/dispatch/internal/yamlval"
)

// Preemption is controller.preemption: a ready task that finds no free
// slot may stop a running task whose priority is at least PriorityGap
// worse (priority 1 is first, 9 last). The stopped attempt gets SIGTERM,
// then SIGKILL after Grace; its task waits again without using a retry.
type Preemption struct {
	// PriorityGap is the least difference of priority that preempts; 0
	// (the default) turns preemption off.
	PriorityGap int
	// Grace is the time between SIGTERM and SIGKILL of a preempted attempt.
	Grace time.Duration
}

// On reports whether preemption is configured.
func (p Preemption) On() bool { return p.PriorityGap > 0 }

// DefaultPreemptionGrace is preemption.grace when nodes.yaml gives none.
const DefaultPreemptionGrace = 30 * time.Second

// MaxPreemptionGrace bounds preemption.grace: an urgent task waits that
// long at worst for its slot.
const MaxPreemptionGrace = 10 * time.Minute

// preemption reads controller.preemption: {priority_gap: N, grace: D}.
// priority_gap is required (1 to 8: priorities run from 1 to 9).
func (p *parser) preemption(v *yaml.Node) Preemption {
	const example = "write preemption: {priority_gap: 3, grace: 30s}"
	out := Preemption{Grace: DefaultPreemptionGrace}
	f, ok := p.fields(v, "controller.preemption", "controller.preemption", Keys["preemption"]...)
	if !ok {
		return Preemption{}
	}
	gap := f["priority_gap"].val
	if gap == nil || yamlval.IsNull(gap) {
		p.Errorf(v, example, "controller: preemption needs priority_gap (how much worse a running task's priority must be to be stopped)")
		return Preemption{}
	}
	n, ok := p.Int(gap, "controller.preemption", "priority_gap", 1, 8)
	if !ok {
		return Preemption{}
	}
	if g := f["grace"].val; g != nil && !yamlval.IsNull(g) {
		d, ok := p.Duration(g, "controller.preemption", "grace")
		if !ok {
			return Preemption{}
		}
		if d > MaxPreemptionGrace {
			p.Errorf(g, "write a grace of at most 10m", "controller.preemption: grace %s is longer than %s", d, MaxPreemptionGrace)
			return Preemption{}
		}
		out.Grace = d
	}
	out.PriorityGap = n
	return out
}
